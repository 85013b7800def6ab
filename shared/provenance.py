"""Which commit a run's figures belong to, so every result and transcript can be tied to code.

A machine that ran the code may not know its commit: the GPU machines get a copy of the working
tree whose `.git` is not a faithful checkout (one named a commit the tree did not hold). So the id
travels explicitly: `$MOELAB_COMMIT`, else a file carried with the tree (`.gpu-wheels/COMMIT`,
written by `make gpu-wheels` where git knows the tree); only without either is git asked, with
`-dirty` when tracked files differ from the commit (such a run's code cannot be checked out).
Result and transcript files are outputs, not code: rewriting them (as every benchmark run on a
clean tree does) leaves the tree clean, so the second benchmark of a session is not marked dirty.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMIT_ENV = "MOELAB_COMMIT"
COMMIT_FILE = Path(".gpu-wheels") / "COMMIT"
# Folders of outputs the benchmarks and the demo write; their changes do not change the code.
OUTPUT_DIRS = ("benchmarks/results", "docs/transcripts")


def git_commit(root: Path = REPO) -> str:
    """`git rev-parse --short HEAD`, `-dirty` when tracked files outside `OUTPUT_DIRS` differ from it;
    "unknown" without git."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)

    try:
        head = git("rev-parse", "--short", "HEAD")
    except OSError:
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    excluded = [f":(exclude){d}" for d in OUTPUT_DIRS]
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", *excluded).stdout.strip()
    return head.stdout.strip() + ("-dirty" if dirty else "")


def tree_commit(root: Path = REPO) -> str:
    """The commit this tree holds: `$MOELAB_COMMIT`, else the id carried in `.gpu-wheels/COMMIT`, else git's."""
    if os.environ.get(COMMIT_ENV, "").strip():
        return os.environ[COMMIT_ENV].strip()
    carried = root / COMMIT_FILE
    if carried.is_file() and carried.read_text().split():
        return carried.read_text().split()[0]
    return git_commit(root)


def write_commit_file(root: Path = REPO) -> Path:
    """Record git's view of the tree in `.gpu-wheels/COMMIT`, to travel to a machine that cannot ask git."""
    path = root / COMMIT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(git_commit(root) + "\n")
    return path


# ISA flags that change CPU speed the most (the full list is in /proc/cpuinfo).
SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile")


def cpu_and_flags() -> tuple[str, list[str]]:
    """The CPU's model name and which of `SPEED_FLAGS` it has, for the header of a transcript."""
    model, flags = platform.processor() or platform.machine(), []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = [f for f in SPEED_FLAGS if f in value.split()]
                break
    except OSError:
        pass
    return model, flags


def load_average_text() -> str:
    """The 1/5/15-minute load averages as text ("not available" where the OS has none)."""
    try:
        return ", ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "not available"
