"""The sanity ablation: how its garbage arm is made (whole documents holding 30% of the tokens, each
replaced in place by garbage of the same length), and its quick mode end to end."""

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
    replaced_documents,
    separates_for_clean,
    unigram_bpb,
    write_garbage_arm,
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


def test_replaced_documents_hold_the_garbage_fraction_to_one_document():
    rng = random.Random(0)
    lengths = [rng.randint(50, 900) for _ in range(400)]
    chosen = replaced_documents(lengths, random.Random(1))
    target = GARBAGE_FRACTION * sum(lengths)
    assert abs(sum(lengths[i] for i in chosen) - target) <= max(lengths) / 2
    # a uniform sample of documents: neither the short nor the long ones preferred (loose: 400 documents)
    mean_all = sum(lengths) / len(lengths)
    assert abs(sum(lengths[i] for i in chosen) / len(chosen) - mean_all) < 0.15 * mean_all
    assert replaced_documents(lengths, random.Random(1)) == chosen  # the same seed, the same documents


def test_garbage_arm_replaces_whole_documents_in_place_by_garbage_of_the_same_length(tok, tmp_path):
    clean, out = tmp_path / "clean.jsonl", tmp_path / "garbage.jsonl"
    clean.write_text("".join(json.dumps({"id": f"d{i}", "source": "wiki", "text": d}) + "\n" for i, d in enumerate(DOCS)))
    made = write_garbage_arm(clean, out, tok)
    before = [json.loads(line) for line in clean.open()]
    after = [json.loads(line) for line in out.open()]
    assert len(after) == len(before) and [r["source"] for r in after] == [r["source"] for r in before]
    kinds, replaced = set(), 0
    for b, a in zip(before, after, strict=True):
        # position by position the same token length, so both arms shuffle and pack alike
        assert len(tok.encode(a["text"])) == len(tok.encode(b["text"]))
        if a["text"] == b["text"]:
            assert a["id"] == b["id"]  # a kept document is kept whole
            continue
        replaced += 1
        assert a["id"] == f"{b['id']}-garbage"
        kind = _garbage_kind(a["text"])
        assert kind is not None, a["text"][:80]  # the whole document is garbage, no prose left in it
        kinds.add(kind)
    assert replaced == made["garbage_documents"] > 0 and made["length_mismatches"] == 0
    total = sum(len(tok.encode(d)) for d in DOCS)
    assert made["garbage_tokens"] + made["prose_tokens"] == made["arm_tokens"] == total
    assert made["garbage_token_fraction"] == pytest.approx(GARBAGE_FRACTION, abs=max(len(tok.encode(d)) for d in DOCS) / total)
    assert kinds <= {"boilerplate", "spam", "repeated line"}


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

    code = main(["--quick", "--first-seed", "3", "--work", str(tmp_path)])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["seeds_run"] == [3, 4]  # a registered run's fresh seeds are the ones trained
    assert set(result) >= {"bpb_gap", "bpb_ci_low", "task_gap", "task_ci_low", "seconds", "passed"}
    assert code == (0 if result["passed"] else 1)
    assert result["passed"] == (result["bpb_ci_low"] > 0)
    assert result["garbage_token_fraction"] == pytest.approx(GARBAGE_FRACTION, abs=0.005)
    assert result["length_mismatches"] == 0
    assert result["documents_per_arm"]["clean"] == result["documents_per_arm"]["garbage"]
    assert result["task_metric"] == "task/prose/acc" and result["task_gap"] is not None
    assert result["interval"].startswith("paired Student-t")
    # 6 steps of a tiny model: still at the unigram level (this is why the full run trains far longer)
    assert result["bpb_prose"]["clean"] > 0.9 * result["unigram_bpb_prose"]


def test_a_metric_separates_only_with_an_interval_that_has_a_spread_and_favours_clean():
    lower_better = {"mean": 0.02, "sd": 0.004, "ci_low": 0.01, "excludes_zero": True, "higher_is_better": False}
    assert separates_for_clean(lower_better)  # garbage − clean > 0 on a loss: clean ahead
    assert not separates_for_clean({**lower_better, "mean": -0.02})  # garbage ahead
    assert not separates_for_clean({**lower_better, "excludes_zero": False})
    # every seed gave the same difference: a zero-width interval is no evidence
    assert not separates_for_clean({**lower_better, "sd": 0.0})
    higher_better = {"mean": -0.0103, "sd": 0.002, "excludes_zero": True, "higher_is_better": True}
    assert separates_for_clean(higher_better) and not separates_for_clean({**higher_better, "sd": 0.0})


def test_fewer_than_one_pass_is_refused_before_anything_runs():
    from benchmarks.ablation import main

    with pytest.raises(SystemExit) as exc:
        main(["--passes", "0"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["--first-seed", "-1"])
    assert exc.value.code == 2
