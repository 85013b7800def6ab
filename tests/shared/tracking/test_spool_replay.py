"""Spool replay skips only a torn last line; any other unreadable line is counted and kept, not dropped."""

from __future__ import annotations

import json

import httpx

from shared import tracking
from shared.tracking.spool import Spool
from tests.shared.tracking.conftest import start_run


def _offline_run(tracker, steps):
    run = start_run(tracker, mode="offline")
    for step in steps:
        run.log({"loss": float(step)}, step=step)
        run.flush()
    run.finish()
    return run


def _stored_steps(tracker, run_id):
    return httpx.get(f"{tracker.url}/api/runs/{run_id}/series", params={"key": "loss"}).json()["steps"]


def test_a_torn_last_line_is_skipped_and_counted(tracker):
    run = _offline_run(tracker, range(3))
    path = run._spool.path
    path.write_text(path.read_text() + '{"op": "batch", "run": "' + run.id + '", "bo')  # killed mid-write
    result = tracking.sync(str(tracker.spool), tracker.url, tracker.token)
    assert result.torn == 1 and result.refused == []
    assert _stored_steps(tracker, run.id) == [0, 1, 2]


def test_a_malformed_line_inside_the_spool_is_counted_kept_and_the_rest_lands(tracker):
    run = _offline_run(tracker, range(3))
    path = run._spool.path
    lines = path.read_text().splitlines()
    lines.insert(2, "this is not json")
    path.write_text("\n".join(lines) + "\n")
    spool = Spool(path)
    from shared.tracking.transport import Transport

    sent = spool.replay(Transport(tracker.url, tracker.token))
    assert spool.malformed == 1 and spool.torn == 0
    assert sent == len(lines) - 1
    kept = [json.loads(x) for x in spool.rejected_path.read_text().splitlines()]
    assert kept[0]["line"] == "this is not json" and "line 3" in kept[0]["error"]
    assert _stored_steps(tracker, run.id) == [0, 1, 2]


def test_sync_lists_a_malformed_line_as_still_refused(tracker):
    run = _offline_run(tracker, range(2))
    path = run._spool.path
    path.write_text("{broken\n" + path.read_text())
    result = tracking.sync(str(tracker.spool), tracker.url, tracker.token)
    assert len(result.refused) == 1 and result.refused[0]["line"] == "{broken"
    assert _stored_steps(tracker, run.id) == [0, 1]


def test_an_op_appended_after_a_torn_line_starts_its_own_line(tmp_path):
    spool = Spool(tmp_path / "r.jsonl")
    spool.path.write_text('{"op": "ba')  # the previous process died mid-write
    spool.append({"op": "finish", "run": "r", "body": {}})
    assert spool.path.read_text().splitlines()[1] == '{"op": "finish", "run": "r", "body": {}}'
    assert spool.pending() == (1, 0)
