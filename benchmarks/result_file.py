"""Where a CPU benchmark files its result JSON, so the figures it printed can be committed beside it.

The name carries the ISA the run had (`native`, or `avx2` under the ISA caps: `blas_probe.isa_tag`),
because a CPU figure holds only for its instruction set; a `--quick` smoke run files nothing unless
`--out` names a file. Written atomically, like every result the benchmarks page reads.

Every result records the commit of the tree that ran it (`commit`, `shared.provenance.tree_commit`:
carried explicitly to machines whose copy of the repository cannot say), so a figure can be tied
to code.
"""

from __future__ import annotations

from pathlib import Path

from shared.data.atomic import atomic_write_json
from shared.kernels.blas_probe import isa_tag
from shared.provenance import tree_commit

RESULTS = Path(__file__).resolve().parent / "results"


def cpu_result_path(name: str, out: Path | None, quick: bool, threads: int = 0, tag: str | None = None) -> Path | None:
    """`out` when given, else `benchmarks/results/<name>.<isa>[.t<threads>].json` (`tag` in place of the
    ISA, e.g. `gpu`), or None for a quick run."""
    if out is not None:
        return Path(out)
    suffix = (tag or isa_tag()) + (f".t{threads}" if threads else "")
    return None if quick else RESULTS / f"{name}.{suffix}.json"


def save_cpu_result(name: str, out: Path | None, quick: bool, result: dict, threads: int = 0,
                    tag: str | None = None) -> Path | None:
    """Write `result`, with the tree's `commit`, where `cpu_result_path` says (nothing for a quick run);
    returns the path written."""
    path = cpu_result_path(name, out, quick, threads, tag)
    result.setdefault("commit", tree_commit())
    if path is not None:
        atomic_write_json(path, result)
    return path
