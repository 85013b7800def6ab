"""Document statistics on token ids: an unfinished ending and sentence cohesion, in any language."""

from __future__ import annotations

import random

import pytest

from services.scorer.token_stats import TokenStats, cohesion_input
from services.scorer.windows import INDENT_MARK, NEWLINE_MARK, mark_layout


@pytest.fixture(scope="module")
def stats(minilm):
    return TokenStats(minilm.tokenizer, (NEWLINE_MARK, INDENT_MARK))


def ids(minilm, text: str) -> list[int]:
    return minilm.tokenizer(mark_layout(text), add_special_tokens=False)["input_ids"]


def test_unfinished_end_sees_a_cut_sentence_past_closing_quotes_and_line_breaks(minilm, stats):
    assert stats.unfinished_end(ids(minilm, "The dam holds. It was built in 1950.")) == 0.0
    assert stats.unfinished_end(ids(minilm, 'He said "it holds."\n\n')) == 0.0
    assert stats.unfinished_end(ids(minilm, "Der Damm hält. Er wurde 1950 gebau")) == 1.0
    assert stats.unfinished_end([]) == 0.0  # nothing there to be cut off


RIVER = [
    "The river rises in the northern hills. The river then turns east past the old mill.",
    "Farmers along the river grow wheat. Their wheat is milled in the town below the hills.",
    "Ships carry the flour to the coast. At the coast the ships load salt for the return.",
    "Winter floods cover the lower fields. The floods leave silt that feeds the next harvest.",
    "A bridge of stone crosses near the mill. The bridge was rebuilt after the great flood.",
]


def test_cohesion_is_higher_in_order_than_shuffled_in_two_languages(minilm, stats):
    text = " ".join(RIVER)
    sents = [s + "." for p in RIVER for s in p.split(". ") if s.strip(".")]
    sents = [s.replace("..", ".") for s in sents]
    shuffled = [" ".join(random.Random(seed).sample(sents, len(sents))) for seed in range(5)]
    ordered = stats.sentence_cohesion(ids(minilm, text))
    assert ordered > 0.5 and all(stats.sentence_cohesion(ids(minilm, s)) < ordered for s in shuffled)
    fluss = ("Der Fluss entspringt in den Bergen. Der Fluss fließt dann nach Osten. Am Ufer stehen Mühlen. "
             "Die Mühlen mahlen Weizen. Schiffe bringen das Mehl zur Küste. An der Küste laden Schiffe Salz.")
    parts = fluss.split(". ")
    backwards = ". ".join([parts[0], parts[3], parts[5].rstrip("."), parts[2], parts[4], parts[1]]) + "."
    assert stats.sentence_cohesion(ids(minilm, fluss)) > stats.sentence_cohesion(ids(minilm, backwards))


def test_cohesion_needs_four_sentences_and_its_input_is_clipped(minilm, stats):
    assert stats.sentence_cohesion(ids(minilm, "One. Two. Three.")) == 0.0
    assert cohesion_input(7.0) == 2.0 and cohesion_input(-3.0) == -2.0 and cohesion_input(0.4) == 0.4


def test_a_heading_is_a_short_first_paragraph_without_a_sentence_end_and_agrees_with_the_oracle(minilm, stats):
    from services.scorer.degrade import degrade
    from services.scorer.oracle.prose_signals import titled

    body = "\n\n".join(RIVER)
    cases = {
        "The river and its mills\n\n" + body: 1.0,
        "Der Fluss und seine Mühlen\n\n" + body: 1.0,
        body: 0.0,  # a sentence opens it
        "The river and its mills\n" + body: 0.0,  # no blank line: a first line, not a paragraph
        "The river and its mills (1950)\n\n" + body: 0.0,  # a closing bracket ends it, as the oracle reads it
        "The river and its mills\n\n": 0.0,  # nothing after it
        " ".join(["word"] * 13) + "\n\n" + body: 0.0,  # too long for a heading
    }
    for text, expected in cases.items():
        assert stats.opens_with_heading(ids(minilm, text)) == expected == titled(text), text
    titled_doc = "The river and its mills\n\n" + body
    shuffled = degrade(titled_doc, "order", random.Random(3))
    assert stats.opens_with_heading(ids(minilm, shuffled)) == 0.0  # a shuffle moved it into the text
