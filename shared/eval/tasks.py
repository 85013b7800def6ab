"""The offline multiple-choice suite, scored in-process: the same numbers lm-eval gives, without the harness.

Why a second scorer beside the harness adapter: the trainer evaluates every `eval_every` steps,
and importing lm-eval (with `datasets`, `evaluate`, …) into every training worker for four small
multiple-choice tasks costs more than scoring them. This module reads the suite's own files (the
harness's YAML + JSONL format, data/reference/tasks/) and computes lm-eval's `multiple_choice`
arithmetic: each choice's log-likelihood as a continuation of the context (`target_delimiter` +
choice), acc (highest log-likelihood is gold), acc_norm (highest per character of the choice) and logprob (the
gold choice's log-likelihood, nats). tests/services/evaluator checks it against the harness.

Task JSONL lines are validated as they are read: a malformed line is an error naming file and line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from shared.eval.scoring import encode_pair, score_continuations

SUITE_DIR = Path(__file__).resolve().parents[2] / "data" / "reference" / "tasks"
REPO_ROOT = SUITE_DIR.parents[2]


class TaskFileError(ValueError):
    """A task definition or data file that cannot be scored (named with file and line)."""


@dataclass(frozen=True)
class TaskItem:
    context: str
    choices: list[str]
    gold: int


@dataclass(frozen=True)
class LocalTask:
    name: str
    yaml_path: Path
    data_path: Path
    target_delimiter: str
    fields: tuple[str, str, str]  # doc_to_text, doc_to_choice, doc_to_target: field names of each record


class _HarnessLoader(yaml.SafeLoader):
    """Reads lm-eval YAML without executing it: `!function` tags stay strings."""


_HarnessLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


def _resolve_data(path: str, yaml_path: Path) -> Path:
    """A `data_files` entry: absolute, or relative to the working directory, else to the repository root
    (where the suite's own paths are written from)."""
    p = Path(path)
    for candidate in (p, REPO_ROOT / p) if not p.is_absolute() else (p,):
        if candidate.is_file():
            return candidate
    raise TaskFileError(f"{yaml_path}: data file {path!r} not found (relative paths are read from the working "
                        f"directory or {REPO_ROOT}); run from the repository root or make the path absolute")


def read_task_yaml(yaml_path: Path) -> LocalTask:
    """A local multiple-choice task whose doc_to_text/choice/target name record fields (the suite's form)."""
    try:
        cfg = yaml.load(yaml_path.read_text(encoding="utf-8"), Loader=_HarnessLoader)
    except yaml.YAMLError as e:
        raise TaskFileError(f"{yaml_path}: not valid YAML ({e})") from None
    if not isinstance(cfg, dict) or "task" not in cfg:
        raise TaskFileError(f"{yaml_path}: a task file needs a 'task' name")
    if cfg.get("output_type") != "multiple_choice" or cfg.get("dataset_path") != "json":
        raise TaskFileError(f"{yaml_path}: only `output_type: multiple_choice` tasks with `dataset_path: json` are "
                            "scored in-process; run other tasks through `moelab eval CKPT --tasks PATH`")
    files = (cfg.get("dataset_kwargs") or {}).get("data_files")
    split = cfg.get("test_split", "test")
    data = files.get(split) if isinstance(files, dict) else files
    if not isinstance(data, str):
        raise TaskFileError(f"{yaml_path}: dataset_kwargs.data_files.{split} must name one JSONL file")
    fields = tuple(cfg.get(k) for k in ("doc_to_text", "doc_to_choice", "doc_to_target"))
    if not all(isinstance(f, str) and f.isidentifier() for f in fields):
        raise TaskFileError(f"{yaml_path}: doc_to_text/doc_to_choice/doc_to_target must each name a record field")
    return LocalTask(name=cfg["task"], yaml_path=yaml_path, data_path=_resolve_data(data, yaml_path),
                     target_delimiter=str(cfg.get("target_delimiter", " ")), fields=fields)  # type: ignore[arg-type]


def read_task_items(task: LocalTask, limit: int | None = None) -> list[TaskItem]:
    """The task's items in file order (the first `limit`); every line is checked, errors name file and line."""
    text_f, choice_f, gold_f = task.fields
    items = []
    with open(task.data_path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{task.data_path}:{n}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise TaskFileError(f"{where}: not valid JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise TaskFileError(f"{where}: a task record must be a JSON object")
            ctx, choices, gold = rec.get(text_f), rec.get(choice_f), rec.get(gold_f)
            if not isinstance(ctx, str):
                raise TaskFileError(f"{where}: field {text_f!r} must be a string")
            if not (isinstance(choices, list) and len(choices) >= 2 and all(isinstance(c, str) and c for c in choices)):
                raise TaskFileError(f"{where}: field {choice_f!r} must be a list of at least two non-empty strings")
            if not (isinstance(gold, int) and not isinstance(gold, bool) and 0 <= gold < len(choices)):
                raise TaskFileError(f"{where}: field {gold_f!r} must be an index into {choice_f!r} (0..{len(choices) - 1})")
            items.append(TaskItem(ctx, choices, gold))
    if not items:
        raise TaskFileError(f"{task.data_path}: the task has no items")
    return items if limit is None else items[:limit]


def discover_tasks(path: Path | str | None = None) -> list[LocalTask]:
    """Every task YAML in a folder (sorted by file name), or the one file given."""
    path = Path(path) if path is not None else SUITE_DIR
    if path.is_file():
        return [read_task_yaml(path)]
    if not path.is_dir():
        raise TaskFileError(f"{path}: no such task file or folder")
    found = [read_task_yaml(p) for p in sorted(path.glob("*.yaml"))]
    if not found:
        raise TaskFileError(f"{path}: no task YAML files in this folder")
    return found


def check_task_files(path: Path | str) -> list[str]:
    """Validate a local task file or folder before a harness run; returns the task names.

    Tasks in the suite's form (multiple choice, fields named) are checked record by record; any
    other `dataset_path: json` task has every data line checked to be a JSON object. Errors name
    file and line, so a broken line stops `moelab eval` before any model work, not mid-run.
    """
    path = Path(path)
    files = [path] if path.is_file() else sorted(path.glob("*.yaml"))
    if not files:
        raise TaskFileError(f"{path}: no task YAML files here")
    names = []
    for yaml_path in files:
        try:
            task = read_task_yaml(yaml_path)
        except TaskFileError as e:
            if "scored in-process" not in str(e) and "must each name a record field" not in str(e):
                raise
            cfg = yaml.load(yaml_path.read_text(encoding="utf-8"), Loader=_HarnessLoader) or {}
            if "task" not in cfg:
                continue  # a group or include-only file
            names.append(cfg["task"])
            files_cfg = (cfg.get("dataset_kwargs") or {}).get("data_files")
            data = list(files_cfg.values()) if isinstance(files_cfg, dict) else [files_cfg] if files_cfg else []
            for entry in data:
                _check_json_lines(_resolve_data(entry, yaml_path))
            continue
        read_task_items(task)
        names.append(task.name)
    return names


def _check_json_lines(data_path: Path) -> None:
    with open(data_path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                ok = isinstance(json.loads(line), dict)
            except json.JSONDecodeError as e:
                raise TaskFileError(f"{data_path}:{n}: not valid JSON ({e.msg})") from None
            if not ok:
                raise TaskFileError(f"{data_path}:{n}: a task record must be a JSON object")


def score_task(model, tokenizer, task: LocalTask, *, seq_len: int, batch_size: int = 8,
               limit: int | None = None) -> dict[str, float]:
    """acc, acc_norm and logprob of `task` (means over its first `limit` items)."""
    items = read_task_items(task, limit)
    requests = [encode_pair(tokenizer, it.context, task.target_delimiter + c) for it in items for c in it.choices]
    scored = iter(score_continuations(model, requests, seq_len=seq_len, batch_size=batch_size, pad_id=tokenizer.eos_id))
    acc = acc_norm = logprob = 0.0
    for it in items:
        lls = [next(scored).logprob for _ in it.choices]
        per_char = [ll / max(len(c), 1) for ll, c in zip(lls, it.choices, strict=True)]
        acc += float(max(range(len(lls)), key=lls.__getitem__) == it.gold)
        acc_norm += float(max(range(len(per_char)), key=per_char.__getitem__) == it.gold)
        logprob += lls[it.gold]
    n = len(items)
    return {"acc": acc / n, "acc_norm": acc_norm / n, "logprob": logprob / n}
