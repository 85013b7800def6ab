"""Interpolated modified Kneser-Ney n-gram estimation, written as an ARPA file for KenLM.

Why our own estimator: CCNet scores documents with KenLM models, but KenLM's estimator (`lmplz`)
is not installable here and no package ships a trained KenLM model; the `kenlm` wheel can only
*query* ARPA/binary models. This module estimates the model KenLM would (Chen & Goodman 1998,
"An Empirical Study of Smoothing Techniques for Language Modeling", section 3: interpolated
Kneser-Ney with three discounts D1, D2, D3+ per order from the count-of-counts,
Y = n1/(n1 + 2 n2), D1 = 1 - 2Y n2/n1, D2 = 2 - 3Y n3/n2, D3+ = 3 - 4Y n4/n3), and writes it in
ARPA form so KenLM queries it: a seen n-gram stores its interpolated probability and a context
stores its interpolation weight as the back-off, which makes ARPA's back-off rule reproduce the
interpolated estimate exactly. Lower orders use continuation counts (distinct left contexts),
except n-grams starting with <s>, which keep raw counts (as KenLM does). The unigram level
interpolates with the uniform distribution over the vocabulary plus <unk>.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
_TOKEN = re.compile(r"\w+|[^\w\s]")
_DIGIT = re.compile(r"\d")


def tokenize(line: str) -> list[str]:
    """CCNet-style normalisation: lower case, digits to 0, punctuation as separate tokens."""
    return _TOKEN.findall(_DIGIT.sub("0", line.lower()))


def _discounts(adjusted: Counter) -> tuple[float, float, float]:
    coc = Counter(min(c, 4) for c in adjusted.values())
    n1, n2, n3, n4 = (coc.get(i, 0) for i in (1, 2, 3, 4))
    if min(n1, n2, n3, n4) == 0:  # too little text for count-of-counts: Chen & Goodman's fallback
        return 0.5, 1.0, 1.5
    y = n1 / (n1 + 2 * n2)
    d = (1 - 2 * y * n2 / n1, 2 - 3 * y * n3 / n2, 3 - 4 * y * n4 / n3)
    return tuple(min(max(x, 0.05), float(i + 1)) for i, x in enumerate(d))  # type: ignore[return-value]


def estimate(sentences: Iterable[list[str]], order: int = 3) -> dict[int, dict[tuple[str, ...], tuple[float, float]]]:
    """Return {n: {ngram: (log10 prob, log10 backoff)}} for n = 1..order."""
    if order < 2:
        raise ValueError(f"order must be >= 2, got {order}")
    raw: dict[int, Counter] = {n: Counter() for n in range(1, order + 1)}
    for words in sentences:
        toks = [BOS, *words, EOS]
        for n in range(1, order + 1):
            for i in range(len(toks) - n + 1):
                raw[n][tuple(toks[i : i + n])] += 1
    if not raw[order] and not raw[1]:
        raise ValueError("no text to estimate a language model from")
    # adjusted counts: raw at the top order and for n-grams starting with <s>, continuation below
    adjusted: dict[int, Counter] = {order: raw[order]}
    for n in range(order - 1, 0, -1):
        cont: Counter = Counter()
        for gram in raw[n + 1]:
            cont[gram[1:]] += 1
        for gram, c in raw[n].items():
            if gram[0] == BOS:
                cont[gram] = c
        cont.pop((BOS,), None)
        adjusted[n] = cont
    vocab = {g[0] for g in raw[1]} | {UNK}
    vocab.discard(BOS)
    probs: dict[int, dict[tuple[str, ...], float]] = {}
    gammas: dict[int, dict[tuple[str, ...], float]] = {}
    for n in range(1, order + 1):
        d = _discounts(adjusted[n])
        ctx_total: Counter = Counter()
        ctx_types = defaultdict(lambda: [0, 0, 0])
        for gram, c in adjusted[n].items():
            ctx = gram[:-1]
            ctx_total[ctx] += c
            ctx_types[ctx][min(c, 3) - 1] += 1
        gam = {ctx: (d[0] * t[0] + d[1] * t[1] + d[2] * t[2]) / ctx_total[ctx] for ctx, t in ctx_types.items()}
        gammas[n] = gam
        p: dict[tuple[str, ...], float] = {}
        for gram, c in adjusted[n].items():
            ctx = gram[:-1]
            disc = c - d[min(c, 3) - 1]
            lower = 1.0 / len(vocab) if n == 1 else _lower(probs, gammas, gram[1:])
            p[gram] = disc / ctx_total[ctx] + gam[ctx] * lower
        if n == 1:
            p[(UNK,)] = gam[()] / len(vocab)
        probs[n] = p
    out: dict[int, dict[tuple[str, ...], tuple[float, float]]] = {}
    for n in range(1, order + 1):
        table = {}
        for gram, pr in probs[n].items():
            bo = gammas.get(n + 1, {}).get(gram)
            table[gram] = (math.log10(pr), math.log10(bo) if bo else 0.0)
        if n == 1:
            table[(BOS,)] = (-99.0, math.log10(gammas[2][(BOS,)]) if (BOS,) in gammas[2] else 0.0)
        out[n] = table
    return out


def _lower(probs, gammas, gram: tuple[str, ...]) -> float:
    """Interpolated probability of `gram` at its own order, backing off through lower orders."""
    n = len(gram)
    if gram in probs[n]:
        return probs[n][gram]
    weight = gammas[n].get(gram[:-1], 1.0) if n > 1 else 1.0
    return weight * _lower(probs, gammas, gram[1:])


def write_arpa(model: dict[int, dict[tuple[str, ...], tuple[float, float]]], path: str | os.PathLike) -> Path:
    """Write the model as an ARPA file, atomically, in a fixed (sorted) order."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    order = max(model)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".arpa.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write("\n\\data\\\n")
        for n in range(1, order + 1):
            fh.write(f"ngram {n}={len(model[n])}\n")
        for n in range(1, order + 1):
            fh.write(f"\n\\{n}-grams:\n")
            for gram in sorted(model[n]):
                lp, bo = model[n][gram]
                words = " ".join(gram)
                fh.write(f"{lp:.6f}\t{words}\t{bo:.6f}\n" if n < order else f"{lp:.6f}\t{words}\n")
        fh.write("\n\\end\\\n")
    os.replace(tmp, path)
    return path
