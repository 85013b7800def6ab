"""Continuation scoring: batching never changes a score, and a continuation longer than the window is
scored piece by piece, each piece conditioned on the last tokens before it."""

from __future__ import annotations

import pytest
import torch

from shared.eval.scoring import encode_pair, score_continuations


@torch.no_grad()
def _unbatched(model, context: list[int], continuation: list[int], window: int) -> float:
    total = 0.0
    for j in range(0, len(continuation), window):
        piece = continuation[j:j + window]
        whole = (context + continuation[:j + len(piece)])[-(window + 1):]
        logp = torch.log_softmax(model(torch.tensor([whole[:-1]]))[0][0].double(), dim=-1)
        start = len(whole) - 1 - len(piece)
        total += sum(float(logp[start + k, t]) for k, t in enumerate(piece))
    return total


def test_long_continuation_is_scored_in_window_sized_pieces(model, tokenizer):
    ctx, cont = encode_pair(tokenizer, "Once upon a time", " there was a very long sentence that goes on and on "
                                                          "past the window, with ünïcode and more words")
    assert len(cont) > 16
    (got,) = score_continuations(model, [(ctx, cont)], seq_len=8)
    assert got.tokens == len(cont)
    assert got.logprob == pytest.approx(_unbatched(model, ctx, cont, 8), abs=1e-5)


def test_scores_do_not_depend_on_batching_or_order(model, tokenizer):
    pairs = [encode_pair(tokenizer, c, x) for c, x in [("a", " b"), ("def f(x):", "\n    return x"),
                                                         ("Grüße", " aus Köln"), ("", "start of a document")]]
    one = [s.logprob for s in score_continuations(model, pairs, seq_len=32, batch_size=1)]
    four = [s.logprob for s in score_continuations(model, pairs[::-1], seq_len=32, batch_size=4)][::-1]
    assert one == pytest.approx(four, abs=1e-5)


def test_empty_continuation_is_an_error(model, tokenizer):
    with pytest.raises(ValueError, match="empty continuation"):
        score_continuations(model, [([tokenizer.eos_id], [])], seq_len=8)
