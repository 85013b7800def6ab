"""Log-likelihood of token continuations under a causal LM, batched: the one primitive every metric uses.

Bits per byte (rolling windows over a text), the offline task suite (each choice as a continuation
of its context) and the lm-eval adapter (`services/evaluator`) all reduce to "sum of log p(cont |
ctx)" and "is the continuation the greedy one". Computing it in one place means the harness's
numbers and the in-loop numbers come from the same arithmetic.

A request longer than the model's window keeps its last `seq_len + 1` tokens (the context is
truncated from the left, as lm-eval's own HF adapter does); a continuation longer than the window
is scored in window-sized pieces, each conditioned on everything before it that fits, and summed. Requests are batched longest first and right-padded: the
model is causal, so padding after a sequence cannot change its log-probabilities (with a dropless
MoE; a capacity-limited MoE routes padding tokens too, which is why the eval runs the model as
configured and documents it rather than hiding it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Continuation:
    """`logprob`: Σ log p(continuation tokens | context) in nats; `greedy`: every continuation
    token is the arg-max of its position's distribution; `tokens`: continuation length."""

    logprob: float
    greedy: bool
    tokens: int


def _window(context: list[int], continuation: list[int], seq_len: int) -> tuple[list[int], int]:
    """The model input (at most `seq_len` tokens) and how many of its last positions predict the continuation."""
    if not continuation:
        raise ValueError("an empty continuation has no log-likelihood to score")
    if not context:
        raise ValueError("a continuation needs at least one context token (start documents with the EOS token)")
    if len(continuation) > seq_len:
        raise ValueError(f"a piece of {len(continuation)} tokens exceeds the window seq_len={seq_len}")
    whole = (context + continuation)[-(seq_len + 1):]
    return whole[:-1], len(continuation)


@torch.no_grad()
def score_continuations(model: torch.nn.Module, requests: list[tuple[list[int], list[int]]], *, seq_len: int,
                        batch_size: int = 8, pad_id: int = 0) -> list[Continuation]:
    """Σ log p(continuation | context) and greediness for each (context ids, continuation ids), in order.

    The model runs in eval mode (the router's frozen balancing bias, no load accumulation) and is
    put back in the mode it was in. `model(tokens_BT)` must return `(logits_BTV, aux)`.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be ≥ 1, got {batch_size}")
    pieces = [(i, ctx + cont[:j], cont[j:j + seq_len]) for i, (ctx, cont) in enumerate(requests)
              for j in range(0, max(len(cont), 1), seq_len)]
    merged = _score_pieces(model, [(c, p) for _, c, p in pieces], seq_len, batch_size, pad_id)
    logprob, greedy, tokens = [0.0] * len(requests), [True] * len(requests), [0] * len(requests)
    for (i, _, _), piece in zip(pieces, merged, strict=True):
        logprob[i] += piece.logprob
        greedy[i] = greedy[i] and piece.greedy
        tokens[i] += piece.tokens
    return [Continuation(lp, g, n) for lp, g, n in zip(logprob, greedy, tokens, strict=True)]


def _score_pieces(model: torch.nn.Module, requests: list[tuple[list[int], list[int]]], seq_len: int,
                  batch_size: int, pad_id: int) -> list[Continuation]:
    """`score_continuations` for continuations of at most `seq_len` tokens."""
    windows = [_window(ctx, cont, seq_len) for ctx, cont in requests]
    order = sorted(range(len(windows)), key=lambda i: -len(windows[i][0]))
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[Continuation | None] = [None] * len(windows)
    try:
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            width = len(windows[idx[0]][0])
            tokens_BT = torch.full((len(idx), width), pad_id, dtype=torch.long)
            for row, i in enumerate(idx):
                inp = windows[i][0]
                tokens_BT[row, :len(inp)] = torch.tensor(inp, dtype=torch.long)
            logits_BTV, _ = model(tokens_BT.to(device))
            logp_BTV = torch.log_softmax(logits_BTV.float(), dim=-1)
            for row, i in enumerate(idx):
                inp, n = windows[i]
                ctx, cont = requests[i]
                target_N = torch.tensor(cont, dtype=torch.long, device=device)
                logp_NV = logp_BTV[row, len(inp) - n:len(inp)]
                chosen_N = logp_NV.gather(1, target_N[:, None])[:, 0]
                greedy = bool((logp_NV.argmax(dim=-1) == target_N).all())
                out[i] = Continuation(float(chosen_N.double().sum()), greedy, n)
    finally:
        model.train(was_training)
    return out  # type: ignore[return-value]


def encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Token ids of (context, continuation) as the model sees them in one piece.

    The pair is encoded as one string and split at the context's token count (trailing spaces of
    the context move to the continuation first), so the continuation's tokens are those of the
    running text, not of a fresh string: the convention lm-eval's own HF adapter follows. The
    context starts with the EOS token, the document boundary the packer puts before every
    training document, which also gives an empty context a token to condition on.
    """
    stripped = context.rstrip(" ")
    continuation = context[len(stripped):] + continuation
    whole = tokenizer.encode(stripped + continuation)
    n_ctx = len(tokenizer.encode(stripped)) if stripped else 0
    return [tokenizer.eos_id, *whole[:n_ctx]], whole[n_ctx:]


def rolling_windows(tokens: list[int], seq_len: int) -> list[tuple[list[int], list[int]]]:
    """Split a document's tokens (starting with the EOS token that marks a document start) into
    disjoint prediction windows: every token after the first is predicted exactly once, with up to
    `seq_len` tokens of context from its own window."""
    if len(tokens) < 2:
        raise ValueError("a rolling score needs the start token and at least one token to predict")
    return [([tokens[k]], tokens[k + 1:k + 1 + seq_len]) for k in range(0, len(tokens) - 1, seq_len)]
