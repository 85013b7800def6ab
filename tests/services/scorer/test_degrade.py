"""Degradations change exactly what they name, deterministically, and copies share their source's split."""

from __future__ import annotations

import random
from collections import Counter

from services.scorer.degrade import DEGRADATIONS, degrade
from services.scorer.pipeline import degraded_copies
from services.scorer.sample_docs import python_docs
from tests.services.scorer.test_oracle import PROSE


def test_degradations_are_deterministic_and_change_the_text():
    for kind, (family, _) in DEGRADATIONS.items():
        text = PROSE if family == "prose" else python_docs(0, 1, seed=2)[0]["text"]
        a, b = degrade(text, kind, random.Random(7)), degrade(text, kind, random.Random(7))
        assert a == b and a != text, kind


def test_order_keeps_the_sentences_and_truncation_cuts_mid_word():
    shuffled = degrade(PROSE, "order", random.Random(0))
    assert Counter(shuffled.replace("\n\n", " ").split()) == Counter(PROSE.replace("\n\n", " ").split())
    cut = degrade(PROSE, "truncation", random.Random(0))
    assert PROSE.startswith(cut) and 0.6 < len(cut) / len(PROSE) <= 0.7 and cut[-1].isalnum()


def test_degraded_copies_cycle_kinds_and_name_their_source():
    sample = [{**d, "group": d["id"], "degradation": ""} for d in python_docs(6, 4, seed=1)]
    copies, unchanged = degraded_copies(sample, 1.0, seed=0)
    assert len(copies) + unchanged == 10
    for c in copies:
        assert c["id"] == f"{c['group']}~{c['degradation']}" and c["group"] in {d["id"] for d in sample}
    assert len({c["degradation"] for c in copies if c["kind"] == "web"}) >= 4
