"""MinHash signatures and LSH band keys (Broder 1997; Leskovec, Rajaraman & Ullman, MMDS ch. 3).

A document becomes the set of its word 5-grams (after lower-casing and dropping punctuation, as
FineWeb does); datasketch computes `bands * rows` MinHash values per document (the probability two
values agree is the Jaccard similarity s of the two sets). Each band's `rows` values are folded
into one 64-bit key; two documents are an LSH candidate pair when any band key agrees, which
happens with probability 1 - (1 - s^rows)^bands: with 14 bands x 8 rows the usual threshold estimate
(1/bands)^(1/rows) is 0.72 and the curve crosses 1/2 at s = 0.685 (FineWeb and datatrove use 14 x 8).
"""

from __future__ import annotations

import re

import numpy as np
from datasketch import MinHash

_WORD = re.compile(r"[^\W_]+")
_MIX = np.uint64(0xBF58476D1CE4E5B9)
_SEED = np.uint64(0x9E3779B97F4A7C15)


def shingles(text: str, n: int) -> set[bytes]:
    """Word n-grams of the normalised text; a text shorter than n words is one shingle."""
    words = _WORD.findall(text.lower())
    if len(words) <= n:
        return {" ".join(words).encode("utf-8") or text.encode("utf-8", "surrogatepass")}
    return {" ".join(words[i : i + n]).encode("utf-8") for i in range(len(words) - n + 1)}


def lsh_probability(s: float, bands: int, rows: int) -> float:
    """P(candidate pair) for Jaccard similarity s: 1 - (1 - s^rows)^bands."""
    return 1.0 - (1.0 - s**rows) ** bands


class Signer:
    """Computes band keys for many documents with one set of permutations (built once)."""

    def __init__(self, ngram: int = 5, bands: int = 14, rows: int = 8, seed: int = 1):
        self.ngram, self.bands, self.rows, self.seed = ngram, bands, rows, seed
        self.num_perm = bands * rows
        self._perms = MinHash(num_perm=self.num_perm, seed=seed, scheme="affine32").permutations

    def signature(self, text: str) -> np.ndarray:
        m = MinHash(num_perm=self.num_perm, seed=self.seed, permutations=self._perms, scheme="affine32")
        m.update_batch(list(shingles(text, self.ngram)))
        return m.hashvalues

    def band_keys(self, texts: list[str]) -> np.ndarray:
        """(len(texts), bands) uint64 band keys."""
        if not texts:
            return np.zeros((0, self.bands), dtype=np.uint64)
        sig = np.stack([self.signature(t) for t in texts]).astype(np.uint64)
        return fold_bands(sig, self.bands, self.rows)


def fold_bands(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """Fold each band's `rows` hash values into one 64-bit key (a splitmix-style mix, deterministic)."""
    h = sig.reshape(len(sig), bands, rows)
    key = np.full(h.shape[:2], _SEED, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(rows):
            key ^= h[:, :, j]
            key *= _MIX
            key ^= key >> np.uint64(31)
    return key
