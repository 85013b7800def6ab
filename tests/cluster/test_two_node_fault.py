"""A Ray Data actor pool spans two nodes and loses one mid-stage without losing or repeating a row.

This is the property the scorer's scale-out relies on (docs/cluster.md): Ray Data restarts the
actors of a dead node elsewhere and retries their unfinished batches, and the output of a batch
counts once. Measured here on a real 2-node cluster (tests/cluster/conftest.py): the second node's
whole process tree gets SIGKILL once its actor has finished a few batches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import _processes_under

DRIVER = Path(__file__).with_name("actor_pool_driver.py")
ROWS = 400
KILL_AFTER_BATCHES = 3


def _batches_per_actor(markers: Path) -> dict[str, int]:
    return {p.name: len(p.read_text().split()) for p in markers.iterdir()}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_actor_pool_spans_both_nodes_and_survives_losing_node2(ray_two_nodes, tmp_path):
    nodes = ray_two_nodes.node_ids()
    markers = tmp_path / "markers"
    markers.mkdir()
    out = tmp_path / "rows.json"
    driver = subprocess.Popen([sys.executable, str(DRIVER), ray_two_nodes.address, str(out), str(markers), str(ROWS)],
                              env=ray_two_nodes.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed_at = None
    deadline = time.monotonic() + 180
    while driver.poll() is None and time.monotonic() < deadline:
        done = _batches_per_actor(markers)
        on_node2 = sum(n for name, n in done.items() if name.startswith(nodes["node2"]))
        if killed_at is None and on_node2 >= KILL_AFTER_BATCHES:
            killed_at = sum(done.values())
            ray_two_nodes.node2.kill()
        time.sleep(0.1)
    if driver.poll() is None:
        driver.kill()
    log = driver.communicate()[0]
    assert driver.returncode == 0, log[-4000:]

    assert killed_at is not None and killed_at < ROWS // 5, "node2 was not killed mid-stage"
    assert ray_two_nodes.node2.proc.poll() is not None and not _processes_under(ray_two_nodes.node2.temp_dir)
    assert set(ray_two_nodes.node_ids()) == {"head"}

    actors = _batches_per_actor(markers)
    actor_nodes = {name.rsplit("-", 1)[0] for name in actors}
    assert actor_nodes == {nodes["head"], nodes["node2"]}, actors
    assert len(actors) >= 3, f"no replacement actor after node2 died: {actors}"

    rows = json.loads(out.read_text())
    assert sorted(rows["ids"]) == list(range(ROWS)), "a row was lost or produced twice"
    assert set(rows["nodes"]) <= {nodes["head"], nodes["node2"]}


SCORING_DRIVER = Path(__file__).with_name("scoring_driver.py")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_scoring_stage_spans_both_nodes_and_scores_every_document_once_after_losing_node2(ray_two_nodes, tmp_path):
    import pyarrow.parquet as pq

    from services.scorer.scoring import shard_output_name

    nodes = ray_two_nodes.node_ids()
    markers = tmp_path / "markers"
    markers.mkdir()
    root = Path(__file__).resolve().parents[2]
    env = {**ray_two_nodes.env, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"}
    driver = subprocess.Popen([sys.executable, str(SCORING_DRIVER), ray_two_nodes.address, str(tmp_path), str(markers)],
                              env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed = False
    deadline = time.monotonic() + float(os.environ.get('MOELAB_TEST_DEADLINE', 330))
    while driver.poll() is None and time.monotonic() < deadline:
        done = _batches_per_actor(markers)
        if not killed and sum(n for name, n in done.items() if name.startswith(nodes["node2"])) >= 1:
            ray_two_nodes.node2.kill()
            killed = True
        time.sleep(0.1)
    if driver.poll() is None:
        driver.kill()
    log = driver.communicate()[0]
    assert driver.returncode == 0, f"markers: {_batches_per_actor(markers)}, killed: {killed}\n" + log[-4000:]
    assert killed, "no scorer actor ran on node2 before the stage ended"
    actors = _batches_per_actor(markers)
    assert {name.rsplit("-", 1)[0] for name in actors} == {nodes["head"], nodes["node2"]}, actors

    result = json.loads((tmp_path / "report.json").read_text())
    for path in result["inputs"]:
        src = pq.read_table(path).column("id").to_pylist()
        got = pq.read_table(tmp_path / "scorer" / "scores" / shard_output_name(path)).column("id").to_pylist()
        assert sorted(got) == sorted(src), f"{path}: a document was lost or scored twice"
