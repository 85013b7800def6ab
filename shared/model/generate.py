"""Autoregressive sampling from a `MoETransformer`: greedy, temperature, top-k, top-p, with a KV cache.

Why our own loop (and not `transformers.generate`): it runs moelab's model itself, the function
that was trained, so its output is the reference the exported model is checked against. Layers
whose attention keeps a decode cache (`forward_cached`: GQA's keys/values, MLA's latent) process
only the new token at each step; a model with any layer without one (SWA, NSA, KDA) recomputes
the whole sequence every step instead, and says so (`Generation.cached`).

The block structure (pre-norm attention, pre-norm FFN/MoE, muP multipliers on the embedding and
the final norm) is the model's own `forward`, walked layer by layer so the attention can take
its cache; the MoE layers run unchanged on the new tokens (eval-mode routing).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from shared.model.attention.cache import LayerCache
from shared.model.transformer import MoETransformer


@dataclass(frozen=True)
class SamplingConfig:
    """temperature 0 = greedy (argmax); top_k 0 and top_p 1 = no truncation."""

    max_new_tokens: int = 32
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    stop_token: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass
class Generation:
    tokens: list[int]  # the new tokens only
    seconds: float
    cached: bool  # False: some layer had no decode cache and the whole sequence was recomputed per token
    uncached_kinds: list[str] = field(default_factory=list)
    cache_bytes: int = 0

    @property
    def tokens_per_second(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else float("inf")


def uncached_kinds(model: MoETransformer) -> list[str]:
    """Attention kinds in `model` without a decode cache (sorted, unique).

    A cache counts only where the layer's own class defines `forward_cached`: a variant that
    subclasses GQA (SWA) but masks differently must not inherit GQA's full-context cache."""
    return sorted({model.cfg.attention_kind(i) for i, b in enumerate(model.layers)
                   if "forward_cached" not in type(b.attn).__dict__})


def _logits_cached(model: MoETransformer, tokens_Bt: Tensor, caches: list[LayerCache]) -> Tensor:
    """Last-position logits (B, V) for new tokens, extending every layer's cache."""
    x = model.tok_embeddings(tokens_Bt) * model.emb_mult
    for block, cache in zip(model.layers, caches, strict=True):
        x = x + block.attn.forward_cached(block.attn_norm(x), cache)
        y = block.ffn(block.ffn_norm(x))
        x = x + (y[0] if block.is_moe else y)
    h = model.norm(x[:, -1:], scale=model.logit_mult)
    head = model.tok_embeddings.weight if model.lm_head is None else model.lm_head.weight
    return (h @ head.to(h.dtype).T)[:, -1]


def next_token(logits_BV: Tensor, cfg: SamplingConfig, gen: torch.Generator) -> Tensor:
    """Pick one token per row: argmax when greedy, else sample from the tempered, truncated distribution."""
    if cfg.temperature == 0.0:
        return logits_BV.argmax(dim=-1)
    logits = logits_BV.float() / cfg.temperature
    if cfg.top_k:
        kth = logits.topk(min(cfg.top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        # drop a token when the tokens ranked before it already hold top_p of the mass (the first always stays)
        drop = probs.cumsum(dim=-1) - probs >= cfg.top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=gen).squeeze(-1)


@torch.no_grad()
def generate(model: MoETransformer, prompt: list[int], cfg: SamplingConfig = SamplingConfig(),
             on_token: Callable[[int], None] | None = None) -> Generation:
    """Continue `prompt` by up to `cfg.max_new_tokens` tokens (stopping after `cfg.stop_token`);
    `on_token` is called with each new token as it is chosen (streaming)."""
    if not prompt:
        raise ValueError("the prompt is empty: give at least one token")
    if len(prompt) + cfg.max_new_tokens > model.cfg.max_seq_len:
        raise ValueError(f"prompt ({len(prompt)} tokens) + max_new_tokens ({cfg.max_new_tokens}) exceeds the model's "
                         f"max_seq_len ({model.cfg.max_seq_len})")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    missing = uncached_kinds(model)
    caches = [LayerCache() for _ in model.layers]
    seq = torch.tensor([prompt], dtype=torch.long, device=device)
    new: list[int] = []
    t0 = time.perf_counter()
    step_input = seq
    for _ in range(cfg.max_new_tokens):
        if missing:
            logits = model(seq)[0][:, -1]
        else:
            logits = _logits_cached(model, step_input, caches)
        token = next_token(logits, cfg, gen)
        new.append(int(token.item()))
        if on_token is not None:
            on_token(new[-1])
        step_input = token.view(1, 1)
        seq = torch.cat([seq, step_input], dim=1)
        if cfg.stop_token is not None and new[-1] == cfg.stop_token:
            break
    seconds = time.perf_counter() - t0
    model.train(was_training)
    return Generation(tokens=new, seconds=seconds, cached=not missing, uncached_kinds=missing,
                      cache_bytes=sum(c.nbytes() for c in caches))
