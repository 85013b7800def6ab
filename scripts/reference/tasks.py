"""The offline task suite: cloze and multiple-choice continuation items cut from evaluation-only text.

The two kinds small proxies are judged on (FineWeb's and DataDecide's early-signal tasks):
- cloze: a passage without its last word (prose, as in LAMBADA) or a function without its last
  line (code); the choices are the real ending and endings of other documents;
- continuation: a passage's opening sentences, or a function's first lines, and the real next
  sentence/line against sentences/lines drawn from other documents (as HellaSwag and StoryCloze
  draw endings), of comparable length so that raw log-probability is not decided by length alone.
Each item has NUM_CHOICES choices with the gold one at a seeded random position. Code distractor
lines take the gold line's indentation, so indentation alone does not give the answer away.
"""

from __future__ import annotations

import random
import re

NUM_CHOICES = 4
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_LAST_WORD = re.compile(r"^(?P<context>.*\S)\s+(?P<word>[A-Za-z][A-Za-z'-]*[A-Za-z])(?P<tail>[.!?]?)$", re.S)


def _item(rng: random.Random, task: str, n: int, context: str, gold: str, distractors: list[str], meta: dict) -> dict:
    choices = [gold, *distractors]
    rng.shuffle(choices)
    return {"id": f"{task}-{n:04d}", "context": context, "choices": choices, "gold": choices.index(gold),
            "source": f"{meta['package']} {meta['version']} {meta['path']}"}


def _pick(rng: random.Random, pool: list[str], gold: str, k: int, length_ratio: float | None = None) -> list[str] | None:
    """k distinct strings from `pool`, none equal to `gold` (and, with `length_ratio`, of comparable length)."""
    lo, hi = (len(gold) / length_ratio, len(gold) * length_ratio) if length_ratio else (0, float("inf"))
    candidates = sorted({p for p in pool if p != gold and lo <= len(p) <= hi})
    if len(candidates) < k:
        return None
    return rng.sample(candidates, k)


def prose_cloze(docs: list[dict], rng: random.Random) -> list[dict]:
    """Each paragraph that ends in a word: context = the paragraph up to that word, choices = ' ' + word."""
    cut = []
    for d in docs:
        for para in d["text"].split("\n\n"):
            m = _LAST_WORD.match(para)
            if m and len(m["word"]) >= 3 and len(m["context"]) >= 150:
                cut.append((m["context"], " " + m["word"], d["meta"]))
    pool = [c[1] for c in cut]
    items = []
    for context, gold, meta in cut:
        distractors = _pick(rng, pool, gold, NUM_CHOICES - 1)
        if distractors:
            items.append(_item(rng, "prose_cloze", len(items), context, gold, distractors, meta))
    return items


def prose_continuation(docs: list[dict], rng: random.Random) -> list[dict]:
    """Two or more opening sentences of a passage, then the real next sentence or one from another passage."""
    split = [(_SENTENCE_END.split(d["text"].replace("\n\n", " ")), d["meta"]) for d in docs]
    items = []
    for i, (sentences, meta) in enumerate(split):
        if len(sentences) < 3:
            continue
        k = rng.randrange(2, len(sentences))
        others = [s for j, (ss, _) in enumerate(split) if j != i for s in ss[1:]]
        gold = " " + sentences[k]
        distractors = _pick(rng, [" " + s for s in others], gold, NUM_CHOICES - 1, length_ratio=1.5)
        if distractors:
            items.append(_item(rng, "prose_continuation", len(items), " ".join(sentences[:k]), gold, distractors, meta))
    return items


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def _reindent(line: str, like: str) -> str:
    return like[:len(like) - len(like.lstrip())] + line.lstrip()


def code_cloze(docs: list[dict], rng: random.Random) -> list[dict]:
    """A function without its last line; choices: '\\n' + the real last line or other functions' last lines."""
    cut = [(_lines(d["text"]), d["meta"]) for d in docs]
    cut = [(lines, meta) for lines, meta in cut if len(lines) >= 4]
    pool = [lines[-1].lstrip() for lines, _ in cut]
    items = []
    for lines, meta in cut:
        gold_line = lines[-1]
        picked = _pick(rng, pool, gold_line.lstrip(), NUM_CHOICES - 1)
        if picked:
            distractors = ["\n" + _reindent(p, gold_line) for p in picked]
            items.append(_item(rng, "code_cloze", len(items), "\n".join(lines[:-1]), "\n" + gold_line, distractors, meta))
    return items


def code_continuation(docs: list[dict], rng: random.Random) -> list[dict]:
    """A function's first lines (at least its signature and one more), then the real next line or a
    line from another function of comparable length, at the gold line's indentation."""
    cut = [(_lines(d["text"]), d["meta"]) for d in docs]
    items = []
    for i, (lines, meta) in enumerate(cut):
        if len(lines) < 4:
            continue
        k = rng.randrange(2, len(lines))
        gold_line = lines[k]
        if len(gold_line.strip()) < 8:
            continue
        others = [ln.lstrip() for j, (ls, _) in enumerate(cut) if j != i for ln in ls[1:] if len(ln.strip()) >= 8]
        picked = _pick(rng, others, gold_line.lstrip(), NUM_CHOICES - 1, length_ratio=1.5)
        if picked:
            distractors = ["\n" + _reindent(p, gold_line) for p in picked]
            items.append(_item(rng, "code_continuation", len(items), "\n".join(lines[:k]), "\n" + gold_line,
                               distractors, meta))
    return items


TASK_BUILDERS = {
    "prose_cloze": ("prose", prose_cloze),
    "prose_continuation": ("prose", prose_continuation),
    "code_cloze": ("code", code_cloze),
    "code_continuation": ("code", code_continuation),
}
