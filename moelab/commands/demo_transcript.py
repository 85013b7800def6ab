"""The demo's own record of a run: what it printed, on which code and machine, how loaded, how long.

Why a file: demo timings quoted in README were typed from memory of a terminal, and two of them
disagreed. `moelab demo` now writes `runs/demo-transcript.txt` itself: a header with the commit
(`shared.provenance.tree_commit`, `-dirty` when the tree differs from it), the CPU and its ISA
flags, cores, the threads the driver's torch uses, the load average at the start; then every line
the run printed, as printed; then each stage's seconds (from the pipeline's summary), the load
average at the end and the wall time. A figure quoted from a demo must be in a committed copy of
such a file (scripts/figure_provenance.py reads `docs/transcripts/`). The file is rewritten
atomically at the end of every run, failed runs included (their last line says so).
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path

from shared.data.atomic import atomic_write_bytes
from shared.provenance import SPEED_FLAGS, cpu_and_flags, load_average_text, tree_commit

TRANSCRIPT = Path("runs") / "demo-transcript.txt"


class DemoTranscript:
    """Collects a demo run's printed lines and writes them with their provenance."""

    def __init__(self, root: Path, ray_cpus: int, path: Path | None = None) -> None:
        import torch

        self.path = path or root / TRANSCRIPT
        self.t0 = time.monotonic()
        model, flags = cpu_and_flags()
        self.header = [
            "# moelab demo transcript: written by `moelab demo` (moelab/commands/demo_transcript.py)",
            f"commit: {tree_commit(root)}",
            f"started: {datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}",
            f"machine: {model}; ISA flags {' '.join(flags) or 'none of ' + ' '.join(SPEED_FLAGS)}; {os.cpu_count()} cores",
            f"threads: torch {torch.get_num_threads()} in the driver; Ray CPUs {ray_cpus}",
            f"load average at start (1, 5, 15 min): {load_average_text()}",
            "",
        ]
        self.lines: list[str] = []
        self.stages: dict | None = None  # the pipeline summary's per-stage seconds, once it printed them

    def add(self, line: str) -> None:
        self.lines.append(line.rstrip("\n"))

    def write(self, stages: dict | None, outcome: str) -> Path:
        """Write the transcript with each stage's seconds, the end load and the wall time; returns its path."""
        footer = ["", "== timings"]
        for name, st in (stages or {}).items():
            footer.append(f"stage {name}: {'skipped' if st.get('skipped') else str(st.get('seconds')) + ' s'}")
        footer += [f"wall: {time.monotonic() - self.t0:.1f} s from `moelab demo` to its last line (no install)",
                   f"load average at end (1, 5, 15 min): {load_average_text()}", f"outcome: {outcome}"]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.path, ("\n".join(self.header + self.lines + footer) + "\n").encode())
        return self.path
