"""The sanity ablation: how its garbage arm is made (30% of each document's tokens), and its quick mode end to end."""

from __future__ import annotations

import json
import random
import re

import pytest

from benchmarks.ablation import (
    BOILERPLATE,
    GARBAGE_FRACTION,
    SPAM,
    planted_garbage,
    unigram_bpb,
    with_garbage,
)

DOCS = [f"The {w} of the river valley was settled in the {n}th century; its farms grew wheat and barley. " * 6
        for n, w in enumerate(["history", "geology", "economy", "climate", "music", "language"] * 5, start=3)]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from shared.data.tokenizer import train_tokenizer

    return train_tokenizer(DOCS, tmp_path_factory.mktemp("tok"), vocab_size=300, min_frequency=2)


def test_planted_garbage_has_exactly_the_tokens_asked_for(tok):
    rng = random.Random(0)
    for n in (1, 7, 60, 333):
        text = planted_garbage(tok, rng, n)
        assert len(tok.encode(text)) == n
    assert planted_garbage(tok, rng, 0) == ""


def _garbage_kind(text: str) -> str | None:
    """Which planted kind `text` repeats (a prefix of the unit repeated), or None."""
    line = re.match(r"Posted by admin on \d+ March \d+ \| Reply \| Share\n", text)
    for name, unit in (("boilerplate", BOILERPLATE), ("spam", SPAM), ("repeated line", line and line.group(0))):
        if unit and (unit * (len(text) // len(unit) + 1)).startswith(text):
            return name
    return None


def test_garbage_replaces_the_last_30_percent_of_tokens_and_keeps_the_prose_before_it(tok):
    rng = random.Random(0)
    kinds = set()
    for doc in DOCS:
        noisy, prose, garbage = with_garbage(doc, tok, rng)
        n = len(tok.encode(doc))
        assert prose + garbage == n and prose == round(n * (1 - GARBAGE_FRACTION))
        shared = next((i for i, (a, b) in enumerate(zip(doc, noisy, strict=False)) if a != b), len(noisy))
        # the document's first `prose` tokens survive as they were (one token either way at the seam)
        assert abs(len(tok.encode(doc[:shared])) - prose) <= 1
        kinds.add(_garbage_kind(noisy[shared:]) or _garbage_kind(noisy[shared - 1:]))
        # re-tokenised together, the noisy document is as long as the clean one to a seam token
        assert abs(len(tok.encode(noisy)) - n) <= 2
    assert kinds == {"boilerplate", "spam", "repeated line"}


def test_unigram_bpb_is_the_hand_computed_entropy(tok, tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    import numpy as np

    counts = np.ones(tok.vocab_size)
    for d in DOCS:
        counts += np.bincount(tok.encode(d), minlength=tok.vocab_size)
    p = counts / counts.sum()
    text = DOCS[0]
    expected = -np.log2(p[tok.encode(text)]).sum() / len(text.encode("utf-8"))
    assert unigram_bpb(tok, train, [text]) == pytest.approx(expected, rel=1e-12)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_sanity_ablation_writes_its_verdict_line(tmp_path, capsys):
    from benchmarks.ablation import main

    code = main(["--quick", "--work", str(tmp_path)])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(result) >= {"bpb_gap", "bpb_ci_low", "task_gap", "task_ci_low", "seconds", "passed"}
    assert code == (0 if result["passed"] else 1)
    assert result["passed"] == (result["bpb_ci_low"] > 0)
    assert result["garbage_token_fraction"] == pytest.approx(GARBAGE_FRACTION, abs=0.005)
    assert result["task_metric"] == "task/prose/acc" and result["task_gap"] is not None
    assert result["interval"].startswith("paired Student-t")
    # 6 steps of a tiny model: still at the unigram level (this is why the full run trains far longer)
    assert result["bpb_prose"]["clean"] > 0.9 * result["unigram_bpb_prose"]
