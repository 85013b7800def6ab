"""Degradations change exactly what they name, deterministically, and copies share their source's split."""

from __future__ import annotations

import random
from collections import Counter

from services.scorer.degrade import DEGRADATIONS, can_carry, degrade
from services.scorer.pipeline import degraded_copies
from services.scorer.sample_docs import python_docs
from tests.services.scorer.test_oracle import PROSE


def test_degradations_are_deterministic_and_change_the_text():
    for kind, (family, _) in DEGRADATIONS.items():
        # code with functions in it (a chunk of a data table has no names outside strings to rename)
        text = PROSE if family == "prose" else next(d["text"] for d in python_docs(0, 20, seed=2) if "def " in d["text"])
        a, b = degrade(text, kind, random.Random(7)), degrade(text, kind, random.Random(7))
        assert a == b and a != text, kind


def test_order_keeps_the_sentences_and_truncation_cuts_mid_word():
    shuffled = degrade(PROSE, "order", random.Random(0))
    assert Counter(shuffled.replace("\n\n", " ").split()) == Counter(PROSE.replace("\n\n", " ").split())
    cut = degrade(PROSE, "truncation", random.Random(0))
    assert PROSE.startswith(cut) and 0.6 < len(cut) / len(PROSE) <= 0.7 and cut[-1].isalnum()


def test_order_leaves_the_ending_alone():
    """A shuffled copy ends as its source does, finished or cut off: its one defect is the order."""
    cut = PROSE + "\n\nThe canals were dug by"
    for text in (PROSE, cut):
        for seed in range(5):
            shuffled = degrade(text, "order", random.Random(seed))
            assert shuffled != text and shuffled.endswith(text.rsplit(". ", 1)[-1] if text is PROSE else "dug by")


def test_degraded_copies_cycle_kinds_and_name_their_source():
    sample = [{**d, "group": d["id"], "degradation": ""} for d in python_docs(6, 4, seed=1)]
    copies, skipped = degraded_copies(sample, 1.0, seed=0)
    assert len(copies) + sum(skipped.values()) == 10
    for c in copies:
        assert c["id"] == f"{c['group']}~{c['degradation']}" and c["group"] in {d["id"] for d in sample}
    assert len({c["degradation"] for c in copies if c["kind"] == "web"}) >= 4


FORTUNE = "Never trust a cat that smiles. It knows something you do not."


def test_shuffles_go_to_documents_with_an_order_to_lose():
    """A document that cannot carry its kind trades it with one that can: each kind keeps its share,
    a shuffle lands on prose whose sentences cohere, and a kind nobody can carry is a counted skip."""
    assert can_carry(PROSE, "order") and not can_carry(FORTUNE, "order") and can_carry(FORTUNE, "spam")
    short = [{"id": f"short{i}", "kind": "web", "text": FORTUNE + f" Number {i}."} for i in range(5)]
    long = [{"id": f"long{i}", "kind": "web", "text": PROSE + f" Page {i}."} for i in range(5)]
    sample = [{**d, "group": d["id"], "degradation": ""} for d in short + long]
    copies, skipped = degraded_copies(sample, 1.0, seed=0)
    assert skipped["no_carrier"] == 0 and len(copies) + skipped["unchanged"] == 10
    assert len({c["id"] for c in copies}) == len(copies)
    shuffled = [c for c in copies if c["degradation"] == "order"]
    assert len(shuffled) == 2 and all(c["group"].startswith("long") for c in shuffled)

    copies, skipped = degraded_copies([d for d in sample if d["id"].startswith("short")], 1.0, seed=0)
    assert skipped["no_carrier"] == 1 and not [c for c in copies if c["degradation"] == "order"]
