"""Where a CPU benchmark files its result JSON, so the figures it printed can be committed beside it.

The name carries the ISA the run had (`native`, or `avx2` under the ISA caps: `blas_probe.isa_tag`),
because a CPU figure holds only for its instruction set; a `--quick` smoke run files nothing unless
`--out` names a file. Written atomically, like every result the benchmarks page reads.

Every result records the commit of the tree that ran it (`commit`, `shared.provenance.tree_commit`:
carried explicitly to machines whose copy of the repository cannot say), so a figure can be tied
to code, and the machine it ran on, torch's thread count and the load average when it was filed
(`run_record`), so a reader can tell a quiet run from a busy one.
"""

from __future__ import annotations

import os
from pathlib import Path

from shared.data.atomic import atomic_write_json
from shared.kernels.blas_probe import isa_tag
from shared.provenance import cpu_and_flags, tree_commit

RESULTS = Path(__file__).resolve().parent / "results"


def run_record() -> dict:
    """What every result file carries besides its figures: the commit, the CPU and its speed flags,
    torch's thread count and the 1/5/15-minute load average at the time of writing."""
    import torch

    cpu, flags = cpu_and_flags()
    try:
        load = [round(v, 2) for v in os.getloadavg()]
    except OSError:
        load = None
    return {"commit": tree_commit(), "cpu": cpu, "isa_flags": flags, "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "load_average_at_end": load}


def save_result(path: Path, result: dict) -> Path:
    """Write `result` atomically with `run_record()`'s fields (a field the benchmark set itself wins)."""
    for key, value in run_record().items():
        result.setdefault(key, value)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, result)
    return path


def cpu_result_path(name: str, out: Path | None, quick: bool, threads: int = 0, tag: str | None = None) -> Path | None:
    """`out` when given, else `benchmarks/results/<name>.<isa>[.t<threads>].json` (`tag` in place of the
    ISA, e.g. `gpu`), or None for a quick run."""
    if out is not None:
        return Path(out)
    suffix = (tag or isa_tag()) + (f".t{threads}" if threads else "")
    return None if quick else RESULTS / f"{name}.{suffix}.json"


def save_cpu_result(name: str, out: Path | None, quick: bool, result: dict, threads: int = 0,
                    tag: str | None = None) -> Path | None:
    """Write `result`, with `run_record()`'s fields, where `cpu_result_path` says (nothing for a quick
    run); returns the path written."""
    path = cpu_result_path(name, out, quick, threads, tag)
    if path is None:
        result.setdefault("commit", tree_commit())
        return None
    return save_result(path, result)
