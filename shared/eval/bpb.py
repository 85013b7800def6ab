"""Bits per byte: a model's summed negative log-likelihood in bits over the UTF-8 bytes of a text.

Why bytes and not tokens: loss in nats per token depends on the tokenizer (a tokenizer with longer
tokens has fewer, harder predictions), and the demo trains its tokenizer on whatever the data
stage kept, so two runs on different data cannot compare losses. The bytes of a text are the same
whatever the tokenizer, so Σ NLL / (ln 2 · bytes) compares any two models on the same text (the
measure The Pile and lm-eval's `bits_per_byte` use). Each text is scored as its own document: the
EOS token the packer puts between documents is its first context, then disjoint windows of
`seq_len` tokens (`shared.eval.scoring.rolling_windows`), so every token is predicted exactly once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from shared.eval.scoring import rolling_windows, score_continuations


@dataclass(frozen=True)
class BpbResult:
    """`bits`: Σ NLL in bits; `bytes`/`tokens`: UTF-8 bytes and tokens predicted; `texts`: texts scored."""

    bits: float
    bytes: int
    tokens: int
    texts: int

    @property
    def bpb(self) -> float:
        return self.bits / self.bytes

    @property
    def nats_per_token(self) -> float:
        """The same likelihood as the tokenizer-bound loss, for reading beside `eval/loss`."""
        return self.bits * math.log(2) / self.tokens


def bits_per_byte(model: torch.nn.Module, tokenizer, texts: list[str], *, seq_len: int,
                  batch_size: int = 8) -> BpbResult:
    """Σ NLL (bits) over `texts` / their UTF-8 bytes. `tokenizer` needs `encode(str) -> ids` and
    `eos_id` (a `shared.data.tokenizer.MoeTokenizer`). Empty input is an error, not a silent 0/0."""
    if not texts:
        raise ValueError("bits_per_byte needs at least one text; the reference set is empty")
    empty = [i for i, t in enumerate(texts) if not t]
    if empty:
        raise ValueError(f"texts {empty[:5]} are empty strings: they have no bytes to predict")
    requests, n_tokens = [], 0
    for text in texts:
        ids = tokenizer.encode(text)
        n_tokens += len(ids)
        requests += rolling_windows([tokenizer.eos_id, *ids], seq_len)
    scored = score_continuations(model, requests, seq_len=seq_len, batch_size=batch_size, pad_id=tokenizer.eos_id)
    nats = -sum(s.logprob for s in scored)
    return BpbResult(bits=nats / math.log(2), bytes=sum(len(t.encode("utf-8")) for t in texts), tokens=n_tokens,
                     texts=len(texts))
