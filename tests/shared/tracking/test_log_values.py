"""`log` skips its checks for a key it has seen and a finite float; every other value still goes
through `encode_number`, so what is buffered is exactly what the schema's rules make of it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shared import tracking
from shared.tracking.schema import encode_number


def test_log_buffers_what_encode_number_makes_of_each_value_even_for_known_keys(tmp_path):
    run = tracking.init(project="t", mode="offline", spool_dir=str(tmp_path), flush_interval=1000)
    values = [0.5, 3, np.float32(0.25), np.int64(7), math.nan, math.inf, -math.inf, 2**70, -0.0]
    for step, v in enumerate(values):
        run.log({"loss": v}, step=step)  # "loss" is a known key from the second call on
    buffered = run._buffer.metrics["loss"][2]
    assert [type(x) for x in buffered] == [type(encode_number(v, "x")) for v in values]
    assert [repr(x) for x in buffered] == [repr(encode_number(v, "x")) for v in values]
    with pytest.raises(TypeError, match="metric 'loss' must be a number"):
        run.log({"loss": True})
    with pytest.raises(ValueError, match="too large for a float64"):
        run.log({"loss": 10**400})
    with pytest.raises(ValueError, match="is not allowed"):
        run.log({"bad\nkey": 1.0})
    run.finish(timeout=5)
