"""Bits per byte: summed NLL in bits over UTF-8 bytes, checked against a hand computation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from shared.eval.bpb import bits_per_byte

TEXT = "Grüße aus Köln — 日本語のテキスト, and plain ASCII after it."


@torch.no_grad()
def _hand_nats(model, ids: list[int], window: int) -> float:
    """Σ −log p(token) of every token after the first, one unbatched forward per disjoint window."""
    total = 0.0
    for k in range(0, len(ids) - 1, window):
        chunk = torch.tensor([ids[k:k + window + 1]])
        logits, _ = model(chunk[:, :-1])
        total += float(F.cross_entropy(logits[0].double(), chunk[0, 1:], reduction="sum"))
    return total


def test_bpb_divides_bits_by_utf8_bytes_not_tokens_or_characters(model, tokenizer):
    ids = [tokenizer.eos_id, *tokenizer.encode(TEXT)]
    n_bytes = len(TEXT.encode("utf-8"))
    assert n_bytes > len(TEXT) and n_bytes != len(ids) - 1  # multi-byte characters; bytes ≠ tokens
    r = bits_per_byte(model, tokenizer, [TEXT], seq_len=64)
    expected = _hand_nats(model, ids, 64) / math.log(2) / n_bytes
    assert r.bytes == n_bytes and r.tokens == len(ids) - 1
    assert r.bpb == pytest.approx(expected, rel=1e-6)


def test_bpb_over_windows_and_batches_matches_hand_computation(model, tokenizer):
    texts = [TEXT * 3, "def f(x):\n    return x ** 2\n", "∑ᵢ xᵢ² ≤ ∞ — a short one"]
    r = bits_per_byte(model, tokenizer, texts, seq_len=8, batch_size=3)
    nats = sum(_hand_nats(model, [tokenizer.eos_id, *tokenizer.encode(t)], 8) for t in texts)
    total_bytes = sum(len(t.encode("utf-8")) for t in texts)
    assert r.bpb == pytest.approx(nats / math.log(2) / total_bytes, rel=1e-6)
    assert r.nats_per_token == pytest.approx(nats / r.tokens, rel=1e-6)


def test_bpb_does_not_depend_on_batch_size(model, tokenizer):
    texts = [TEXT, TEXT[:20], "x = 1\n" * 30]
    one = bits_per_byte(model, tokenizer, texts, seq_len=16, batch_size=1).bits
    many = bits_per_byte(model, tokenizer, texts, seq_len=16, batch_size=7).bits
    assert one == pytest.approx(many, rel=1e-5)


def test_empty_reference_set_is_a_clear_error(model, tokenizer):
    with pytest.raises(ValueError, match="reference set is empty"):
        bits_per_byte(model, tokenizer, [], seq_len=16)
    with pytest.raises(ValueError, match="empty strings"):
        bits_per_byte(model, tokenizer, ["fine", ""], seq_len=16)


def test_model_training_mode_is_restored(model, tokenizer):
    model.train()
    try:
        bits_per_byte(model, tokenizer, [TEXT], seq_len=16)
        assert model.training
    finally:
        model.eval()
