"""C4's line and document rules at their edges, FineWeb's reading of them, and languages they do not cover."""

from __future__ import annotations

from services.data_filter.filters.c4 import C4Filter
from shared.config.filters import C4Config
from tests.services.data_filter import realtext
from tests.services.data_filter.filters.edge import doc, words


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
