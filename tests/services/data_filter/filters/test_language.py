"""Language ID: the score threshold at its edge, routing by configured languages on real UDHR text."""

from __future__ import annotations

import pytest

from services.data_filter.filters.language import LanguageFilter, default_model_path, load_model, predict
from shared.config.filters import LanguageConfig
from tests.services.data_filter import realtext
from tests.services.data_filter.filters.edge import doc


@pytest.fixture(scope="module")
def lid():
    return load_model(str(default_model_path()))


def test_language_keeps_english_above_threshold_and_drops_just_below(lid):
    text = realtext.prose_doc(2)
    lang, score = predict(lid, text)
    assert lang == "en"
    assert LanguageFilter(LanguageConfig(min_score=score - 1e-4)).check(doc(text)) is None
    assert LanguageFilter(LanguageConfig(min_score=score + 1e-4)).check(doc(text)) == "language_low_score"


@pytest.mark.parametrize("lang", ["de", "fr", "es", "ru"])
def test_language_routes_real_udhr_text_by_configured_languages(lang):
    text = " ".join(realtext.udhr(lang)[:2])
    d = doc(text)
    assert LanguageFilter(LanguageConfig(languages=["en"])).check(d) == "language_not_kept"
    assert d.meta["language"] == lang
    assert LanguageFilter(LanguageConfig(languages=["en", lang])).check(doc(text)) is None


def test_language_default_threshold_is_fineweb_0_65():
    assert LanguageConfig().min_score == 0.65


def test_the_cached_predictor_and_fasttext_itself_decide_alike_on_real_text():
    cached, exact = LanguageFilter(LanguageConfig(languages=["en", "de"])), LanguageFilter(
        LanguageConfig(languages=["en", "de"], predictor="fasttext"))
    texts = [realtext.prose_doc(3), *(" ".join(realtext.udhr(lang)[:2]) for lang in ("de", "fr", "es", "ru", "en"))]
    for text in texts:
        a, b = doc(text), doc(text)
        assert cached.check(a) == exact.check(b)
        assert a.meta["language"] == b.meta["language"]
        assert abs(a.meta["language_score"] - b.meta["language_score"]) <= 1e-4
    assert type(cached.model).__name__ == "BagClassifier" and type(exact.model).__name__ == "FastTextPredictor"
