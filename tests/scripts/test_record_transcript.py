"""A recorded transcript holds the command, its provenance, what it printed as a terminal shows it, and its status."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "record_transcript.py"


def test_a_failing_command_is_recorded_with_its_redrawn_lines_and_exit_status(tmp_path):
    out = tmp_path / "t.txt"
    code = "import sys; print('step 1/2\\rstep 2/2'); print('oops', file=sys.stderr); sys.exit(3)"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out), "--", sys.executable, "-c", code],
                          capture_output=True, text=True)
    assert proc.returncode == 3
    text = out.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("# transcript written by scripts/record_transcript.py: $ ")
    assert lines[1].startswith("commit: ") and len(lines[1]) > len("commit: ")
    printed = lines[lines.index("") + 1:]
    assert printed[0].startswith("$ ") and printed[0].endswith("sys.exit(3)'")  # the prompt line, then the output
    assert "step 2/2" in printed and not any("step 1/2" in line for line in printed[1:])  # the last redraw only
    assert "oops" in lines
    assert "exit status: 3" in lines
    assert any(line.startswith("wall: ") for line in lines)


def test_no_command_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "t.txt")], capture_output=True, text=True)
    assert proc.returncode == 2 and "give the command" in proc.stderr
    assert not (tmp_path / "t.txt").exists()
