"""Each filter at each threshold's edge: one document just in, one just out, built from real text."""

from __future__ import annotations

import unicodedata

import pytest

from services.data_filter.filters.base import Doc
from services.data_filter.filters.c4 import C4Filter
from services.data_filter.filters.code import CodeFilter
from services.data_filter.filters.fineweb import FineWebFilter
from services.data_filter.filters.gopher_quality import GopherQualityFilter
from services.data_filter.filters.language import LanguageFilter, default_model_path, load_model, predict
from services.data_filter.filters.length import LengthFilter
from services.data_filter.filters.normalize import NormalizeFilter
from services.data_filter.filters.repetition import RepetitionFilter
from services.data_filter.filters.toxicity import ToxicityFilter
from shared.config.filters import (
    C4Config,
    CodeRulesConfig,
    FineWebConfig,
    GopherQualityConfig,
    LanguageConfig,
    LengthConfig,
    NormalizeConfig,
    RepetitionConfig,
    ToxicityConfig,
)
from tests.services.data_filter import realtext

WORDS = [w.strip(".,:;()\"'*") for w in realtext.manual_words()]
WORDS = [w for w in WORDS if w.isalpha() and 3 <= len(w) <= 9]


def doc(text: str, **meta) -> Doc:
    return Doc("d", text, "test", "web", dict(meta))


def words(n: int, start: int = 0) -> list[str]:
    return [WORDS[(start + i) % len(WORDS)] for i in range(n)]


# normalisation ---------------------------------------------------------------------------------

def test_normalize_composes_nfc_drops_controls_and_tidies_whitespace():
    f = NormalizeFilter(NormalizeConfig())
    raw = "Cafe\u0301\x00 and\t\u00a0 more\r\n\r\n\r\n\r\n\r\nend \x07line \ufeff"
    d = doc(raw)
    assert f.check(d) is None
    assert d.text == "Café and more\n\n\nend line"
    assert unicodedata.is_normalized("NFC", d.text)
    again = doc(d.text)
    f.check(again)
    assert again.text == d.text  # idempotent


def test_normalize_keeps_code_indentation_when_collapse_is_off():
    f = NormalizeFilter(NormalizeConfig(collapse_spaces=False))
    d = doc("def f():\n    return  1   \n")
    f.check(d)
    assert d.text == "def f():\n    return  1"


def test_normalize_drops_a_document_that_is_only_controls():
    assert NormalizeFilter(NormalizeConfig()).check(doc("\x00\x01 \n\x7f")) == "empty_after_normalize"


# length ----------------------------------------------------------------------------------------

def test_length_word_bounds_are_inclusive():
    f = LengthFilter(LengthConfig(min_words=10, max_words=20))
    assert f.check(doc(" ".join(words(10)))) is None
    assert f.check(doc(" ".join(words(9)))) == "too_few_words"
    assert f.check(doc(" ".join(words(20)))) is None
    assert f.check(doc(" ".join(words(21)))) == "too_many_words"


def test_length_char_and_line_bounds():
    f = LengthFilter(LengthConfig(min_chars=5, max_lines=3))
    assert f.check(doc("abcd")) == "too_few_chars"
    assert f.check(doc("a b c\nd\ne")) is None
    assert f.check(doc("a b c\nd\ne\nf")) == "too_many_lines"


# language ID -----------------------------------------------------------------------------------

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


# Gopher quality --------------------------------------------------------------------------------

def gopher(**kw) -> GopherQualityFilter:
    return GopherQualityFilter(GopherQualityConfig(**kw))


def stop_prose(n: int) -> str:
    """n words of real prose words with two stop words guaranteed."""
    return " ".join(["the", "of", *words(n - 2)])


def test_gopher_min_words_edge():
    f = gopher()
    assert f.check(doc(stop_prose(50))) is None
    assert f.check(doc(stop_prose(49))) == "too_few_words"


def test_gopher_max_words_edge():
    f = gopher(max_words=120)
    assert f.check(doc(stop_prose(120))) is None
    assert f.check(doc(stop_prose(121))) == "too_many_words"


def test_gopher_mean_word_length_edges():
    f = gopher()
    # 60 words of exactly 3 letters has mean 3 (in); one two-letter word pulls it below 3 (out)
    three = [w[:3] for w in words(58)]
    assert f.check(doc(" ".join(["the", "and", *three]))) is None
    assert f.check(doc(" ".join(["the", "of", *three]))) == "mean_word_length_low"
    ten = [(w * 4)[:10] for w in words(60)]
    f = gopher(min_stop_words=0)
    assert f.check(doc(" ".join(ten))) is None  # mean exactly 10
    assert f.check(doc(" ".join(ten[:-1] + ["abcdefghijk"]))) == "mean_word_length_high"


def test_gopher_hash_ratio_edge():
    f = gopher()
    base = stop_prose(100).split()
    assert f.check(doc(" ".join(base) + " " + "#" * 10)) is None  # 10 / 101 words < 0.1
    assert f.check(doc(" ".join(base) + " " + "#" * 11)) == "too_many_hashes"  # 11 / 101 > 0.1


def test_gopher_ellipsis_per_word_edge():
    f = gopher(max_ellipsis_lines_ratio=1.0)
    base = stop_prose(100).split()
    assert f.check(doc(" ".join(base) + " " + " ".join(["…"] * 10))) is None  # 10 / 110 words
    assert f.check(doc(" ".join(base) + " " + "…" * 12)) == "too_many_ellipses"  # 12 / 101 > 0.1


def test_gopher_bullet_lines_edge():
    f = gopher()
    lines = [f"- {' '.join(words(6, i * 6))}" for i in range(9)] + ["the of " + " ".join(words(6, 99))]
    assert f.check(doc("\n".join(lines))) is None  # 9 / 10 = 0.9, not above
    lines[-1] = "- " + lines[-1]
    assert f.check(doc("\n".join(lines))) == "too_many_bullet_lines"


def test_gopher_ellipsis_lines_edge():
    f = gopher()
    lines = ["the of " + " ".join(words(10, i * 10)) + ("…" if i < 3 else ".") for i in range(10)]
    assert f.check(doc("\n".join(lines))) is None  # 3 / 10 = 0.3
    lines[3] = lines[3][:-1] + "…"
    assert f.check(doc("\n".join(lines))) == "too_many_ellipsis_lines"


def test_gopher_alpha_words_edge():
    f = gopher()
    base = stop_prose(80).split()
    assert f.check(doc(" ".join(base + ["1984"] * 20))) is None  # 80 / 100 = 0.8
    assert f.check(doc(" ".join(base + ["1984"] * 21))) == "too_few_alpha_words"


def test_gopher_stop_words_edge():
    f = gopher()
    body = [w for w in words(80) if w.lower() not in GopherQualityConfig().stop_words]
    assert f.check(doc(" ".join(["The,", "of", *body]))) is None
    assert f.check(doc(" ".join(["The,", "Cat", *body]))) == "too_few_stop_words"


# Gopher repetition -----------------------------------------------------------------------------

def rep(**kw) -> RepetitionFilter:
    big = dict(top_ngram_max_frac={}, dup_ngram_max_frac={})
    return RepetitionFilter(RepetitionConfig(**{**big, **kw}))


def test_repetition_duplicate_line_fraction_edge():
    f = rep(max_dup_line_char_frac=1.0, max_dup_para_frac=1.0, max_dup_para_char_frac=1.0)
    uniq = [" ".join(words(8, i * 8)) for i in range(7)]
    assert f.check(doc("\n".join(uniq + [uniq[0]] * 3))) is None  # 3 / 10 = 0.3
    assert f.check(doc("\n".join(uniq[:6] + [uniq[0]] * 4))) == "dup_line_frac"  # 4 / 10


def test_repetition_duplicate_line_char_fraction_edge():
    f = rep(max_dup_line_frac=1.0, max_dup_para_frac=1.0, max_dup_para_char_frac=1.0, max_dup_line_char_frac=0.2)
    line = "x" * 20
    assert f.check(doc(f"{line}\n{'y' * 58}\n{line}")) is None  # 20 duplicated of 100 chars = 0.2
    assert f.check(doc(f"{line}\n{'y' * 57}\n{line}")) == "dup_line_char_frac"  # 20 of 99


def test_repetition_duplicate_paragraph_fraction_edges():
    f = rep(max_dup_line_frac=1.0, max_dup_line_char_frac=1.0, max_dup_para_char_frac=1.0)
    paras = [" ".join(words(8, i * 8)) for i in range(7)]
    assert f.check(doc("\n\n".join(paras + [paras[1]] * 3))) is None  # 3 / 10 = 0.3
    assert f.check(doc("\n\n".join(paras[:6] + [paras[1]] * 4))) == "dup_para_frac"
    g = rep(max_dup_line_frac=1.0, max_dup_line_char_frac=1.0, max_dup_para_frac=1.0)
    a, b = "x" * 20, "y" * 56  # 20 + 2 + 56 + 2 + 20 = 100 characters
    assert g.check(doc(f"{a}\n\n{b}\n\n{a}")) is None  # 20 / 100 = 0.2
    assert g.check(doc(f"{a}\n\n{b[:-1]}\n\n{a}")) == "dup_para_char_frac"  # 20 / 99


def test_repetition_top_2gram_edge():
    f = rep(top_ngram_max_frac={2: 0.20})
    # "ab cd" (5 chars incl. space) repeated k times in a text of total length L
    pair = "ab cd"
    filler = " ".join(words(40))
    for k in range(1, 30):
        text = " ".join([pair] * k) + " " + filler
        share = (5 * k) / len(text)
        verdict = f.check(doc(text))
        assert (verdict == "top_ngram") == (share > 0.20), (k, share, verdict)


def test_repetition_duplicated_5gram_edge_and_greedy_count():
    from services.data_filter.filters.repetition import dup_ngram_chars

    w = words(5)
    seq = w + words(30, 100) + w  # one repeated 5-gram
    repeated = [False] * (len(seq) - 4)
    repeated[0] = repeated[-1] = True
    assert dup_ngram_chars(seq, 5, repeated) == sum(map(len, w))
    dup_chars = sum(map(len, w))
    text = " ".join(seq)
    frac = dup_chars / len(text)
    assert rep(dup_ngram_max_frac={5: frac}).check(doc(text)) is None
    assert rep(dup_ngram_max_frac={5: frac - 1e-6}).check(doc(text)) == "dup_ngram"


def test_repetition_defaults_are_gophers_table_a1():
    c = RepetitionConfig()
    assert c.top_ngram_max_frac == {2: 0.20, 3: 0.18, 4: 0.16}
    assert c.dup_ngram_max_frac == {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}
    assert (c.max_dup_line_frac, c.max_dup_para_frac, c.max_dup_line_char_frac, c.max_dup_para_char_frac) == (0.3, 0.3, 0.2, 0.2)


def test_real_prose_passes_all_default_prose_rules():
    d = doc(realtext.prose_doc(6, start=10))
    for f in (RepetitionFilter(RepetitionConfig()), GopherQualityFilter(GopherQualityConfig())):
        assert f.check(d) is None, f.name


# C4 and FineWeb --------------------------------------------------------------------------------

def c4(**kw) -> C4Filter:
    return C4Filter(C4Config(**kw))


def sentence(i: int) -> str:
    return " ".join(words(7, i * 7)).capitalize() + "."


def test_c4_min_sentences_edge():
    f = c4()
    assert f.check(doc("\n".join(sentence(i) for i in range(5)))) is None
    assert f.check(doc("\n".join(sentence(i) for i in range(4)))) == "too_few_sentences"


def test_c4_removes_short_unterminated_javascript_and_policy_lines():
    f = c4()
    good = [sentence(i) for i in range(5)]
    d = doc("\n".join([*good, "Menu Home About", "Please enable JavaScript to view the comments here.",
                       "This site uses cookies to improve your experience today.", " ".join(words(2)) + ".",
                       "A line that trails off...", "for (i = 0; i < n; i++) {"]))
    assert f.check(d) is None
    assert d.text == "\n".join(good)


def test_c4_min_words_per_line_edge():
    f = c4(min_sentences=1)
    three = " ".join(words(3)) + "."
    two = " ".join(words(2)) + "."
    assert f.check(doc(three)) is None
    assert f.check(doc(two)) == "too_few_sentences"


def test_c4_document_rules_apply_to_candidate_lines():
    body = "\n".join(sentence(i) for i in range(5))
    paper = c4()
    assert paper.check(doc(body + "\nThe set {1, 2} has two elements.")) == "curly_bracket"
    assert paper.check(doc("Lorem ipsum dolor sit amet.\n" + body)) == "lorem_ipsum"
    assert paper.check(doc(body + "\nint main() { return 0; }")) is None  # not a candidate line: dropped alone


def test_c4_finewebs_reading_keeps_unterminated_lines():
    body = [sentence(i) for i in range(4)]
    fineweb_c4 = c4(drop_no_terminal_punct=False)
    d = doc("\n".join(["Menu Home About", *body, "Please enable JavaScript to view the comments here."]))
    assert fineweb_c4.check(d) is None  # the heading counts as a sentence, as datatrove's splitter counts it
    assert d.text == "\n".join(["Menu Home About", *body])
    assert fineweb_c4.check(doc("\n".join([*body, sentence(5), "int main() { return 0; }"]))) == "curly_bracket"


def test_c4_skips_and_counts_languages_it_does_not_cover():
    d = doc("\n".join(" ".join(realtext.udhr("de")[:1]).split(". ")[:2]), language="de")
    assert c4().check(d) is None and d.skips == ["not_applied_to:de"]
    assert c4(languages=[]).check(doc("Ein Satz ohne Ende", language="de")) == "too_few_sentences"


def fineweb(**kw) -> FineWebFilter:
    return FineWebFilter(FineWebConfig(**kw))


def test_fineweb_line_punctuation_ratio_edge():
    f = fineweb(max_short_line_ratio=1.0, max_newline_ratio=10.0)
    lines = [" ".join(words(8, i * 8)) for i in range(25)]
    ok = lines[:]
    for i in range(3):
        ok[i] += "."  # 3 / 25 = 0.12, not below
    assert f.check(doc("\n".join(ok))) is None
    bad = lines[:]
    for i in range(2):
        bad[i] += "."
    assert f.check(doc("\n".join(bad))) == "line_punct_ratio"


def test_fineweb_short_line_ratio_edge():
    f = fineweb(min_line_punct_ratio=0.0, max_newline_ratio=10.0)
    long = [" ".join(words(8, i * 8)) + "." for i in range(100)]
    short = [f"Item {i}." for i in range(100)]
    assert f.check(doc("\n".join(short[:67] + long[:33]))) is None  # 0.67
    assert f.check(doc("\n".join(short[:68] + long[:32]))) == "short_line_ratio"


def test_fineweb_newline_ratio_and_duplicate_lines():
    f = fineweb(min_line_punct_ratio=0.0, max_short_line_ratio=1.0)
    lines = [" ".join(words(3, i * 3)) + "." for i in range(10)]  # 9 newlines / 30 words = 0.3
    assert f.check(doc("\n".join(lines))) is None
    lines.append("Yes.")
    assert f.check(doc("\n".join(lines))) == "newline_ratio"  # 10 / 31 > 0.3
    paras = [realtext.manual_paragraphs()[i] for i in range(4)]
    assert fineweb().check(doc("\n".join(paras + [paras[0]]))) == "dup_line_char_ratio"


# toxicity --------------------------------------------------------------------------------------

def test_toxicity_ratio_edge_in_english():
    f = ToxicityFilter(ToxicityConfig(max_ratio=0.02, min_hits=2))
    body = words(98)
    assert f.check(doc(" ".join(body + ["shit,", "Fuck"]))) is None  # 2 / 100 = 0.02
    assert f.check(doc(" ".join(body[:-1] + ["shit,", "Fuck"]))) == "word_list_ratio"  # 2 / 99


def test_toxicity_is_language_aware():
    f = ToxicityFilter(ToxicityConfig(max_ratio=0.0, min_hits=1))
    text = " ".join(realtext.udhr("de")[:1]) + " Scheiße"
    assert f.check(doc(text, language="de")) == "word_list_ratio"
    assert f.check(doc(text, language="fi")) is None  # the Finnish list has no German words
    assert f.check(doc(" ".join(realtext.udhr("de")[:2]), language="de")) is None


def test_toxicity_min_hits_edge():
    f = ToxicityFilter(ToxicityConfig(max_ratio=0.0, min_hits=2))
    assert f.check(doc("Shit. " + " ".join(words(20)))) is None
    assert f.check(doc("Shit. " + " ".join(words(20)) + " fuck")) == "word_list_ratio"


# code ------------------------------------------------------------------------------------------

def code(**kw) -> CodeFilter:
    return CodeFilter(CodeRulesConfig(enabled=True, **kw))


def test_code_max_line_length_edge():
    src = realtext.code_files()["python_heapq.py"]
    f = code(max_mean_line_length=10_000)
    assert f.check(doc(src + "\n# " + "x" * 998)) is None  # 1000 chars
    assert f.check(doc(src + "\n# " + "x" * 999)) == "max_line_length"


def test_code_mean_line_length_edge_flags_minified():
    f = code()
    line = "x = f(y); " * 10  # 100 characters
    assert f.check(doc("\n".join([line] * 10))) is None  # mean 100
    assert f.check(doc("\n".join([line + ";"] * 10))) == "minified"


def test_a_real_js_file_with_a_2004_char_line_is_removed():
    from pathlib import Path

    import matplotlib

    src = (Path(matplotlib.__file__).parent / "backends/web_backend/js/mpl.js").read_text(encoding="utf-8")
    assert code().check(doc(src)) == "max_line_length"


def test_code_alnum_fraction_edge():
    f = code()
    assert f.check(doc("ab+-++-+")) is None  # 2 / 8 = 0.25
    assert f.check(doc("ab+-++-++")) == "low_alnum_fraction"


def test_code_autogenerated_header_within_first_lines_only():
    f = code()
    body = realtext.code_files()["python_textwrap.py"]
    assert f.check(doc("# Code generated by protoc. DO NOT EDIT.\n" + body)) == "autogenerated"
    assert f.check(doc("\n" * 5 + "# generated by hand, for once\n" + body)) is None


def test_code_encoded_data_and_data_files():
    f = code()
    src = realtext.code_files()["python_json_decoder.py"]
    blob = ("QUJD" * 300)[:1025]
    wrapped = "\n".join(blob[i : i + 76] for i in range(0, len(blob), 76))
    assert f.check(doc(src + f'\nDATA = """{wrapped[:1024]}"""')) is None  # a 1024-char run
    assert f.check(doc(src + f'\nDATA = """{wrapped[:1025]}"""')) == "encoded_data"
    rows = "\n".join(f"{i}, {i * 3.5}, {i % 7}" for i in range(200))
    assert f.check(doc("x, y, z\n" + rows)) == "data_file"


def test_real_source_files_of_several_languages_pass_the_code_rules():
    files = realtext.code_files()
    assert len(files) >= 6, sorted(files)
    f = code()
    verdicts = {name: f.check(doc(src)) for name, src in files.items()}
    assert all(v is None for v in verdicts.values()), verdicts


def test_toxicity_classifier_option_flags_abuse_and_passes_prose():
    f = ToxicityFilter(ToxicityConfig(max_ratio=1.0, classifier=True, classifier_threshold=0.9))
    assert f.check(doc("You are a fucking idiot, shut the fuck up you stupid piece of shit.", language="en")) == "classifier"
    assert f.check(doc(realtext.prose_doc(2), language="en")) is None
