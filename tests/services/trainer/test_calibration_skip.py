"""Which training-stream tokens a frozen measure skips: those the checkpoint's bias was calibrated on."""

from __future__ import annotations

from services.trainer.router_calibration import calibration_skip

POSITION = {"epoch": 0, "sources": {"web": {"shard": 1, "offset": 4096}}}


def _record(stream="train", position=POSITION, tokens=131072) -> dict:
    return {"data": {"stream": stream, "after_loader_state": position, "tokens": tokens}, "layers": {}}


def test_a_calibration_at_the_checkpoints_position_is_skipped():
    assert calibration_skip({"data": POSITION, "router_calibration": _record()}) == 131072


def test_an_uncalibrated_checkpoint_skips_nothing():
    assert calibration_skip({"data": POSITION}) == 0
    assert calibration_skip({"data": POSITION, "router_calibration": None}) == 0


def test_a_calibration_elsewhere_is_not_skipped():
    """Another loader position (a checkpoint that trained on after calibrating) or another stream
    does not overlap the tokens the measure routes."""
    moved = {"epoch": 0, "sources": {"web": {"shard": 2, "offset": 0}}}
    assert calibration_skip({"data": moved, "router_calibration": _record()}) == 0
    assert calibration_skip({"data": POSITION, "router_calibration": _record(stream="held_out")}) == 0


def test_a_meta_without_a_loader_position_skips_nothing():
    assert calibration_skip({"router_calibration": _record(position=None)}) == 0
