"""Degraded copies of a document: the defects a quality scorer must notice anywhere in a document.

Used twice: the label stage can add degraded copies to the oracle's sample
(`scorer.oracle.augment_fraction`), so the heads learn from documents that differ from a clean
one by exactly one defect, and `benchmarks/scorer_pairs.py` asks whether the scorer ranks each
clean document above its degraded copies. Every function is deterministic given its `rng`.

| kind | for | what it does |
|---|---|---|
| `order` | prose | shuffles the sentences but the last, keeping the number of sentences per paragraph |
| `spelling` | prose | a typo (swap, drop, double or replace a letter) in 10% of words of 3+ letters |
| `spam` | prose | inserts 3 lines of marketing spam between paragraphs or sentences |
| `truncation` | prose | cuts the last 30% of characters off, mid-sentence |
| `repetition` | prose | repeats a paragraph (or a run of sentences) twice more after itself |
| `obfuscation` | code | strips comments and documentation and renames names in code to meaningless ones (`v1`, `a`, `_0x1f3a`) |
| `layout` | code | joins all lines into one, dropping newlines and indentation |
| `uncommented` | code | strips comments and documentation only |
| `renamed` | code | renames names in code only |

Comments and names are stripped in the file's own language (oracle/code_lexer.py), so the copies
of Perl, JavaScript or C lose what the oracle counts there. `uncommented` and `renamed` are the two
halves of `obfuscation`: trained on only the whole obfuscation, the heads may learn one tell of it
(a `v12` token) instead of both things the rubric's readability and clarity value.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from services.scorer.oracle.code_lexer import KEYWORDS, code_language, lex
from services.scorer.oracle.prose_signals import cohesion
from services.scorer.oracle.text_units import paragraphs, sentences

_IDENT = re.compile(r"(?<![\w.])(?<!->)(?<!->\{)[A-Za-z_][A-Za-z0-9_]*")
_SENT_SPLIT = re.compile(r"(?<=[.!?。！？])\s+")
SPAM_LINES = (
    "CLICK HERE to claim your FREE prize now!!! Limited offer, visit www.best-deals-4u.example",
    "Buy now and save 90% - cheap watches, casino bonus, free shipping!!! http://spam.example/offer",
    "WINNER! You have been selected. Subscribe today: http://click.example/win?id=777",
    "Best price guaranteed!!! Order now at www.cheap-pills.example - 100% free trial",
)


def _sentences_by_paragraph(text: str) -> list[list[str]]:
    return [[s for s in _SENT_SPLIT.split(p.replace("\n", " ")) if s.strip()] for p in paragraphs(text)]


def shuffle_sentences(text: str, rng: random.Random) -> str:
    """The sentences in a new order; the last one stays last.

    Why the last stays: a copy must differ from its source by one defect. Moving the last sentence
    also changes how the document ends, and in the demo sample a third of the documents end
    without terminal punctuation (a formula, a heading, a cut page): shuffled whole, such a copy
    usually ends on a finished sentence, which the oracle and the heads both reward, so order pairs
    built from such copies teach the heads that a shuffle raises quality as often as it lowers it.
    A cut ending is the `truncation` kind's defect.
    """
    paras = _sentences_by_paragraph(text)
    flat = [s for p in paras for s in p]
    last = flat.pop() if flat else None
    original = list(flat)
    for _ in range(10):
        rng.shuffle(flat)
        if flat != original:
            break
    flat += [last] if last is not None else []
    out, i = [], 0
    for p in paras:
        out.append(" ".join(flat[i : i + len(p)]))
        i += len(p)
    return "\n\n".join(out)


def _typo(word: str, rng: random.Random) -> str:
    i = rng.randrange(len(word) - 1)
    op = rng.randrange(4)
    if op == 0:
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if op == 1:
        return word[:i] + word[i + 1 :]
    if op == 2:
        return word[: i + 1] + word[i] + word[i + 1 :]
    return word[:i] + rng.choice("etaoinshrdlu") + word[i + 1 :]


def misspell(text: str, rng: random.Random, rate: float = 0.1) -> str:
    return re.sub(r"[^\W\d_]{3,}", lambda m: _typo(m.group(0), rng) if rng.random() < rate else m.group(0), text)


def insert_spam(text: str, rng: random.Random, lines: int = 3) -> str:
    paras = paragraphs(text)
    units = paras if len(paras) >= 2 else [s for p in _sentences_by_paragraph(text) for s in p]
    sep = "\n\n" if len(paras) >= 2 else " "
    for line in rng.sample(SPAM_LINES, min(lines, len(SPAM_LINES))):
        units.insert(rng.randrange(len(units) + 1), line)
    return sep.join(units)


def truncate(text: str, rng: random.Random, fraction: float = 0.3) -> str:
    cut = int(len(text) * (1 - fraction))
    while cut > 1 and not text[cut - 1].isalnum():  # end mid-word, not on a sentence boundary
        cut -= 1
    return text[:cut]


def repeat_paragraph(text: str, rng: random.Random, times: int = 2) -> str:
    paras = paragraphs(text)
    long = [i for i, p in enumerate(paras) if len(p.split()) >= 15]
    if len(paras) >= 2 and long:
        i = rng.choice(long)
        return "\n\n".join(paras[: i + 1] + [paras[i]] * times + paras[i + 1 :])
    sents = [s for p in _sentences_by_paragraph(text) for s in p]
    i = rng.randrange(max(1, len(sents) - 2))
    run = sents[i : i + 3]
    return " ".join(sents[: i + len(run)] + run * times + sents[i + len(run) :])


_LOWER = "abcdefghijklmnopqrstuvwxyz"


def _meaningless_names(rng: random.Random) -> Callable[[int], str]:
    """One of three ways minifiers and obfuscators name things, chosen by `rng`: `v1, v2, ...`;
    `a, b, ..., z, aa, ab, ...`; `_0x1f3a`-like hex. The heads must not learn one spelling of a
    meaningless name as "bad code" (a real minified file uses letters, not `v1`)."""
    scheme = rng.randrange(3)
    salt = rng.randrange(0x1000, 0xF000)

    def letters(i: int) -> str:
        out = ""
        while True:
            out = _LOWER[i % 26] + out
            i = i // 26 - 1
            if i < 0:
                return out

    if scheme == 0:
        return lambda i: f"v{i + 1}"
    if scheme == 1:
        return letters
    return lambda i: f"_0x{salt + 7 * i:x}"


def strip_comments(text: str, rng: random.Random | None = None) -> str:
    """`text` without its comments and documentation, in its own language (code_lexer.py); a line
    left blank by the removal goes with it. Strings and code are kept byte for byte."""
    lang = code_language(text)
    kept = "".join(text[t.start:t.end] for t in lex(text, lang) if t.kind not in ("comment", "doc"))
    old_blank = {i for i, ln in enumerate(text.split("\n")) if not ln.strip()}
    out = [ln.rstrip() for ln in kept.split("\n")]
    if len(out) == len(text.split("\n")):  # line numbers still match: keep the file's own blank lines only
        return "\n".join(ln for i, ln in enumerate(out) if ln or i in old_blank)
    return "\n".join(ln for ln in out if ln)


def rename_identifiers(text: str, rng: random.Random) -> str:
    """Every name in code (not keywords or the language's builtins, not a member after `.` or `->`,
    nothing inside a string or comment) renamed to a short meaningless one, consistently."""
    lang = code_language(text)
    new_name = _meaningless_names(rng)
    names: dict[str, str] = {}

    def rename(m: re.Match) -> str:
        w = m.group(0)
        if w in KEYWORDS[lang] or len(w) < 2:
            return w
        if w not in names:
            names[w] = new_name(len(names))
        return names[w]

    return "".join(_IDENT.sub(rename, text[t.start:t.end]) if t.kind == "code" else text[t.start:t.end]
                   for t in lex(text, lang))


def obfuscate(text: str, rng: random.Random) -> str:
    """Comments and documentation stripped, then names mangled: the copy a minifier would ship."""
    return rename_identifiers(strip_comments(text), rng)


def collapse_layout(text: str, rng: random.Random) -> str:
    return " ".join(ln.strip() for ln in text.splitlines() if ln.strip())


DEGRADATIONS: dict[str, tuple[str, Callable[[str, random.Random], str]]] = {
    "order": ("prose", shuffle_sentences),
    "spelling": ("prose", misspell),
    "spam": ("prose", insert_spam),
    "truncation": ("prose", truncate),
    "repetition": ("prose", repeat_paragraph),
    "obfuscation": ("code", obfuscate),
    "layout": ("code", collapse_layout),
    "uncommented": ("code", strip_comments),
    "renamed": ("code", rename_identifiers),
}


def kinds_for(doc_kind: str) -> list[str]:
    """Degradation kinds that apply to a source kind (code → code kinds; everything else → prose)."""
    family = "code" if doc_kind == "code" else "prose"
    return [k for k, (fam, _) in DEGRADATIONS.items() if fam == family]


def degrade(text: str, kind: str, rng: random.Random) -> str:
    return DEGRADATIONS[kind][1](text, rng)


# A shuffle needs sentences to move (five, the last staying) and an order to lose: adjacent
# sentences that share words more than any two do (the oracle's `cohesion`, in standard deviations).
MIN_ORDER_SENTENCES = 6
MIN_ORDER_COHESION = 0.2


def can_carry(text: str, kind: str) -> bool:
    """Whether planting `kind` in `text` makes a copy that is worse in a way one can read off the text.

    Only `order` has a condition. Shuffling a two-line fortune, a formal proof whose steps share no
    words, or a list of unrelated articles gives a copy that neither the oracle nor any statistic
    of the text can tell from its source. Such copies were two thirds of the order pairs in the
    demo's labelled sample, and pairs whose "worse" side reads the same teach the heads that a
    shuffle costs nothing.
    """
    if kind != "order":
        return True
    n = sum(len(p) for p in _sentences_by_paragraph(text))
    return n >= MIN_ORDER_SENTENCES and cohesion(sentences(text)) >= MIN_ORDER_COHESION
