"""An ablation on a 2-node Ray cluster places arm-seeds on both nodes and reports what one node reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DRIVER = Path(__file__).with_name("ablation_driver.py")
ROOT = Path(__file__).parents[2]


def _run(address: str, work: Path, env: dict | None) -> dict:
    done = subprocess.run([sys.executable, str(DRIVER), address, str(work)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((work / "out" / "report.json").read_text())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_nodes_give_the_same_report_as_one(ray_two_nodes, tmp_path):
    import os

    nodes = ray_two_nodes.node_ids()
    two = _run(ray_two_nodes.address, tmp_path / "two", {**ray_two_nodes.env, "PYTHONPATH": str(ROOT)})
    one = _run("local", tmp_path / "one", {**os.environ, "PYTHONPATH": str(ROOT)})
    placed = {r["node"] for a in two["arms"].values() for r in a["runs"].values()}
    assert placed == {nodes["head"], nodes["node2"]}, placed
    for arm in ("clean", "noisy"):
        for seed in ("0", "1"):
            assert two["arms"][arm]["runs"][seed]["metrics"] == one["arms"][arm]["runs"][seed]["metrics"]
    assert two["comparisons"] == one["comparisons"]
    assert two["verdicts"] == one["verdicts"]
