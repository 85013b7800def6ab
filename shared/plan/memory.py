"""What one GPU holds to train a config: weights, grads, optimizer state, low-precision copies,
activations and transients, and whether that fits the card (`moelab plan`).

Per-parameter costs are `shared.precision.memory`'s (the same numbers `moelab precision-report`
prints), applied to the trainer as it runs today:

- Storage is the parameters' dtype, fp32: the trainer builds the model in fp32 and
  `master_weights: bf16` rounds the values after each step without shrinking them, so weights,
  grads and optimizer state are counted at fp32 for both settings (the report says so).
- Sharding (services/trainer/parallel.py): with N > 1 workers FSDP2 shards every parameter over
  the N ranks, except the routed experts under expert parallelism, which each rank holds
  1/ep_size of (replicated over N / ep_size groups).
- Low-precision copies live through the forward and backward: bf16 autocast caches one bf16 cast
  per weight for the whole forward — of the *unsharded* weights FSDP2 gathers, so these copies
  are not divided by N — and the routed experts' bf16 casts are saved per layer (one layer with
  activation checkpointing, which recomputes them). fp8/nvfp4 layouts follow
  `shared.precision.memory`. Under fp32 training the only copy is the experts' concatenated
  gate|up weight (`shared.kernels.dispatch.expert_swiglu`), saved per layer.
- Transients: FSDP2's all-gathered fp32 blocks (this one and the prefetched next), and at the
  optimizer step the pre-step parameter copy `optim.log_stats` takes plus Newton–Schulz buffers
  of the largest matrix; activations are gone by then, so the peak is the larger of the two phases.
- A reserve for the CUDA context, cuBLAS workspaces and allocator fragmentation
  (1.5 GiB + 5% of the rest; PyTorch's caching allocator typically fragments 3–8%).

It is a plan, not a promise: `tests/shared/plan` checks the parameter terms against
`precision-report` and a hand count, the activation terms against what autograd saves, and the
`gpu` test against `torch.cuda.max_memory_allocated` on a real step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.config.experiment import ExperimentConfig
from shared.optim.groups import assign_optimizer
from shared.plan.activations import activation_plan
from shared.precision.memory import bytes_per_param, lowp_copy_bytes, param_classes

GIB = 2**30
RESERVE_BYTES = 1.5 * GIB
FRAGMENTATION = 0.05
PARTS = ("weights", "grads", "optimizer", "lowp_copies", "activations", "transients", "reserve")


@dataclass
class MemoryPlan:
    """Bytes per GPU by part, the total and the verdict against `gpu_mem_gib` (None: not checked)."""

    gpus: int
    gpu_mem_gib: float | None
    params: int
    params_per_gpu: float
    parts: dict[str, float]
    tokens_per_micro_batch: int
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        return sum(self.parts.values())

    @property
    def fits(self) -> bool | None:
        return None if self.gpu_mem_gib is None else self.total <= self.gpu_mem_gib * GIB

    def to_json(self) -> dict:
        return {"gpus": self.gpus, "gpu_mem_gib": self.gpu_mem_gib, "params": self.params,
                "params_per_gpu": self.params_per_gpu, "gib": {k: v / GIB for k, v in self.parts.items()},
                "total_gib": self.total / GIB, "fits": self.fits, "tokens_per_micro_batch": self.tokens_per_micro_batch,
                "notes": self.notes}  # fmt: skip


def _routed_count(cfg: ExperimentConfig) -> tuple[int, int]:
    """(routed-expert parameters, MoE layers): E · 3 · F · D per MoE layer."""
    m = cfg.model
    if m.ffn != "moe":
        return 0, 0
    layers = m.n_layers - m.first_k_dense
    return layers * m.moe.n_routed_experts * 3 * m.moe.expert_hidden * m.d_model, layers


def _largest_block(cfg: ExperimentConfig, routed_per_layer: int, total_nonrouted: int) -> float:
    """Parameters of the largest transformer block FSDP2 gathers at once (routed experts included
    only when FSDP shards them, i.e. without expert parallelism)."""
    m = cfg.model
    per_block = (total_nonrouted - 2 * m.vocab_size * m.d_model) / max(m.n_layers, 1)
    return per_block + (routed_per_layer if cfg.train.ep_size == 1 else 0)


def plan_memory(cfg: ExperimentConfig, gpus: int | None = None, gpu_mem_gib: float | None = None) -> MemoryPlan:
    """Memory per GPU of training `cfg` on `gpus` GPUs (default: `train.workers`), one per worker."""
    tc, prec = cfg.train, cfg.model.moe.precision
    world = gpus or tc.workers
    if world != tc.workers:
        raise ValueError(f"--gpus {world} differs from train.workers={tc.workers}; pass train.workers={world} "
                         f"train.dp_size={world} (and an ep_size that divides it) as overrides")
    classes = param_classes(cfg.model, cfg.optim)
    routed, moe_layers = _routed_count(cfg)
    routed_opt = assign_optimizer("layers.0.ffn.experts.w1_EFD", 3, cfg.optim)
    if routed:
        classes[("expert", routed_opt)] -= routed
    params = sum(classes.values()) + routed
    gran, autocast = prec.fp8_granularity, tc.dtype == "bfloat16"
    notes = []
    if prec.master_weights == "bf16":
        notes.append("master_weights=bf16: the trainer keeps fp32 parameter storage (values rounded to bf16 after "
                     "each step), so weights, grads and optimizer state are counted at 4 bytes")
    shard = world if world > 1 else 1
    routed_div = tc.ep_size if tc.ep_size > 1 else shard
    parts = dict.fromkeys(PARTS, 0.0)
    nonrouted = 0
    for (cls, opt), count in classes.items():
        per = bytes_per_param("bf16", "fp32", opt, gran)
        for key in ("weights", "grads", "optimizer"):
            parts[key] += getattr(per, key) * count / shard
        mode = prec.expert if cls == "expert" else prec.dense if cls == "dense" else "bf16"
        parts["lowp_copies"] += _copy_bytes(mode, autocast, gran) * count  # casts of gathered weights: unsharded
        nonrouted += count
    per_routed = bytes_per_param("bf16", "fp32", routed_opt, gran)
    for key in ("weights", "grads", "optimizer"):
        parts[key] += getattr(per_routed, key) * routed / routed_div
    parts["lowp_copies"] += _routed_copy_bytes(cfg, routed, moe_layers, routed_div)
    acts = activation_plan(cfg)
    parts["activations"] = acts.peak
    routed_per_layer = routed // max(moe_layers, 1)
    gather = 2 * 4 * _largest_block(cfg, routed_per_layer, nonrouted) if world > 1 else 0.0
    m = cfg.model
    largest = max(routed_per_layer // 3 // (tc.ep_size if routed_div > 1 else 1), m.resolved_dense_hidden * m.d_model)
    adamw = sum(c for (_, opt), c in classes.items() if opt == "adamw") / shard
    # pre-step copy of every parameter (log_stats), Newton–Schulz buffers (≈4 of the largest Muon
    # tensor, bf16 or fp32) and one fp32 temporary of AdamW's foreach update over its parameters
    step = (parts["weights"] if cfg.optim.log_stats else 0.0) + 4 * 4 * largest + 4 * adamw
    fwd_bwd = parts["lowp_copies"] + parts["activations"] + gather
    parts["transients"] = gather + max(0.0, step - fwd_bwd)
    parts["reserve"] = RESERVE_BYTES + FRAGMENTATION * sum(parts.values())
    if step > fwd_bwd:
        notes.append("the optimizer step (optim.log_stats' pre-step parameter copy) is the peak phase, not the backward")
    return MemoryPlan(world, gpu_mem_gib, params, sum(classes.values()) / shard + routed / routed_div, parts,
                      acts.tokens, notes)


def _copy_bytes(mode: str, autocast: bool, granularity: str) -> float:
    """Bytes per (non-routed) parameter of the weight copies a GEMM in `mode` keeps."""
    if mode == "bf16" and not autocast:
        return 0.0  # fp32 GEMMs on the fp32 weights themselves
    return lowp_copy_bytes(mode, "fp32", granularity)


def _routed_copy_bytes(cfg: ExperimentConfig, routed: int, moe_layers: int, routed_div: int) -> float:
    """The routed experts' weight copies kept for the backward, on one GPU."""
    if not routed:
        return 0.0
    prec, tc = cfg.model.moe.precision, cfg.train
    local = routed / routed_div
    if prec.expert == "bf16":
        # bf16 casts (autocast) or, in fp32, the concatenated gate|up weight (2/3 of the experts)
        per = 2.0 if tc.dtype == "bfloat16" else 4.0 * 2 / 3
        if routed_div > 1 and tc.ep_size == 1:
            local = routed  # FSDP gathers each layer's experts whole; the copies of gathered weights stay
    else:
        per = lowp_copy_bytes(prec.expert, "fp32", prec.fp8_granularity)
    layers_kept = 1 if tc.activation_checkpointing else moe_layers
    return per * local * layers_kept / moe_layers


def format_plan(plan: MemoryPlan, name: str) -> str:
    """The plan as a table, one row per part, in GiB per GPU."""
    lines = [f"{name}: {plan.params / 1e9:.2f}B parameters on {plan.gpus} GPU(s), {plan.params_per_gpu / 1e9:.2f}B "
             f"per GPU; micro-batch of {plan.tokens_per_micro_batch:,} tokens per GPU",
             "| part | GiB per GPU |", "|---|---|"]
    lines += [f"| {k} | {v / GIB:.2f} |" for k, v in plan.parts.items()]
    lines.append(f"| **total** | **{plan.total / GIB:.2f}** |")
    if plan.gpu_mem_gib is not None:
        verdict = "fits" if plan.fits else "DOES NOT FIT"
        lines.append(f"{verdict}: {plan.total / GIB:.1f} GiB of {plan.gpu_mem_gib:g} GiB per GPU")
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines)
