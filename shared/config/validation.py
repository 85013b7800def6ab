"""Checks of a config against the files it names: what field validation cannot see.

Why a second pass: a pydantic field sees its own value, not the disk. Whether `mixture.rates`
names sources the documents actually hold, whether every `data.inputs` source has a file, or
whether an existing tokenizer has more ids than `model.vocab_size` can only be answered by
looking. `moelab config check` runs these checks, and so does `moelab train` before any work, so
a config that cannot work is refused with the field named instead of failing mid-run.

Errors make the config unusable; warnings are printed and the run goes on (e.g. rates that do
not sum to 1 are normalised, which is allowed but should be said).
"""

from __future__ import annotations

import glob
import gzip
import json
from dataclasses import dataclass
from pathlib import Path

from shared.config.experiment import ExperimentConfig

RAW_SUFFIXES = (".jsonl", ".jsonl.gz")


@dataclass(frozen=True)
class Finding:
    field: str
    message: str
    error: bool = True

    def __str__(self) -> str:
        return f"  {self.field}: {self.message}"


def check_config(cfg: ExperimentConfig) -> list[Finding]:
    """Every problem found in `cfg` and the files it names, errors and warnings alike."""
    return [*_check_shapes(cfg), *_check_inputs(cfg), *_check_rates(cfg), *_check_tokenizer(cfg), *_check_init_from(cfg),
            *_check_balance(cfg), *_check_precision_backend(cfg)]


def _check_shapes(cfg: ExperimentConfig) -> list[Finding]:
    out = []
    if cfg.train.seq_len > cfg.model.max_seq_len:
        out.append(Finding("train.seq_len", f"{cfg.train.seq_len} is longer than model.max_seq_len "
                           f"({cfg.model.max_seq_len}); lower train.seq_len or raise model.max_seq_len"))
    tok = cfg.mixture.tokenizer
    if tok.path is None and tok.vocab_size > cfg.model.vocab_size:
        out.append(Finding("model.vocab_size", f"{cfg.model.vocab_size} is smaller than the tokenizer to be trained "
                           f"(mixture.tokenizer.vocab_size={tok.vocab_size}); token ids would overflow the embedding"))
    return out


def _check_balance(cfg: ExperimentConfig) -> list[Finding]:
    """A bias window must hold more than one update's tokens (else it changes nothing) and fewer than the
    run trains on (else the bias never moves); a router-LR cooldown must cover at least one step."""
    bal, tc, out = cfg.model.moe.balance, cfg.train, []
    window = bal.bias_update_window_tokens
    per_update = tc.micro_batch_size * tc.seq_len * tc.workers * (1 if bal.bias_update_every == "micro_batch" else tc.grad_accum)
    total = tc.micro_batch_size * tc.seq_len * tc.workers * tc.grad_accum * tc.steps
    if window and window <= per_update:
        out.append(Finding("model.moe.balance.bias_update_window_tokens", f"{window:,} tokens is no more than one bias "
                           f"update's {per_update:,} (bias_update_every={bal.bias_update_every}): the window changes "
                           "nothing; set 0 or a longer window"))
    if window > total:
        out.append(Finding("model.moe.balance.bias_update_window_tokens", f"{window:,} tokens is more than the run "
                           f"trains on ({total:,}): the bias would never move"))
    if bal.router_lr_cooldown and round(bal.router_lr_cooldown * tc.steps) < 1:
        out.append(Finding("model.moe.balance.router_lr_cooldown", f"{bal.router_lr_cooldown} of {tc.steps} steps is "
                           "less than one step: no step would cool down"))
    return out


def _check_precision_backend(cfg: ExperimentConfig) -> list[Finding]:
    """`precision.backend: torchao` needs the torchao package where the config runs (an error: the
    model cannot be built without it) and a CUDA GPU (a warning: a config is often checked on a
    machine other than the one it trains on; building the model there refuses it)."""
    prec = cfg.model.moe.precision
    if prec.backend != "torchao":
        return []
    from shared.precision.torchao_backend import torchao_missing  # imports torch: only when asked

    field = "model.moe.precision.backend"
    missing = torchao_missing()
    if missing:
        return [Finding(field, f"torchao: {missing}; or use backend=native (our fp8 path) or auto")]
    import torch

    if not torch.cuda.is_available():
        return [Finding(field, "torchao: no CUDA device is visible here; building the model on this machine will "
                        "refuse it (torchao's fp8 grouped GEMM needs an sm90 GPU)", error=False)]
    return []


def _check_init_from(cfg: ExperimentConfig) -> list[Finding]:
    """`train.init_from` must name a loadable checkpoint written with this very `model` section: its
    weights are copied in whole, so another shape cannot load and another routing or scaling
    setting would train a different function than the one that was saved."""
    if cfg.train.init_from is None:
        return []
    from shared.checkpoint import CheckpointError, inspect_checkpoint  # imports torch: only when asked

    try:
        ckpt, source = inspect_checkpoint(cfg.train.init_from)
    except CheckpointError as exc:
        return [Finding("train.init_from", f"no loadable checkpoint: {exc}")]
    diffs = _differences(source.model.model_dump(mode="json"), cfg.model.model_dump(mode="json"))
    if not diffs:
        return []
    shown = "; ".join(f"model.{k}: {a!r} there vs {b!r} here" for k, a, b in diffs[:6])
    more = f" (and {len(diffs) - 6} more)" if len(diffs) > 6 else ""
    return [Finding("train.init_from", f"{ckpt} was written with another model config "
                    f"({ckpt.parent.parent / 'config.yaml'}) than this config's `model`: {shown}{more}; "
                    "set `model` to that run's model section or start from another checkpoint")]


def _differences(a: object, b: object, prefix: str = "") -> list[tuple[str, object, object]]:
    """Dotted paths where two dumped configs differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in _differences(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else str(k))]
    return [] if a == b else [(prefix, a, b)]


def _check_inputs(cfg: ExperimentConfig) -> list[Finding]:
    out = []
    for i, src in enumerate(cfg.data.inputs):
        if not any(glob.glob(str(Path(p).expanduser()), recursive=True) for p in src.paths):
            out.append(Finding(f"data.inputs[{i}].paths", f"source {src.name!r}: {src.paths} match no file; "
                               "fix the paths or remove the source"))
    return out


def _check_rates(cfg: ExperimentConfig) -> list[Finding]:
    rates = cfg.mixture.rates
    if not rates:
        return []
    out = []
    total = sum(rates.values())
    if abs(total - 1.0) > 1e-6:
        out.append(Finding("mixture.rates", f"rates sum to {total:g}, not 1; each is divided by {total:g} "
                           f"(realised shares: {', '.join(f'{k} {v / total:.3f}' for k, v in rates.items())})", error=False))
    known, where = known_sources(cfg)
    if known is not None:
        for name in rates:
            if name not in known:
                out.append(Finding(f"mixture.rates.{name}", f"no source named {name!r} in {where} "
                                   f"(have: {', '.join(sorted(known)) or 'none'})"))
    return out


def known_sources(cfg: ExperimentConfig) -> tuple[set[str] | None, str]:
    """The source names the mixture will see, and where they were read; (None, why) when unknown yet."""
    m = cfg.mixture
    manifest = Path(m.shard_dir) / "manifest.json"
    if not m.documents:
        if cfg.data.inputs:
            return {s.name for s in cfg.data.inputs}, "data.inputs (the data filter's output the mixture reads)"
        if manifest.is_file():
            return set(json.loads(manifest.read_text(encoding="utf-8")).get("sources", {})), str(manifest)
        return None, "no documents yet"
    names: set[str] = set()
    for pattern in m.documents:
        files = [Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file()]
        if (Path(pattern) / "manifest.json").is_file():
            from shared.data.stage_outputs import declared_outputs

            files = declared_outputs(pattern)
        if not files:
            return None, f"mixture.documents {pattern!r} (matches no file yet)"
        for f in files:
            names |= _sources_of(f)
    return names, "mixture.documents"


def _sources_of(path: Path) -> set[str]:
    """Distinct `source` values of a document file (a raw JSONL record without one: the file's stem,
    as the trainer's copy to Parquet names it)."""
    if path.name.endswith(RAW_SUFFIXES):
        stem = path.name.split(".")[0]
        opener = gzip.open if path.name.endswith(".gz") else open
        found = set()
        with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("text"), str):
                    found.add(str(rec.get("source", stem)))
        return found
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if "source" not in pq.read_schema(path).names:
        return set()
    return {s for s in pc.unique(pq.read_table(path, columns=["source"]).column("source")).to_pylist() if s is not None}


def _check_tokenizer(cfg: ExperimentConfig) -> list[Finding]:
    """An existing tokenizer (`tokenizer.path`, or the one `tokenizer.out_dir` would reuse) must fit the model."""
    tok = cfg.mixture.tokenizer
    file = Path(tok.path) if tok.path else Path(tok.out_dir)
    if file.is_dir():
        file = file / "tokenizer.json"
    if not file.is_file():
        if tok.path:
            return [Finding("mixture.tokenizer.path", f"{tok.path}: no tokenizer.json there")]
        return []
    try:
        vocab = _vocab_size(file)
    except (OSError, ValueError, KeyError) as exc:
        return [Finding("mixture.tokenizer.path" if tok.path else "mixture.tokenizer.out_dir", f"{file}: unreadable ({exc})")]
    if tok.path is None and _trained_vocab(file.parent) not in (None, tok.vocab_size):
        return []  # out_dir holds a tokenizer of other settings: it will be retrained, not reused
    if vocab > cfg.model.vocab_size:
        return [Finding("model.vocab_size", f"{cfg.model.vocab_size} is smaller than the tokenizer's {vocab} ids ({file}); "
                        f"set model.vocab_size >= {vocab}")]
    return []


def _vocab_size(file: Path) -> int:
    data = json.loads(file.read_text(encoding="utf-8"))
    ids = list(data["model"]["vocab"].values()) + [t["id"] for t in data.get("added_tokens", [])]
    return max(ids) + 1


def _trained_vocab(folder: Path) -> int | None:
    from shared.data.tokenizer import CONFIG_FILE

    meta = folder / CONFIG_FILE
    if not meta.is_file():
        return None
    return json.loads(meta.read_text(encoding="utf-8")).get("vocab_size")
