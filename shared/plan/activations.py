"""Activation memory of one training micro-batch: the tensors autograd keeps for the backward.

Why a hand count and not a trial run: a plan must refuse a config before anything is allocated
(a 7B model's trial step on the wrong card is an OOM minutes later), and the count must follow
this codebase's kernels, not a generic 34·s·b·h rule (Korthikanti et al. 2022, "Reducing
activation recomputation", §4), because fine-grained MoE layers keep K copies of every token.
Every term below names the op that saves it; `tests/shared/plan` checks the sum against the
tensors autograd really saves (saved-tensor hooks) for small configs, fp32 and bf16 autocast.

Per token, with a = bytes of an autocast activation (2 under bf16, 4 in fp32), f = 4 (kept fp32
by the code), i = 8 (int64 indices), D = d_model:

- RMSNorm (fp32 inside, its own autograd): the fp32 normalised input x̂ and 1/rms: (D + 1)·f.
- GQA attention: the projections' input (one fp32 copy, or one bf16 cast per projection under
  autocast), q, k, v and the output kept by SDPA (flash: no T×T matrix; the out-projection's
  input is a view of that output) and its log-sum-exp: (2·H + 2·Hkv)·hd·a + H·f.
- MLA (an estimate within a few per cent): the latent ranks, SDPA's tensors at the query/key
  width, the out-projection's input; SWA, NSA and KDA layers are estimated as GQA.
- dense SwiGLU of width F: the input (once, or twice cast), w1·x, silu(w1·x), w3·x and their
  product: 4F·a.
- MoE layer: the experts' input (D·f, kept by the bungee scalar's product) and the router's input
  (the scaled input D·f; its bf16 cast under autocast), router scores and the z-loss logits
  (2E·f), choices and weights (K·(i + f)) and seven per-token scalars of the weight
  normalisation and aux losses (7f); per routed assignment (K of them): the
  permuted input D, gate|up output 2F, silu F, the gated product F, its routing-weighted copy F,
  the expert output D (·a), the routing weight and three index vectors (a + 3i); the shared
  experts as a dense SwiGLU of width S·F.
- head: the final norm, the scaled final hidden state (D·a) and the loss's fp32 log-softmax (4V);
  at the start of the backward also the logits the loop holds and the loss gradients: (2a + 12)·V.

With activation checkpointing (one checkpoint per block) only each block's fp32 input is kept
(D·f per layer) and one block at a time is recomputed in the backward.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.config.experiment import ExperimentConfig
from shared.config.model import ModelConfig

F32, I64 = 4, 8


@dataclass(frozen=True)
class BlockBytes:
    """Saved bytes per token of one block, split by part."""

    norms: float
    attention: float
    ffn: float

    @property
    def total(self) -> float:
        return self.norms + self.attention + self.ffn


def _norm(d: int) -> float:
    return (d + 1) * F32


def _attention(cfg: ModelConfig, layer: int, a: int, autocast: bool) -> float:
    kind = cfg.attention_kind(layer)
    d, h = cfg.d_model, cfg.n_heads
    if kind == "mla":  # x (once, or cast for the two down-projections), the up-/out-projections' inputs,
        m = cfg.attention.mla  # SDPA's q, k, zero-padded v and output, the two latent RMSNorms, the lse
        qk, ranks = m.qk_nope_head_dim + m.qk_rope_head_dim, (m.q_lora_rank or 0) + m.kv_lora_rank
        inputs = 2 * d * a if autocast else d * F32
        return inputs + (ranks + h * m.v_head_dim + 4 * h * qk + 2 * ranks) * a + h * F32
    hd, hkv = cfg.resolved_head_dim, cfg.n_kv_heads  # gqa (and an estimate for swa, nsa, kda)
    inputs = 3 * d * a if autocast else d * F32
    return inputs + (2 * h * hd + 2 * hkv * hd) * a + h * F32


def _swiglu(d: int, hidden: int, a: int, autocast: bool, input_counted: bool) -> float:
    inputs = 0 if input_counted else d * F32
    if autocast:
        inputs = 2 * d * a
    return inputs + 4 * hidden * a


def _moe(cfg: ModelConfig, a: int, autocast: bool) -> float:
    m, d = cfg.moe, cfg.d_model
    router_in = d * a if autocast else d * F32  # the bungee-scaled input (autocast: its bf16 cast)
    r = a if autocast else F32  # the router's linear runs under autocast too
    router = (2 * m.n_routed_experts + m.top_k + 7) * r + m.top_k * I64
    per_assignment = (2 * d + 5 * m.expert_hidden + 1) * a + 3 * I64
    shared = _swiglu(d, m.n_shared_experts * m.expert_hidden, a, autocast, True) if m.n_shared_experts else 0
    return d * F32 + router_in + router + m.top_k * per_assignment + shared


def block_bytes(cfg: ModelConfig, layer: int, a: int, autocast: bool) -> BlockBytes:
    """Bytes per token that block `layer` keeps for its backward."""
    is_moe = cfg.ffn == "moe" and layer >= cfg.first_k_dense
    ffn = _moe(cfg, a, autocast) if is_moe else _swiglu(cfg.d_model, cfg.resolved_dense_hidden, a, autocast, False)
    return BlockBytes(norms=2 * _norm(cfg.d_model), attention=_attention(cfg, layer, a, autocast), ffn=ffn)


def head_bytes(cfg: ModelConfig, a: int) -> tuple[float, float]:
    """(bytes per token the head and loss save for the backward, peak bytes per token as it starts).

    Saved: the final norm, the scaled hidden state (D·a) and the fp32 log-softmax (4V). At the
    peak also: the logits the training loop still holds (V·a), the loss's fp32 gradients of the
    log-softmax output and input (2·4V) and the gradient cast back to the logits' dtype (V·a).
    """
    v, d = cfg.vocab_size, cfg.d_model
    saved = _norm(d) + d * a + v * F32
    return saved, saved + v * (2 * a + 2 * F32)


@dataclass(frozen=True)
class ActivationPlan:
    tokens: int  # per micro-batch on one GPU
    blocks: float  # bytes kept by the blocks at the end of the forward
    head_peak: float
    recompute: float  # one block's activations, rebuilt in the backward (0 without checkpointing)

    @property
    def peak(self) -> float:
        return self.blocks + max(self.head_peak, self.recompute)


def activation_plan(cfg: ExperimentConfig) -> ActivationPlan:
    """Peak activation bytes of one micro-batch per GPU under `cfg.train` (dtype, checkpointing)."""
    autocast = cfg.train.dtype == "bfloat16"
    a = 2 if autocast else F32
    tokens = cfg.train.micro_batch_size * cfg.train.seq_len
    m = cfg.model
    per_layer = [block_bytes(m, i, a, autocast).total for i in range(m.n_layers)]
    if cfg.train.ep_size > 1 and m.ffn == "moe":  # all-to-all send and receive buffers of the K copies
        per_layer = [b + (2 * m.moe.top_k * m.d_model * a if i >= m.first_k_dense else 0) for i, b in enumerate(per_layer)]
    _, head_peak = head_bytes(m, a)
    if cfg.train.activation_checkpointing:
        # the head's backward is over before the last block is recomputed; its logits stay held
        blocks, recompute = m.n_layers * m.d_model * F32, max(per_layer) + m.vocab_size * a
    else:
        blocks, recompute = sum(per_layer), 0.0
    return ActivationPlan(tokens, blocks * tokens, head_peak * tokens, recompute * tokens)
