"""muP coordinate check: do activations, logits and per-step updates keep their size as width grows?

The test of Yang et al. 2022 ("Tensor Programs V", arXiv:2203.03466, §D.1 and Fig. 5): train
the same recipe at a ladder of widths for a few steps and record the RMS ("coordinate size") of
every layer's output, of the logits, and of what each step changed. Under a correct muP these
curves are flat in width; under standard parameterisation (SP) the updates and logits grow with
width (≈ ∝ width for Adam-like optimizers), which is why SP's optimal LR drifts with width.

Per layer we record the update in function space, RMS(h_l(t) − h_l(t−1)) on a fixed probe batch,
rather than the entrywise RMS of ΔW: under muP the latter is *meant* to shrink as 1/width (the
hidden-matrix LR multiplier) so that ΔW·x stays Θ(1), and ΔW·x is what the layer's output feels.
The LR is held constant (no warmup, no decay) so step t means the same at every width.
Each row's growth exponent is the slope of ln(RMS) against ln(width) at the last step: ≈ 0 is flat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tqdm import tqdm

from services.trainer.data import prepare_shards, train_loader, with_parquet_documents
from services.trainer.hparam.fit import fit_power_law
from services.trainer.hparam.proxy import proxy_config
from services.trainer.loop import lm_loss
from shared.config import ExperimentConfig
from shared.config.loader import validate
from shared.model import MoETransformer
from shared.optim import build_optimizer


@dataclass(frozen=True)
class CoordRecord:
    mup: bool
    width: int
    step: int  # 0 = at init; t = after t optimizer steps
    metric: str  # "act/layerI", "logits", "update/layerI", "update/logits"
    rms: float


def _rms(t: torch.Tensor) -> float:
    return float(t.detach().float().pow(2).mean().sqrt())


def _constant_lr(cfg: ExperimentConfig) -> ExperimentConfig:
    data = cfg.model_dump(mode="json")
    data["optim"].update(schedule="constant", warmup_steps=0)
    return validate(data, source="coordinate-check config")


class _Probe:
    """Forward hooks that keep each block's output on the probe batch."""

    def __init__(self, model: MoETransformer) -> None:
        self.outputs: dict[int, torch.Tensor] = {}
        self.handles = [block.register_forward_hook(self._hook(i)) for i, block in enumerate(model.layers)]

    def _hook(self, i: int):
        def hook(_module, _inputs, output):
            self.outputs[i] = (output[0] if isinstance(output, tuple) else output).detach().clone()

        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


@torch.no_grad()
def _measure(model: MoETransformer, probe: _Probe, tokens_BT: torch.Tensor) -> dict[str, torch.Tensor]:
    was_training = model.training
    model.eval()
    logits, _ = model(tokens_BT)
    model.train(was_training)
    return {**{f"layer{i}": h for i, h in probe.outputs.items()}, "logits": logits.detach().clone()}


def run_width(cfg: ExperimentConfig, width: int, mup: bool, steps: int, device: torch.device) -> list[CoordRecord]:
    """Train `cfg` at `width` (muP on/off) for `steps` steps; the coordinate sizes after each step."""
    wcfg = _constant_lr(proxy_config(cfg, width=width, mup=mup))
    torch.manual_seed(wcfg.train.seed)
    model = MoETransformer(wcfg.model).to(device)
    optimizer = build_optimizer(model, wcfg.optim, max(steps, 1))
    loader = train_loader(wcfg, 0, 1)
    probe_batch = next(loader)
    probe_BT = probe_batch.inputs_BT.to(device)
    probe = _Probe(model)
    records: list[CoordRecord] = []
    try:
        prev = _measure(model, probe, probe_BT)
        for key, h in prev.items():
            name = "logits" if key == "logits" else f"act/{key}"
            records.append(CoordRecord(mup, width, 0, name, _rms(h)))
        loader.load_state_dict({"step": 0})
        for step in range(1, steps + 1):
            batch = next(loader)
            logits, aux = model(batch.inputs_BT.to(device))
            (lm_loss(logits, batch.targets_BT.to(device)) + aux["aux_loss"]).backward()
            optimizer.step()
            optimizer.zero_grad()
            model.update_router_biases()
            cur = _measure(model, probe, probe_BT)
            for key, h in cur.items():
                name = "logits" if key == "logits" else f"act/{key}"
                records.append(CoordRecord(mup, width, step, name, _rms(h)))
                records.append(CoordRecord(mup, width, step, f"update/{key}", _rms(h - prev[key])))
            prev = cur
    finally:
        probe.remove()
    return records


def coord_check(
    cfg: ExperimentConfig, widths: Sequence[int], steps: int = 5, modes: Sequence[bool] = (True, False)
) -> list[CoordRecord]:
    """Coordinate sizes for every (muP on/off, width) over the first `steps` steps, on the recipe's data."""
    if len(widths) < 2:
        raise ValueError(f"a coordinate check needs at least 2 widths, got {list(widths)}")
    device = torch.device("cuda" if cfg.train.device != "cpu" and torch.cuda.is_available() else "cpu")
    cfg = with_parquet_documents(cfg)  # raw JSONL sources (the demo corpus) → the Parquet the tokenizer reads
    prepare_shards(cfg, 0)
    records: list[CoordRecord] = []
    runs = [(mup, w) for mup in modes for w in sorted(widths)]
    for mup, w in tqdm(runs, desc="coord check", dynamic_ncols=True):
        records.extend(run_width(cfg, w, mup, steps, device))
    return records


def growth_exponents(records: Sequence[CoordRecord], step: int | None = None) -> dict[tuple[bool, str], float]:
    """{(mup, metric): slope of ln(RMS) vs ln(width)} at `step` (default: the last step)."""
    step = max(r.step for r in records) if step is None else step
    by_key: dict[tuple[bool, str], list[tuple[int, float]]] = {}
    for r in records:
        if r.step == step and r.rms > 0:
            by_key.setdefault((r.mup, r.metric), []).append((r.width, r.rms))
    return {k: fit_power_law([w for w, _ in v], [x for _, x in v]).b for k, v in by_key.items() if len({w for w, _ in v}) > 1}


def coord_table(records: Sequence[CoordRecord], step: int | None = None) -> str:
    """A Markdown table: one row per (parameterisation, metric), RMS per width and the growth exponent."""
    step = max(r.step for r in records) if step is None else step
    widths = sorted({r.width for r in records})
    slopes = growth_exponents(records, step)
    cell = {(r.mup, r.metric, r.width): r.rms for r in records if r.step == step}
    metrics = sorted({r.metric for r in records if r.step == step}, key=metric_order)
    lines = [f"| param | metric (step {step}) | " + " | ".join(f"w={w}" for w in widths) + " | growth exponent |",
             "|---|---|" + "---:|" * (len(widths) + 1)]
    for mup in sorted({r.mup for r in records}, reverse=True):
        for metric in metrics:
            vals = " | ".join(f"{cell[(mup, metric, w)]:.3g}" if (mup, metric, w) in cell else "-" for w in widths)
            slope = slopes.get((mup, metric))
            lines.append(f"| {'muP' if mup else 'SP'} | {metric} | {vals} | {'-' if slope is None else f'{slope:+.2f}'} |")
    return "\n".join(lines)


def metric_order(metric: str) -> tuple[int, int, str]:
    kind, _, rest = metric.partition("/")
    rank = {"act": 0, "logits": 1, "update": 2}.get(kind, 3)
    layer = int(rest[5:]) if rest.startswith("layer") else 10_000
    return rank, layer, metric
