"""On a head + GPU-node cluster the pipeline's GPU work runs on the GPU node, never on the head.

The cluster is real (tests/cluster/conftest.py, `ray_two_nodes_gpu`): a CPU-only head and a
second node that declares one H100 GPU. The whole pipeline runs as a job's driver would; where
each stage's work ran is read from inside it — a marker written by every scoring actor, and the
node id the training worker reports — not from what was requested.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("placement_driver.py")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_scoring_actors_and_training_workers_run_on_the_gpu_node_never_the_head(ray_two_nodes_gpu, tmp_path):
    nodes = ray_two_nodes_gpu.node_ids()
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {**ray_two_nodes_gpu.env, "RAY_ADDRESS": ray_two_nodes_gpu.address, "PYTHONPATH": str(ROOT),
           "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(DRIVER), str(tmp_path), str(markers)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=840)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    result = json.loads((tmp_path / "result.json").read_text())

    actors = {p.name.rsplit("-", 1)[0]: sum(map(int, p.read_text().split())) for p in markers.iterdir()}
    assert set(actors) == {nodes["node2"]}, f"scoring actors ran on {actors}; head is {nodes['head']}"
    assert sum(actors.values()) == result["summary"]["documents"]["scored"] > 0

    train = result["summary"]["train"]
    assert train["steps"] == 4
    stage = json.loads((tmp_path / "runs" / "pipeline" / "demo" / "stages" / "train.json").read_text())
    assert stage["report"]["ray_node_id"] == nodes["node2"] != nodes["head"]

    assert "scorer.oracle.vllm: 1 × 2 GPU(s)" in result["refusal"] and "at most 1 GPU" in result["refusal"]
