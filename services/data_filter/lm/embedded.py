"""The embedded reference LM: a Kneser-Ney model estimated here from real prose, cached as ARPA.

CCNet (Wenzek et al. 2019, arXiv:1911.00359) buckets documents by their perplexity under a
per-language KenLM model trained on Wikipedia and cuts at percentiles of the perplexity
distribution. Here: 90% of the reference windows train an order-`order` modified Kneser-Ney model
(`kneser_ney.estimate`), the other 10% (every 10th window) are held out, and the percentile
cutoffs are taken over the held-out windows' perplexities, so the cutoffs describe unseen prose of
the reference kind. Model and cutoffs are cached by the hash of the reference text and the order.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from services.data_filter.lm.backends import make_scorer
from services.data_filter.lm.kneser_ney import estimate, tokenize, write_arpa
from services.data_filter.lm.reference import load_reference_lines, windows

VERSION = 1


def build_embedded(reference_text: str | None, order: int, cache_dir: str) -> tuple[Path, list[float]]:
    """Return (ARPA path, sorted held-out perplexities), estimating and caching on first use."""
    lines = load_reference_lines(reference_text)
    digest = hashlib.sha256(("\n".join(lines) + f"|order={order}|v={VERSION}").encode()).hexdigest()[:16]
    folder = Path(cache_dir).expanduser() / digest
    arpa, meta = folder / f"kn{order}.arpa", folder / "heldout.json"
    if arpa.is_file() and meta.is_file():
        return arpa, json.loads(meta.read_text())["perplexities"]
    wins = windows(lines)
    train = [line for i, w in enumerate(wins) if i % 10 != 9 for line in w]
    held = [w for i, w in enumerate(wins) if i % 10 == 9]
    write_arpa(estimate((tokenize(line) for line in train), order), arpa)
    ppl = reference_perplexities("kenlm", str(arpa), held)
    _write_json(meta, {"perplexities": ppl, "train_lines": len(train), "heldout_windows": len(held)})
    return arpa, ppl


def reference_perplexities(backend: str, path: str, docs: list[list[str]]) -> list[float]:
    scorer = make_scorer(backend, path)
    return sorted(float(scorer.perplexity(d)) for d in docs)


def cutoffs(ppl: list[float], low: float, high: float, margin: float) -> tuple[float, float]:
    """(low cut, high cut): percentiles of the reference distribution; low=0 means no low cut."""
    arr = np.asarray(ppl)
    lo = float(np.percentile(arr, low)) if low > 0 else 0.0
    return lo, float(np.percentile(arr, high)) * margin


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".json.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(obj, fh)
    os.replace(tmp, path)
