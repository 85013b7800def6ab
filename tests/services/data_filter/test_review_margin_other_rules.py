"""Severity-aware review beyond Gopher: the repetition rules' line and paragraph counts and FineWeb's
line rules record how far a flagged document failed (for `data inspect`) and remove it past their
`review_margin`; C4's page rules and FineWeb's punctuated-line minimum record how far but have no margin."""

from __future__ import annotations

import pytest

from services.data_filter.accounting import Chain
from services.data_filter.filters import build_chain
from services.data_filter.filters.base import Doc
from shared.config.chains import ChainConfig, deep_merge, default_chain
from tests.services.data_filter import realtext

OFF = {"enabled": False}


def _chain(only: str, **settings) -> Chain:
    """The web chain under layout review with only `only` of the layout filters on (English, no language ID)."""
    layout = {name: OFF for name in ("repetition", "gopher_quality", "c4", "fineweb", "toxicity")}
    raw = deep_merge(default_chain("web"), {"language": OFF, **layout, only: {"enabled": True, **settings}})
    return Chain(build_chain(ChainConfig.model_validate(raw)), review=True)


def _lines(n_paragraphs: int = 6) -> list[str]:
    words = " ".join(realtext.manual_paragraphs()[:n_paragraphs]).split()
    return [" ".join(words[i : i + 12]) for i in range(0, len(words), 12)]


def _repeated_short_lines(every: int) -> str:
    """A prose line, then `Reply` and `Share` after every `every`-th one: with every = 1 about 2/3 of the lines repeat."""
    return "\n".join(x for i, line in enumerate(_lines()) for x in ((line, "Reply", "Share") if i % every == 0 else (line,)))


def _boilerplate(every: int) -> str:
    line = "Subscribe to our newsletter to get the latest stories delivered to your inbox every week."
    return "\n".join(x for i, ln in enumerate(_lines()) for x in ((ln, line) if i % every == 0 else (ln,)))


def test_a_repetition_flag_records_how_far_and_a_margin_removes_past_it():
    text = _repeated_short_lines(1)  # ~0.67 of lines repeated: 2.2x the 0.3 limit
    d = Doc("x", text, "src")
    assert _chain("repetition", review_margin={}).run(d) is None
    assert d.meta["layout_flag"] == "repetition:dup_line_frac" and 2.0 < d.meta["layout_severity"] < 2.3
    assert _chain("repetition", review_margin={"dup_line_frac": 1.8}).run(Doc("x", text, "src")) == ("repetition", "dup_line_frac")
    near = Doc("x", _repeated_short_lines(3), "src")  # every third line: ~0.4 repeated, 1.3x
    assert _chain("repetition", review_margin={"dup_line_frac": 1.8}).run(near) is None
    assert near.meta["layout_flag"] == "repetition:dup_line_frac" and 1.0 < near.meta["layout_severity"] < 1.8


def test_a_fineweb_flag_records_how_far_and_a_margin_removes_past_it():
    text = _boilerplate(6)  # a repeated sentence every 6th line: ~15% of characters, 15x FineWeb's 1%
    d = Doc("x", text, "src")
    assert _chain("fineweb", review_margin={}).run(d) is None
    assert d.meta["layout_flag"] == "fineweb:dup_line_char_ratio" and d.meta["layout_severity"] > 8
    removed = _chain("fineweb", review_margin={"dup_line_char_ratio": 5.0}).run(Doc("x", text, "src"))
    assert removed == ("fineweb", "dup_line_char_ratio")


def test_a_later_fineweb_rule_past_its_margin_removes_a_document_an_earlier_rule_only_flagged():
    """Under review FineWeb goes on after a flag, as the Verdict of other filters does: a flag of an
    earlier rule (punctuated lines) does not shield a document whose duplicated lines are far past their margin."""
    text = "\n".join(x for ln in _lines() for x in (ln, "Reply", "Share", "Reply now", "Like"))
    d = Doc("x", text, "src")
    assert _chain("fineweb", review_margin={}).run(d) is None
    assert d.meta["layout_flag"] != "fineweb:dup_line_char_ratio"  # an earlier rule flagged it first
    chain = _chain("fineweb", review_margin={"dup_line_char_ratio": 2.0})
    assert chain.run(Doc("x", text, "src")) == ("fineweb", "dup_line_char_ratio")


def test_c4_sentence_count_records_how_far_short_and_has_no_margin():
    d = Doc("x", "A table of values\n1 2 3\n4 5 6\nThe end.", "src")
    assert _chain("c4").run(d) is None
    assert d.meta["layout_flag"] == "c4:too_few_sentences" and d.meta["layout_severity"] == 5.0
    with pytest.raises(ValueError):
        ChainConfig.model_validate({"c4": {"review_margin": {"too_few_sentences": 2.0}}})


@pytest.mark.parametrize("section, bad", [("fineweb", {"line_punct_ratio": 2.0}), ("fineweb", {"newline_ratio": 0.5}),
                                          ("repetition", {"dup_line_char_frac": 2.0}), ("repetition", {"top_ngram": 2.0})])
def test_margins_only_for_rules_that_have_one(section, bad):
    with pytest.raises(ValueError, match="review_margin"):
        ChainConfig.model_validate({section: {"review_margin": bad}})


def test_without_review_the_rules_remove_at_their_limit_as_published():
    off_review = ChainConfig.model_validate(deep_merge(default_chain("web"), {
        "language": OFF, "gopher_quality": OFF, "c4": OFF, "fineweb": OFF, "toxicity": OFF, "perplexity": {"review_layout": False}}))
    chain = Chain(build_chain(off_review), review=False)
    assert chain.run(Doc("x", _repeated_short_lines(3), "src")) == ("repetition", "dup_line_frac")
