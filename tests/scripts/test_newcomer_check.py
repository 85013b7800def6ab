"""The newcomer test (scripts/newcomer_check.py) passes on this machine's own text: man pages,
package copyright files and Python sources, with planted bad input and duplicates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # every stage through the CLI, each a fresh process: a few minutes on 2 idle cores
def test_newcomer_check_holds_every_invariant(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "newcomer_check.py"), "--keep", str(tmp_path / "run")],
                         cwd=ROOT, capture_output=True, text=True, timeout=1800)  # generous: shared CI machines
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    result = json.loads(res.stdout.strip().splitlines()[-1])
    acc = result["accounting"]
    assert result["ok"] and acc["rejected"] == 7 and acc["near_duplicates"] >= 5
    assert result["scored"] == acc["written"]
    assert result["edits"]["rows"] == acc["written"]  # every written row's edit was checked against its bound
    assert result["rebuilt"]["records"] == acc["records"] + 1  # the changed input was read again, in place
