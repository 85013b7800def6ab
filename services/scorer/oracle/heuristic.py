"""HEURISTIC STAND-IN ORACLE: rubric scores computed from text statistics, for the CPU demo only.

This is not a language model and its labels are not quality judgements; it exists so the whole
label → distil → calibrate → score path runs on a laptop with no model weights. Every log line,
report and tracker run made with it says `oracle=heuristic (stand-in)`. The statistics echo
classic heuristic quality signals (Gopher/C4 rules: word length, sentence shape, symbol and
repetition ratios; for code, comment density and function structure), mapped to the rubric's
integer scale deterministically.
"""

from __future__ import annotations

import json
import math
import re

from services.scorer.oracle.base import Oracle, OracleRequest
from services.scorer.rubrics import CODE, GENERAL

_WORD = re.compile(r"[A-Za-z]+")
_SENT = re.compile(r"[.!?]+(?:\s|$)")


def _clip(x: float, hi: int) -> int:
    return int(min(hi, max(0, round(x))))


def general_scores(text: str) -> dict[str, int]:
    """Five 0-4 scores from prose statistics (the general rubric)."""
    words = _WORD.findall(text)
    n = max(1, len(words))
    chars = max(1, len(text))
    alpha = sum(c.isalpha() for c in text) / chars
    symbols = sum(c in "{}[]<>=_|\\/#*$@~^`" for c in text) / chars
    sentences = max(1, len(_SENT.findall(text)))
    words_per_sentence = n / sentences
    mean_word = sum(map(len, words)) / n
    distinct = len({w.lower() for w in words}) / n
    long_words = sum(len(w) >= 8 for w in words) / n
    return {
        "helpfulness": _clip(6 * alpha - 40 * symbols + 1.2 * math.log10(n) - 3.2, 4),
        "correctness": _clip(4.5 - 60 * symbols - 3 * max(0.0, 0.45 - distinct), 4),
        "coherence": _clip(4 - abs(words_per_sentence - 18) / 7, 4),
        "complexity": _clip(1.6 * (mean_word - 3.6) + 10 * long_words - 0.5, 4),
        "verbosity": _clip(1.6 * math.log10(n) - 1.0, 4),
    }


def code_scores(text: str) -> dict[str, int]:
    """Four 0-10 scores from source statistics (the code rubric)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    n = max(1, len(lines))
    comments = sum(ln.strip().startswith("#") for ln in lines) / n
    docstrings = text.count('"""') // 2 + text.count("'''") // 2
    defs = sum(ln.lstrip().startswith(("def ", "class ", "async def ")) for ln in lines)
    long_lines = sum(len(ln) > 79 for ln in lines) / n
    depth = sum((len(ln) - len(ln.lstrip())) // 4 for ln in lines) / n
    top_level = sum(not ln.startswith((" ", "\t", "def ", "class ", "@", "#", "import ", "from ", ")")) for ln in lines) / n
    return {
        "readability": _clip(7 + 14 * comments - 12 * long_lines - 0.6 * max(0.0, depth - 2), 10),
        "modularity": _clip(2 + 40 * defs / n + 1.5 * min(docstrings, 3) - 4 * top_level, 10),
        "clarity": _clip(4 + 2 * min(docstrings, 3) + 10 * comments - 1.2 * max(0.0, depth - 2.5), 10),
        "reusability": _clip(1 + 30 * defs / n + 2 * min(docstrings, 2) - 6 * top_level, 10),
    }


class HeuristicOracle(Oracle):
    """Deterministic CPU stand-in for the oracle LLM (see the module docstring): never a real label."""

    name = "heuristic"
    model = "heuristic-stand-in-v1"
    is_stand_in = True

    def _answer(self, requests: list[OracleRequest]) -> list[str]:
        out = []
        for req in requests:
            scores = code_scores(req.text) if req.kind == "code" else general_scores(req.text)
            dims = CODE.dims if req.kind == "code" else GENERAL.dims
            out.append(json.dumps({d: scores[d] for d in dims}))
        return out
