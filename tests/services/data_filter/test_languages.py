"""Language-aware rules: the language found travels with the document and every rule uses it; no
rule tuned for English removes another language; what a rule cannot judge is skipped and counted."""

from __future__ import annotations

import json

import pytest

from services.data_filter import languages
from services.data_filter.accounting import Chain
from services.data_filter.filters import build_chain
from services.data_filter.filters.base import Doc
from services.data_filter.filters.gopher_quality import GopherQualityFilter
from services.data_filter.filters.language import LanguageFilter
from services.data_filter.filters.length import LengthFilter
from services.data_filter.filters.repetition import RepetitionFilter
from services.data_filter.filters.toxicity import RESOURCES, ToxicityFilter
from shared.config.filters import (
    GopherQualityConfig,
    LanguageConfig,
    LengthConfig,
    RepetitionConfig,
    ToxicityConfig,
)
from shared.config.loader import load_config
from tests.services.data_filter import realtext

PROFILES = sorted(p.stem for p in languages.RESOURCES.glob("*.json"))


def _udhr(lang: str) -> str:
    return "\n\n".join(realtext.udhr(lang))


def test_profiles_cover_the_thirty_most_common_web_languages_with_provenance():
    assert len(PROFILES) >= 30
    for lang in PROFILES:
        prof = json.loads((languages.RESOURCES / f"{lang}.json").read_text(encoding="utf-8"))
        assert prof["source"].startswith("huggingface/fineweb-2 configs/") and prof["language"] == lang
        assert len(prof["gopher_quality"]["stop_words"]) >= 8, lang
    assert (languages.RESOURCES / "PROVENANCE.md").is_file() and (languages.RESOURCES / "NOTICE").is_file()


@pytest.mark.parametrize("lang", ["de", "fr", "es", "ru"])
def test_prose_in_another_language_passes_gopher_with_its_own_stop_words(lang):
    text = _udhr(lang)
    own = GopherQualityFilter(GopherQualityConfig(min_words=20))
    english = GopherQualityFilter(GopherQualityConfig(min_words=20, language_profiles=False))
    assert own.check(Doc("d", text, "s", meta={"language": lang})) is None
    assert english.check(Doc("d", text, "s", meta={"language": lang})) == "too_few_stop_words"


def test_a_language_without_a_stop_word_list_is_skipped_and_counted_not_removed():
    f = GopherQualityFilter(GopherQualityConfig(min_words=20))
    doc = Doc("d", _udhr("de"), "s", meta={"language": "sw"})  # no Swahili profile
    assert f.check(doc) is None and doc.skips == ["no_stop_words_for:sw"]
    chain = Chain([f])
    chain.run(Doc("e", _udhr("de"), "s", meta={"language": "sw"}))
    assert chain.stats[0].to_dict()["skipped"] == {"no_stop_words_for:sw": 1}


def test_word_length_bounds_follow_the_language():
    german = " ".join(["Datenschutzgrundverordnungsänderungsgesetz"] * 3 + _udhr("de").split())
    f = GopherQualityFilter(GopherQualityConfig(min_words=20, max_mean_word_length=6.0))
    assert f.check(Doc("d", german, "s", meta={"language": "de"})) is None  # German profile: up to 15
    assert f.check(Doc("d", german, "s", meta={"language": "en"})) == "mean_word_length_high"


def test_japanese_and_chinese_have_word_units_the_rules_can_count():
    ja = "DebianはLinuxディストリビューションの一つです。多くの人が自由なソフトウェアを使っています。"
    units = languages.words(ja, "ja")
    assert "Debian" in units and "ディストリビューション" in units and "つです。" in units
    zh = "自由软件基金会是一个非营利组织。"
    assert languages.words(zh, "zh")[:3] == ["自", "由", "软"] and languages.words(zh, "zh")[-1] == "织。"
    text = "\n".join([ja] * 1 + ["これは日本語の文章で、データの品質を確かめるために書かれています。" + str(i) for i in range(8)])
    f = GopherQualityFilter(GopherQualityConfig())
    assert f.check(Doc("d", text, "s", meta={"language": "ja"})) is None
    assert Doc("d", text, "s", meta={"language": "ja"}).words() != text.split()


def test_scripts_without_a_segmenter_skip_word_rules_and_count_it():
    thai = "ปฏิญญาสากลว่าด้วยสิทธิมนุษยชน " * 3
    doc = Doc("d", thai, "s", meta={"language": "th"})
    assert LengthFilter(LengthConfig(min_words=50)).check(doc) is None
    assert RepetitionFilter(RepetitionConfig()).check(Doc("d", "ข้อความ\nอื่น", "s", meta={"language": "th"})) is None
    assert doc.skips == ["word_bounds_no_segmenter:th"]


def test_by_language_overrides_one_language_only():
    cfg = GopherQualityConfig(by_language={"de": {"min_words": 10_000}})
    f = GopherQualityFilter(cfg)
    assert f.check(Doc("d", _udhr("de"), "s", meta={"language": "de"})) == "too_few_words"
    assert f.check(Doc("d", _udhr("fr"), "s", meta={"language": "fr"})) is None


def test_the_language_found_travels_with_the_document_to_later_rules_and_the_output(tmp_path):
    chain = load_config(None, ["data.filter.chains.web.language.languages=[en, de]"]).data.filter.chains["web"]
    filters = build_chain(chain)
    doc = Doc("d", realtext.prose_doc(2) + "\n\n" + _udhr("de"), "s")
    Chain(filters).run(doc)
    assert doc.meta["language"] in ("en", "de") and 0 < doc.meta["language_score"] <= 1


def test_a_partly_translated_page_counts_the_probability_of_every_kept_language():
    lid = LanguageFilter(LanguageConfig(languages=["de", "en"]))
    german_only = LanguageFilter(LanguageConfig(languages=["de"]))
    mixed = " ".join(realtext.udhr("de")[:1]) + " " + realtext.prose_doc(1, start=5)[:400]
    doc = Doc("d", mixed, "s")
    assert lid.check(doc) is None and doc.meta["language"] in ("de", "en")
    top = german_only.check(Doc("e", mixed, "s"))
    assert top in (None, "language_low_score", "language_not_kept")
    assert doc.meta["language_score"] >= 0.65


def test_ordinary_words_of_scripture_medicine_and_news_are_no_evidence_of_toxicity():
    """Clean Wikipedia articles holding LDNOOBW entries with ordinary senses (sex, rape, penis, ass ...)."""
    wiki = [d["text"] for d in realtext.demo_documents("wiki")]
    default = ToxicityFilter(ToxicityConfig())
    # the previous default: better-profanity added, no exclusions (an explicit lists_dir takes none), 1% and 2 hits
    old = ToxicityFilter(ToxicityConfig(use_better_profanity=True, max_ratio=0.01, min_hits=2, lists_dir=str(RESOURCES)))
    removed_now = sum(default.check(Doc("d", t, "s", meta={"language": "en"})) is not None for t in wiki)
    removed_before = sum(old.check(Doc("d", t, "s", meta={"language": "en"})) is not None for t in wiki)
    assert removed_now == 0
    assert removed_before >= 5  # better-profanity plus the unexcluded list removed these clean articles
    spanish = "La persona fue asesinada. El asno y el burro comen. El infierno de Dante. " * 5
    assert default.check(Doc("d", spanish, "s", meta={"language": "es"})) is None


def test_documents_with_five_percent_strongly_profane_tokens_are_removed():
    body = realtext.prose_doc(2, start=30).split()
    k = len(body) // 19 + 1  # 5% of the final tokens
    text = " ".join(body[: len(body) - k] + ["fuck", "shit", "cunt"] * (k // 3 + 1))
    assert ToxicityFilter(ToxicityConfig()).check(Doc("d", text, "s", meta={"language": "en"})) == "word_list_ratio"
    one = " ".join(body + ["shit"])
    assert ToxicityFilter(ToxicityConfig()).check(Doc("d", one, "s", meta={"language": "en"})) is None
