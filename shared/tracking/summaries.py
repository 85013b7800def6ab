"""Pure computations behind the client's convenience calls: binning samples, calibration bins, hashing.

Kept apart from the run object so they can be tested without a server and reused by anyone who
wants the same numbers the dashboard draws.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def bin_samples(samples: Sequence[float], bins: int) -> tuple[list[float], list[float]]:
    """(counts, edges) of the finite samples over `bins` equal-width bins between their min and max."""
    finite = [v for v in samples if math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    hi = hi if hi > lo else lo + 1.0
    counts = [0.0] * bins
    for v in finite:
        counts[min(bins - 1, int((v - lo) / (hi - lo) * bins))] += 1
    return counts, [lo + (hi - lo) * i / bins for i in range(bins + 1)]


def calibration_bins(predicted: Sequence[float], observed: Sequence[float], bins: int) -> dict[str, Any]:
    """Reliability-diagram data: per bin of predicted score, the bin's edges, mean predicted, mean
    observed and count, plus the expected calibration error (ECE, Guo et al. 2017: the
    count-weighted mean |predicted − observed| over bins).

    Bins are equal-width over the predicted range; empty bins are left out (no point to draw).
    """
    pred = [float(x) for x in predicted]
    obs = [float(x) for x in observed]
    if len(pred) != len(obs) or not pred:
        raise ValueError(f"calibration needs equal, non-empty predicted/observed (got {len(pred)}, {len(obs)})")
    if bins < 1:
        raise ValueError(f"calibration needs bins >= 1, got {bins}")
    bad = [i for i, (p, o) in enumerate(zip(pred, obs, strict=True)) if not (math.isfinite(p) and math.isfinite(o))]
    if bad:
        raise ValueError(f"calibration values must be finite; item {bad[0]} is ({pred[bad[0]]}, {obs[bad[0]]})")
    lo, hi = min(pred), max(pred)
    hi = hi if hi > lo else lo + 1.0
    acc = [[0.0, 0.0, 0] for _ in range(bins)]
    for p, o in zip(pred, obs, strict=True):
        b = acc[min(bins - 1, int((p - lo) / (hi - lo) * bins))]
        b[0] += p
        b[1] += o
        b[2] += 1
    width = (hi - lo) / bins
    rows = [
        {"lo": lo + i * width, "hi": lo + (i + 1) * width, "predicted": p / n, "observed": o / n, "count": n}
        for i, (p, o, n) in enumerate(acc)
        if n
    ]
    ece = sum(r["count"] * abs(r["predicted"] - r["observed"]) for r in rows) / len(pred)
    return {"bins": rows, "ece": ece, "n": len(pred), "range": [lo, hi]}


def hash_path(p: Path) -> tuple[str, int]:
    """(sha256, bytes) of a file, or of a directory's sorted (relative path, file sha256) list."""
    h = hashlib.sha256()
    size = 0
    files = [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file())
    for f in files:
        fh = hashlib.sha256()
        with open(f, "rb") as fd:
            for block in iter(lambda fd=fd: fd.read(1 << 20), b""):
                fh.update(block)
        size += f.stat().st_size
        if p.is_file():
            return fh.hexdigest(), size
        h.update(f"{f.relative_to(p).as_posix()}\0{fh.hexdigest()}\n".encode())
    return h.hexdigest(), size
