"""Run a command and keep what it printed as a transcript tied to its code and machine.

README and the guides show what a command prints (`moelab train`'s progress line, say). A block
typed from a terminal cannot be traced to code; one copied from a file this script wrote can: the
file starts with the command, the commit (`shared.provenance.tree_commit`), the CPU, the threads and
the load average, then every line the command printed (stdout and stderr merged, a progress bar's
carriage-return redraws reduced to the last one, as a terminal shows it), then the exit status, the
wall time and the load at the end. `scripts/figure_provenance.py` ties a ```` ```console FILE ````
block to such a file under `docs/transcripts/`.

    .venv/bin/python scripts/record_transcript.py docs/transcripts/train-tiny.txt -- \\
        .venv/bin/moelab train configs/tiny.yaml train.steps=10 tracker.mode=disabled --no-ray
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.data.atomic import atomic_write_bytes  # noqa: E402
from shared.provenance import SPEED_FLAGS, cpu_and_flags, load_average_text, tree_commit  # noqa: E402


def as_shown(raw: str) -> list[str]:
    """The lines a terminal leaves on screen: of each line's carriage-return redraws, the last."""
    return [line.split("\r")[-1].rstrip() for line in raw.replace("\r\n", "\n").split("\n")]


def record(out: Path, command: list[str]) -> int:
    """Run `command` from the repository root, echo its output, write the transcript; returns its exit status."""
    model, flags = cpu_and_flags()
    header = [
        f"# transcript written by scripts/record_transcript.py: $ {shlex.join(command)}",
        f"commit: {tree_commit(ROOT)}",
        f"machine: {model}; ISA flags {' '.join(flags) or 'none of ' + ' '.join(SPEED_FLAGS)}; {os.cpu_count()} cores",
        f"threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}",
        f"load average at start (1, 5, 15 min): {load_average_text()}",
        "",
        f"$ {shlex.join(command)}",  # as the terminal showed it, so a quoted block can start with it
    ]
    t0 = time.monotonic()
    proc = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    wall = time.monotonic() - t0
    raw = proc.stdout.decode("utf-8", errors="replace")
    sys.stdout.write(raw)
    lines = as_shown(raw)
    while lines and not lines[-1]:
        lines.pop()
    footer = ["", f"exit status: {proc.returncode}", f"wall: {wall:.1f} s",
              f"load average at end (1, 5, 15 min): {load_average_text()}"]
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, ("\n".join(header + lines + footer) + "\n").encode())
    return proc.returncode


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="the transcript file to write")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the command to run after --")
    sys.exit(record(args.out, command))


if __name__ == "__main__":
    main()
