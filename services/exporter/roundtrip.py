"""The round-trip check `moelab export` runs before it reports success.

The exported folder is loaded the way a user loads it (`AutoModelForCausalLM.from_pretrained`,
fp32) and compared with moelab's own model on a fixed batch: the largest absolute logit
difference must stay within `atol` (1e-4), and greedy continuations of fixed prompts must agree
token for token (moelab's `generate` with its cache against transformers' `generate`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers

from shared.model.generate import SamplingConfig, generate
from shared.model.transformer import MoETransformer

ATOL = 1e-4


class RoundTripFailed(RuntimeError):
    """The exported model does not compute what the moelab model computes."""


@dataclass
class RoundTrip:
    max_abs_logit_diff: float
    greedy_equal: bool
    greedy_tokens: int
    batch: list[int]  # (B, T) of the logits batch
    moelab_greedy: list[list[int]]
    hf_greedy: list[list[int]]

    def figures(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k not in ("moelab_greedy", "hf_greedy")}


def fixed_batch(vocab: int, max_seq_len: int, batch: int = 2, length: int = 32) -> torch.Tensor:
    """Token ids from a fixed seed (the same batch for every export of the same vocabulary)."""
    gen = torch.Generator().manual_seed(1234)
    return torch.randint(0, vocab, (batch, min(length, max_seq_len)), generator=gen)


def load_hf(folder: Path) -> transformers.PreTrainedModel:
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def hf_greedy(hf: transformers.PreTrainedModel, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                      eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


@torch.no_grad()
def check_round_trip(model: MoETransformer, folder: Path, greedy_tokens: int = 16, atol: float = ATOL,
                     hf: transformers.PreTrainedModel | None = None, subject: str = "the exported model") -> RoundTrip:
    """Compare `model` (eval mode) with the HF model at `folder` (`hf` when already loaded from it); raises
    `RoundTripFailed`. The import of a third-party folder runs the same check the other way round."""
    hf = load_hf(folder) if hf is None else hf.eval()
    batch = fixed_batch(model.cfg.vocab_size, model.cfg.max_seq_len)
    ours = model.eval()(batch)[0].float()
    theirs = hf(batch).logits.float()
    diff = float((ours - theirs).abs().max())
    n = min(greedy_tokens, model.cfg.max_seq_len - 8)
    prompts = [batch[0, :8].tolist(), batch[1, :4].tolist()]
    mine = [generate(model, p, SamplingConfig(max_new_tokens=n)).tokens for p in prompts]
    other = [hf_greedy(hf, p, n) for p in prompts]
    result = RoundTrip(diff, mine == other, n, list(batch.shape), mine, other)
    if diff > atol or not result.greedy_equal:
        raise RoundTripFailed(f"{folder}: {subject} does not compute moelab's function: max |Δlogit| "
                              f"{diff:.3g} (allowed {atol:g}), greedy equal: {result.greedy_equal} "
                              f"(moelab {mine}, transformers {other}); nothing was written")
    return result
