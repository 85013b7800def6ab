"""Build docs/benchmarks.md from the committed benchmark results, `benchmarks/results/**/*.json`.

Why generated: benchmark figures copied by hand into README and the guides drifted from the runs
they came from (README still quoted an older machine's ratios after the reruns). The page is a pure
function of the JSON files (sorted paths, each file's own key order, fixed number formatting; no
dates, hosts or git state), so `--check` can tell that a result changed and the page was not
rebuilt, and `tests/scripts/test_benchmarks_page.py` runs that check in `make test`.

For each file it prints the command that writes it (the file's own `command` key when it has one,
else the catalogue below, else the rule the CPU benchmarks name their files by:
`<benchmark>[.native|.avx2][.t<threads>].json`), the machine line the file records (CPU, ISA flags
and caps, BLAS code paths, threads, load average: "not recorded" where it has none), its ratio keys
(ours / peer, > 1 is better for us) and every other figure (scripts/benchmark_render.py). A file
it has never seen, or a key, is rendered generically; a file that does not parse is listed with the
reason, never skipped.

    python scripts/benchmarks_page.py           # rewrite docs/benchmarks.md (make benchmarks-page)
    python scripts/benchmarks_page.py --check   # exit 1 if docs/benchmarks.md is not what the JSON gives
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.benchmark_render import blocks, cell, fmt, is_scalar  # noqa: E402
from scripts.benchmarks_catalog import (  # noqa: E402
    COMMANDS,
    DIR_COMMANDS,
    GPU_STEPS,
    GPU_WHAT,
    HEADLINE,
    SELF_RATIOS,
    WHAT,
)

RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
BENCHMARKS = ROOT / "benchmarks"
AVX2_CAPS = "ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2"

RATIO_KEY = re.compile(r"(^|_)ratio(_|$)")


@dataclass
class Result:
    path: Path  # relative to the results folder
    data: dict[str, Any] = field(default_factory=dict)
    error: str = ""

    @property
    def bench(self) -> str:
        """The benchmark that wrote it: its folder, else the longest script name its file name starts with."""
        head = self.path.name.split(".")[0]
        if self.path.parts[0] == "gpu" and head in GPU_STEPS:
            return GPU_STEPS[head][0]
        if len(self.path.parts) > 1:
            return self.path.parts[0]
        known = sorted((p.stem for p in BENCHMARKS.glob("*.py")), key=len, reverse=True)
        return next((k for k in known if head == k or head.startswith(k + "_")), head)

    @property
    def is_gpu(self) -> bool:
        return self.path.parts[0] == "gpu"

    @property
    def what(self) -> tuple[str, str]:
        """What this file measures and its guide: a GPU step file by its own entry (a GPU run of a
        script measures another shape and other contenders than its CPU run), a CPU file by its benchmark."""
        if self.is_gpu:
            return GPU_WHAT.get(self.path.name.split(".")[0], ("", ""))
        return WHAT.get(self.bench, ("", ""))

    @property
    def self_ratio(self) -> str:
        """What over what, where this file's ratios compare ours with ours; '' where they name a peer."""
        return SELF_RATIOS.get(f"gpu:{self.path.name.split('.')[0]}" if self.is_gpu else self.bench, "")

    @property
    def anchor(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.path.as_posix().lower()).strip("-")


def load_results(results: Path) -> list[Result]:
    """Every `*.json` under `results`, sorted by path; a file that does not parse keeps its reason."""
    out = []
    for p in sorted(results.rglob("*.json"), key=lambda q: q.relative_to(results).as_posix()):
        rel = p.relative_to(results)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            out.append(Result(rel, error=f"{type(exc).__name__}: {exc}"))
            continue
        out.append(Result(rel, data if isinstance(data, dict) else {"(top level)": data}))
    return out


def command_for(res: Result) -> tuple[str, str]:
    """(command, note) that wrote this result."""
    own = res.data.get("command")
    if isinstance(own, str) and own:
        return own, ""
    key = res.path.as_posix()
    if key in COMMANDS:
        command, note, holds = COMMANDS[key]
        if all(_get(res.data, k) == v for k, v in holds.items()):
            return command.format_map(_Fields(res.data)), note
    stem = res.path.name.split(".")[0]
    if res.path.parts[0] == "gpu" and stem in GPU_STEPS:
        return GPU_STEPS[stem][1], "A step of `bash scripts/gpu_checks.sh` on a lent GPU machine ([gpu-checks.md](gpu-checks.md))."
    if len(res.path.parts) > 1 and res.path.parts[0] in DIR_COMMANDS:
        command, note = DIR_COMMANDS[res.path.parts[0]]
        return command.format_map(_Fields(res.data)), note
    script = BENCHMARKS / f"{res.bench}.py"
    if not script.is_file():
        return "", f"no `benchmarks/{res.bench}.py`: the command that wrote this file is not recorded."
    env, flags, unknown = "", [], []
    for part in res.path.name.split(".")[1:-1]:
        if part == "avx2":
            env = AVX2_CAPS + " "
        elif part == "gpu":
            flags.append("--gpu")
        elif re.fullmatch(r"t\d+", part):
            flags.append(f"--threads {part[1:]}")
        elif part != "native":
            unknown.append(part)
    note = f"file-name part(s) {', '.join(unknown)} not understood: the options may differ." if unknown else ""
    return f"{env}python benchmarks/{res.bench}.py{''.join(' ' + f for f in flags)}", note


class _Fields(dict):
    """Top-level scalars of a result for a command template; a missing one stays `{name}`."""

    def __init__(self, data: dict) -> None:
        super().__init__({k: fmt(v) for k, v in data.items() if is_scalar(v)})

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _get(data: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _load_text(value: Any) -> str:
    return ", ".join(f"{v:.2f}" if isinstance(v, float) else fmt(v) for v in value) if isinstance(value, list) else fmt(value)


def machine_line(data: dict) -> str:
    """The machine the result records: CPU, ISA flags and caps, BLAS, threads, load average."""
    m = data.get("machine") if isinstance(data.get("machine"), dict) else {}
    parts = []
    cpu = m.get("cpu", data.get("cpu"))
    parts.append(f"CPU {cpu}" if cpu else "CPU not recorded")
    if "cores" in data:
        parts.append(f"{fmt(data['cores'])} cores")
    flags = m.get("isa_flags")
    if isinstance(flags, list):
        parts.append("ISA flags " + (" ".join(map(str, flags)) or "none"))
    elif "avx512" in data:
        parts.append(f"AVX-512 {'yes' if data['avx512'] else 'no'}")
    caps = m.get("isa_caps")
    if isinstance(caps, dict):
        parts.append("ISA caps " + (" ".join(f"{k}={v}" for k, v in caps.items()) or "none"))
    else:
        parts.append("ISA caps not recorded")
    blas = m.get("blas")
    if isinstance(blas, dict) and blas:
        parts.append("BLAS " + "; ".join(f"{k}: {v}" for k, v in blas.items()))
    else:
        parts.append("BLAS not recorded")
    threads = data.get("threads", m.get("threads"))  # what the run set; the machine line may hold the default it saw first
    parts.append(f"threads {fmt(threads)}" if threads is not None else "threads not recorded")
    loads = [(k, v) for src in (data, m) for k, v in src.items() if k.startswith("load_av")]
    parts.append("; ".join(f"{k} {_load_text(v)}" for k, v in loads) if loads else "load average not recorded")
    return " · ".join(str(p).replace("|", "\\|") for p in parts)


def headline(res: Result) -> list[tuple[str, Any]]:
    """The ratio keys (top level, numeric), then the benchmark's chosen figures present in the file."""
    out = [(k, v) for k, v in res.data.items() if RATIO_KEY.search(k) and isinstance(v, int | float)
           and not isinstance(v, bool)]
    for dotted in HEADLINE.get(res.bench, ()):
        value = _get(res.data, dotted)
        if value is not None:
            out.append((dotted, value))
    return out


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {fmt(v)}" for k, v in value.items() if is_scalar(v))
    return cell(value)


def summary_row(res: Result) -> str:
    link = f"[`{res.path.as_posix()}`](#{res.anchor})"
    if res.error:
        return f"| {link} | — | could not be read: {cell(res.error)} | — |"
    figures = headline(res)
    shown = " · ".join(f"`{k}` {_inline(v)}" for k, v in figures[:4]) + (f" · (+{len(figures) - 4})" if len(figures) > 4 else "")
    if res.self_ratio and shown:
        shown += " · ours/ours"
    threads = res.data.get("threads") or _get(res.data, "machine.threads")  # what the run set, over the default it saw
    return f"| {link} | {res.bench} | {shown or '— (see the file)'} | {fmt(threads) if threads else '—'} |"


def section(res: Result) -> list[str]:
    out = [f'<a id="{res.anchor}"></a>', f"### `benchmarks/results/{res.path.as_posix()}`", ""]
    if res.error:
        return [*out, f"Could not be read: {res.error}. Nothing from it is on this page.", ""]
    what, guide = res.what
    command, note = command_for(res)
    if what:
        out.append(f"- what: {what}" + (f" ([{guide}]({guide}))" if guide else ""))
    if res.self_ratio:
        out.append(f"- ratios: ours over ours ({res.self_ratio}), not a comparison with a peer")
    out.append(f"- command: `{command}`" if command else "- command: not recorded")
    if note:
        out.append(f"- note: {note}")
    out += [f"- machine: {machine_line(res.data)}", ""]
    figures = headline(res)
    if figures:
        out += ["| key | value |", "|---|---|", *(f"| `{k}` | {_inline(v)} |" for k, v in figures), ""]
    out += ["<details><summary>every figure in the file</summary>", "", *blocks(res.data), "</details>", ""]
    return out


def missing(results: list[Result], benchmarks: Path) -> list[str]:
    """Benchmarks (scripts with a `__main__` guard) that have no committed result."""
    have = {r.bench for r in results}
    out = []
    for script in sorted(benchmarks.glob("*.py")):
        if script.stem in have or '__name__ == "__main__"' not in script.read_text(encoding="utf-8"):
            continue
        what, guide = WHAT.get(script.stem, ("", ""))
        out.append(f"| `python benchmarks/{script.name}` | {what or '—'} | {f'[{guide}]({guide})' if guide else '—'} |")
    return out


def build_page(results_dir: Path = RESULTS, benchmarks: Path = BENCHMARKS) -> str:
    results = load_results(results_dir)
    lines = [
        "# Benchmark results",
        "",
        "<!-- Generated by scripts/benchmarks_page.py from benchmarks/results/**/*.json: do not edit by hand; "
        "run `make benchmarks-page` after a benchmark rewrites its JSON. -->",
        "",
        "Every figure below is read from a committed result file in `benchmarks/results/`, next to the command",
        "that writes that file and the machine the file records. Most benchmarks time ours and a named peer in",
        "the same run, interleaved, and report `ratio` keys as ours / peer (> 1: ours is faster or better);",
        "the files marked *ours/ours* compare two of our own paths instead, and say which.",
        "`same_backend` ratios run both sides on the same BLAS. The machines are 2-core CPUs shared with other",
        "jobs: a load average above ~2 means the run shared its cores and its timings are pessimistic; rerun",
        "on a quiet machine before quoting a figure. `make benchmarks-page` rebuilds this page, and",
        "`tests/scripts/test_benchmarks_page.py` fails while it is out of date.",
        "",
        "## Summary",
        "",
        "| result file | benchmark | ratio keys and key figures | threads |",
        "|---|---|---|---|",
        *(summary_row(r) for r in results),
        "",
        "## Results",
        "",
    ]
    for res in results:
        lines += section(res)
    rows = missing(results, benchmarks)
    if rows:
        lines += [
            "## Benchmarks without a committed result",
            "",
            "These print their result as their last line (one JSON object) but no file of theirs is committed, so",
            "none of their figures is on this page; save one under benchmarks/results/ (the GPU ones through",
            "`scripts/gpu_checks.sh`, docs/gpu-checks.md) and run `make benchmarks-page`.",
            "",
            "| command | what it measures | guide |",
            "|---|---|---|",
            *rows,
            "",
        ]
    notes = sorted(p.relative_to(results_dir).as_posix() for p in results_dir.rglob("*.md"))
    if notes:
        lines += ["## Notes kept with the results", "",
                  *(f"- [`{n}`](../benchmarks/results/{n})" for n in notes), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the page differs from what the results give")
    ap.add_argument("--results", type=Path, default=RESULTS, help="results folder (default: benchmarks/results)")
    ap.add_argument("--page", type=Path, default=PAGE, help="page to write or check (default: docs/benchmarks.md)")
    args = ap.parse_args(argv)
    text = build_page(args.results)
    if args.check:
        current = args.page.read_text(encoding="utf-8") if args.page.is_file() else ""
        if current != text:
            print(f"{args.page} is out of date with {args.results}: run `make benchmarks-page` "
                  f"(python scripts/benchmarks_page.py) and commit the page", file=sys.stderr)
            return 1
        print(f"{args.page} matches {args.results}")
        return 0
    write_atomically(args.page, text)
    print(f"wrote {args.page} from {len(load_results(args.results))} result files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
