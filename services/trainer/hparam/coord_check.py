"""muP coordinate check that measures what muP promises: each matrix's update, felt at its output.

muP (Yang et al. 2022, "Tensor Programs V", arXiv:2203.03466, §D.1) promises that after a step,
every hidden matrix's change moves its own output by a width-independent amount: ΔW·x has
coordinates of size Θ(1) whatever the width (the spectral condition of Yang, Simon & Bernstein
2023 says the same with norms). So per weight matrix we record RMS(ΔW·x), ΔW = W_t − W_0 after t
steps and x the matrix's input on a fixed probe batch at init — for the routed experts every
expert's ΔW on the probe tokens routed to it, w2's input being that expert's own SwiGLU hidden
state at init — and per block the RMS of what the attention and the FFN add to the residual
stream, and of how much that changed (each block's own contribution, not the residual sum: at
base width ~96% of the residual stream is the ×10.66 embedding and its update, which hides every
hidden-matrix mistake). Under a correct muP the ΔW·x curves are flat in width; under standard
parameterisation (SP) they grow (≈ ∝ width for Adam, ∝ √width for a normalised-input matrix under
RMS-matched Muon, whose step is already scaled by √max(fan-in, fan-out)). The check runs for each
optimizer the recipe can use (AdamW, Muon + AdamW), since their muP LR rules differ (shared/optim/scaling.py).
The LR is held constant (no warmup, no decay) so step t means the same at every width. Each
row's growth exponent is the slope of ln(RMS) against ln(width) at the last step: ≈ 0 is flat.

Why x is the input at init, not the input after t steps: a layer's change splits into
ΔW·x + W·Δx + ΔW·Δx, and the spectral condition asks each term to be Θ(1) per coordinate; ΔW·x with
the input as it was is the matrix's own term, the one its multipliers set. Read after the step,
x also carries every upstream layer's update, which under SP grows with width and turns a deeper
layer's input away from the directions its own update was built from: RMS-matched Muon's first
matrices then read growth exponents +0.2 to +0.35 below layer 0 where the update itself grows as
√width (+0.5), and a wrong upstream scaling would show up in every matrix after it. The
whole-network effect is what the per-block rows (act/, update/) report.

The batch is small on purpose (default one sequence of 8 tokens per step). muP's statement is a
limit: width → ∞ at a fixed batch. Adam's update is close to sign(G), G = Σ_t δ_t x_tᵀ over the
batch's tokens, and sign(G)·x keeps its size as width grows only when the width is large against
the number of tokens behind G; with 1,024 tokens per step at widths 32–128 the same correct rule
measured ΔW·x shrinking as width^-0.35 (a finite-width effect a Gaussian toy model reproduces:
-0.42 at 1,024 tokens, -0.14 at 64, -0.03 at 8, over widths 64–1,024). Each point is the mean
RMS over `seeds` runs (init and data), which the few tokens per expert make necessary.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from services.trainer.data import prepare_shards, train_loader, with_parquet_documents
from services.trainer.hparam.fit import fit_power_law
from services.trainer.hparam.proxy import proxy_config
from services.trainer.step import lm_loss
from shared.config import ExperimentConfig
from shared.config.loader import validate
from shared.model import MoETransformer
from shared.model.experts import RoutedExperts
from shared.model.mup import clean_name
from shared.model.router import Router
from shared.optim import build_optimizer

OPTIMIZERS = ("adamw", "muon_adamw")


@dataclass(frozen=True)
class CoordRecord:
    mup: bool
    width: int
    step: int  # 0 = at init; t = after t optimizer steps
    metric: str  # "dWx/<parameter>", "act/attnI", "act/ffnI", "update/attnI", "update/ffnI", "logits", "update/logits"
    rms: float
    optimizer: str = "muon_adamw"
    shape_class: str = ""  # for dWx rows: hidden | input | output | finite (shared.model.mup)


# The check asks how one update scales with width, so it runs in the small-step regime where the
# second step has not yet felt the first; a recipe's tuned LR is no part of that question (at the tiny
# recipe's 3e-2 two steps already move every ΔW·x slope by about -0.2).
CHECK_LR = 3e-3


def _rms(t: torch.Tensor) -> float:
    return float(t.detach().float().pow(2).mean().sqrt())


def _check_config(cfg: ExperimentConfig, optimizer: str, seed: int, micro_batch: int, seq_len: int,
                  lr: float = CHECK_LR) -> ExperimentConfig:
    data = cfg.model_dump(mode="json")
    data["optim"].update(schedule="constant", warmup_steps=0, name=optimizer, lr=lr)
    data["train"].update(seed=seed, micro_batch_size=micro_batch, seq_len=seq_len, grad_accum=1)
    # the probe reads the model being trained, routed as in training (a bias average means nothing after 3 steps)
    data["model"]["moe"]["balance"]["eval_bias"] = "live"
    return validate(data, source="coordinate-check config")


def matrix_modules(model: nn.Module) -> dict[str, nn.Module]:
    """{module name: module} for every module that owns a weight matrix: linears, routers, expert stacks."""
    return {clean_name(n): m for n, m in model.named_modules() if isinstance(m, nn.Linear | Router | RoutedExperts)}


class _Probe:
    """Hooks that keep, on the probe batch, each matrix's input and each block's attention/FFN output.

    Only the inputs at init are read (module docstring), so `stop_keeping_inputs` drops their hooks
    after the first forward rather than copying every matrix's input on each later one."""

    def __init__(self, model: MoETransformer) -> None:
        self.inputs: dict[str, torch.Tensor] = {}
        self.outputs: dict[str, torch.Tensor] = {}
        self.input_handles = [m.register_forward_pre_hook(self._keep_input(n)) for n, m in matrix_modules(model).items()]
        self.handles = []
        for i, block in enumerate(model.layers):
            self.handles.append(block.attn.register_forward_hook(self._keep_output(f"attn{i}")))
            self.handles.append(block.ffn.register_forward_hook(self._keep_output(f"ffn{i}")))

    def _keep_input(self, name: str):
        def hook(module, args):
            self.inputs[name] = args[0].detach().clone()
            if isinstance(module, RoutedExperts):  # which tokens each expert actually processed
                self.inputs[f"{name}#idx"] = args[1].detach().clone()

        return hook

    def _keep_output(self, name: str):
        def hook(_module, _inputs, output):
            self.outputs[name] = (output[0] if isinstance(output, tuple) else output).detach().clone()

        return hook

    def stop_keeping_inputs(self) -> None:
        for h in self.input_handles:
            h.remove()
        self.input_handles = []

    def remove(self) -> None:
        self.stop_keeping_inputs()
        for h in self.handles:
            h.remove()


@torch.no_grad()
def _measure(model: MoETransformer, probe: _Probe, tokens_BT: torch.Tensor) -> dict[str, torch.Tensor]:
    was_training = model.training
    model.eval()
    logits, _ = model(tokens_BT)
    model.train(was_training)
    return {**probe.outputs, "logits": logits.detach().clone()}


@torch.no_grad()
def update_effects(modules: dict[str, nn.Module], start: dict[str, torch.Tensor],
                   inputs: dict[str, torch.Tensor]) -> dict[str, float]:
    """{parameter name: RMS((W − W_start)·x)} with x each module's probe input as the start weights
    saw it (experts: the tokens routed to each expert, w2's input from the start w1/w3)."""
    out: dict[str, float] = {}
    for mod_name, module in modules.items():
        if mod_name not in inputs:  # not called as a module (the LM head is applied by the model's own GEMM)
            continue
        x = inputs[mod_name].float()
        if isinstance(module, RoutedExperts):
            out.update(_expert_effects(mod_name, module, start, x.reshape(-1, x.shape[-1]), inputs[f"{mod_name}#idx"]))
            continue
        p_name = "weight_ED" if isinstance(module, Router) else "weight"
        weight = getattr(module, p_name).float()
        delta = weight - start[f"{mod_name}.{p_name}"]
        out[f"{mod_name}.{p_name}"] = _rms(x.reshape(-1, x.shape[-1]) @ delta.T)
    return out


def _expert_effects(mod_name: str, experts: RoutedExperts, start: dict[str, torch.Tensor], x_TD: torch.Tensor,
                    idx_TK: torch.Tensor) -> dict[str, float]:
    """RMS of ΔW·x per expert matrix over the (expert, token) pairs the router chose: an expert's
    update is built from its own tokens, and those are the inputs it changes the output of. w2's
    input is the hidden state the start w1/w3 make, so its row measures its own update only."""
    sq = {"w1_EFD": 0.0, "w3_EFD": 0.0, "w2_EDF": 0.0}
    count = {k: 0 for k in sq}
    for e in range(experts.w1_EFD.shape[0]):
        x = x_TD[(idx_TK == e).any(-1)]
        if not len(x):
            continue
        w1_0, w3_0 = start[f"{mod_name}.w1_EFD"][e], start[f"{mod_name}.w3_EFD"][e]
        h = F.silu(x @ w1_0.T) * (x @ w3_0.T)
        for name, inp in (("w1_EFD", x), ("w3_EFD", x), ("w2_EDF", h)):
            y = inp @ (getattr(experts, name)[e].float() - start[f"{mod_name}.{name}"][e]).T
            sq[name] += float(y.pow(2).sum())
            count[name] += y.numel()
    return {f"{mod_name}.{k}": (sq[k] / count[k]) ** 0.5 for k in sq if count[k]}


def run_width(cfg: ExperimentConfig, width: int, mup: bool, steps: int, device: torch.device,
              optimizer: str = "muon_adamw", seed: int = 0, micro_batch: int = 1, seq_len: int = 8,
              lr: float = CHECK_LR) -> list[CoordRecord]:
    """Train `cfg` at `width` (muP on/off, `optimizer`) for `steps` steps at constant `lr`; coordinate sizes after each."""
    wcfg = _check_config(proxy_config(cfg, width=width, mup=mup), optimizer, seed, micro_batch, seq_len, lr)
    # matrix classes from the muP view of this width, also for SP runs (same names and shapes)
    with torch.device("meta"):
        classes = {n: s.shape_class for n, s in MoETransformer(proxy_config(cfg, width=width, mup=True).model)
                   .mup_scalings.items()}
    torch.manual_seed(wcfg.train.seed)
    model = MoETransformer(wcfg.model).to(device)
    opt = build_optimizer(model, wcfg.optim, max(steps, 1))
    loader = train_loader(wcfg, 0, 1)
    probe_BT = next(loader).inputs_BT.to(device)
    modules = matrix_modules(model)
    start = {clean_name(n): p.detach().float().clone() for n, p in model.named_parameters()}
    probe = _Probe(model)
    records: list[CoordRecord] = []

    def record(step: int, metric: str, rms: float, shape_class: str = "") -> None:
        records.append(CoordRecord(mup, width, step, metric, rms, optimizer, shape_class))

    try:
        prev = _measure(model, probe, probe_BT)
        probe.stop_keeping_inputs()
        inputs_at_init = probe.inputs
        for key, h in prev.items():
            record(0, key if key == "logits" else f"act/{key}", _rms(h))
        loader.load_state_dict({"step": 0})
        for step in range(1, steps + 1):
            batch = next(loader)
            logits, aux = model(batch.inputs_BT.to(device))
            (lm_loss(logits, batch.targets_BT.to(device)) + aux["aux_loss"]).backward()
            opt.step()
            opt.zero_grad()
            model.update_router_biases()
            cur = _measure(model, probe, probe_BT)
            for key, h in cur.items():
                record(step, key if key == "logits" else f"act/{key}", _rms(h))
                record(step, f"update/{key}", _rms(h - prev[key]))
            for name, rms in update_effects(modules, start, inputs_at_init).items():
                record(step, f"dWx/{name}", rms, classes.get(name, ""))
            prev = cur
    finally:
        probe.remove()
    return records


def coord_check(
    cfg: ExperimentConfig, widths: Sequence[int], steps: int = 5, modes: Sequence[bool] = (True, False),
    optimizers: Sequence[str] = OPTIMIZERS, seeds: int = 3, micro_batch: int = 1, seq_len: int = 8,
    lr: float = CHECK_LR,
) -> list[CoordRecord]:
    """Coordinate sizes for every (optimizer, muP on/off, width) over the first `steps` steps at
    constant `lr`, each the mean over `seeds` runs of `micro_batch` sequences of `seq_len` tokens per step."""
    if len(widths) < 2:
        raise ValueError(f"a coordinate check needs at least 2 widths, got {list(widths)}")
    unknown = sorted(set(optimizers) - set(OPTIMIZERS))
    if unknown:
        raise ValueError(f"unknown optimizer(s) {unknown}; allowed: {list(OPTIMIZERS)}")
    device = torch.device("cuda" if cfg.train.device != "cpu" and torch.cuda.is_available() else "cpu")
    cfg = with_parquet_documents(cfg)  # raw JSONL sources (the demo corpus) → the Parquet the tokenizer reads
    prepare_shards(cfg, 0)
    runs = [(o, mup, w, s) for o in optimizers for mup in modes for w in sorted(widths) for s in range(seeds)]
    sums: dict[tuple, list[float]] = {}
    for optimizer, mup, w, seed in tqdm(runs, desc="coord check", dynamic_ncols=True):
        for r in run_width(cfg, w, mup, steps, device, optimizer, cfg.train.seed + seed, micro_batch, seq_len, lr):
            sums.setdefault((r.mup, r.width, r.step, r.metric, r.optimizer, r.shape_class), []).append(r.rms)
    return [CoordRecord(*key[:4], sum(v) / len(v), *key[4:]) for key, v in sums.items()]


Key = tuple[str, bool, str]  # (optimizer, muP?, metric)


def growth_exponents(records: Sequence[CoordRecord], step: int | None = None) -> dict[Key, float]:
    """{(optimizer, mup, metric): slope of ln(RMS) vs ln(width)} at `step` (default: the last step)."""
    step = max(r.step for r in records) if step is None else step
    by_key: dict[Key, list[tuple[int, float]]] = {}
    for r in records:
        if r.step == step and r.rms > 0:
            by_key.setdefault((r.optimizer, r.mup, r.metric), []).append((r.width, r.rms))
    return {k: fit_power_law([w for w, _ in v], [x for _, x in v]).b for k, v in by_key.items() if len({w for w, _ in v}) > 1}


def hidden_matrix_exponents(records: Sequence[CoordRecord], step: int | None = None) -> dict[Key, float]:
    """The growth exponents of ΔW·x for hidden matrices only (both dims grow: muP's claim is about them)."""
    hidden = {(r.optimizer, r.mup, r.metric) for r in records if r.metric.startswith("dWx/") and r.shape_class == "hidden"}
    return {k: v for k, v in growth_exponents(records, step).items() if k in hidden}


def coord_table(records: Sequence[CoordRecord], step: int | None = None) -> str:
    """A Markdown table: one row per (optimizer, parameterisation, metric), RMS per width and the growth exponent."""
    step = max(r.step for r in records) if step is None else step
    widths = sorted({r.width for r in records})
    slopes = growth_exponents(records, step)
    cell = {(r.optimizer, r.mup, r.metric, r.width): r.rms for r in records if r.step == step}
    classes = {r.metric: r.shape_class for r in records if r.shape_class}
    metrics = sorted({r.metric for r in records if r.step == step}, key=metric_order)
    lines = [f"| optimizer | param | metric (step {step}) | class | " + " | ".join(f"w={w}" for w in widths)
             + " | growth exponent |", "|---|---|---|---|" + "---:|" * (len(widths) + 1)]
    for opt in sorted({r.optimizer for r in records}):
        for mup in sorted({r.mup for r in records}, reverse=True):
            for metric in metrics:
                vals = " | ".join(f"{cell[(opt, mup, metric, w)]:.3g}" if (opt, mup, metric, w) in cell else "-"
                                  for w in widths)
                slope = slopes.get((opt, mup, metric))
                lines.append(f"| {opt} | {'muP' if mup else 'SP'} | {metric} | {classes.get(metric, '')} | {vals} | "
                             f"{'-' if slope is None else f'{slope:+.2f}'} |")
    return "\n".join(lines)


def summary_table(records: Sequence[CoordRecord], step: int | None = None) -> str:
    """Worst |growth exponent| of hidden-matrix ΔW·x per (optimizer, parameterisation), and the mean."""
    by: dict[tuple[str, bool], list[float]] = {}
    for (opt, mup, _), slope in hidden_matrix_exponents(records, step).items():
        by.setdefault((opt, mup), []).append(slope)
    lines = ["| optimizer | param | hidden matrices | min exponent | mean | max exponent |", "|---|---|---:|---:|---:|---:|"]
    for (opt, mup), slopes in sorted(by.items(), key=lambda kv: (kv[0][0], not kv[0][1])):
        lines.append(f"| {opt} | {'muP' if mup else 'SP'} | {len(slopes)} | {min(slopes):+.2f} | "
                     f"{sum(slopes) / len(slopes):+.2f} | {max(slopes):+.2f} |")
    return "\n".join(lines)


def summary_by_step(records: Sequence[CoordRecord]) -> str:
    """Worst and mean hidden-matrix growth exponent at every recorded step, per (optimizer, parameterisation).

    Why per step: muP's promise holds at every step, and ΔW = W_t − W_0 is built from the tokens
    of t steps. A finite-width effect that grows with those tokens (an Adam update is close to the
    sign of a gradient summed over them) shows as a slope that moves with t, which the last step
    alone would not tell from a wrong multiplier."""
    by: dict[tuple[str, bool, int], list[float]] = {}
    for step in sorted({r.step for r in records if r.step > 0}):
        for (opt, mup, _), slope in hidden_matrix_exponents(records, step).items():
            by.setdefault((opt, mup, step), []).append(slope)
    lines = ["| optimizer | param | step | min exponent | mean | max exponent |", "|---|---|---:|---:|---:|---:|"]
    for (opt, mup, step), slopes in sorted(by.items(), key=lambda kv: (kv[0][0], not kv[0][1], kv[0][2])):
        lines.append(f"| {opt} | {'muP' if mup else 'SP'} | {step} | {min(slopes):+.2f} | "
                     f"{sum(slopes) / len(slopes):+.2f} | {max(slopes):+.2f} |")
    return "\n".join(lines)


def metric_order(metric: str) -> tuple[int, int, str]:
    """dWx rows first, then activations, logits, updates; within each by layer index."""
    kind, _, rest = metric.partition("/")
    rank = {"dWx": 0, "act": 1, "logits": 2, "update": 3}.get(kind, 4)
    layer = re.search(r"\d+", rest)
    return rank, int(layer.group()) if layer else 10_000, metric
