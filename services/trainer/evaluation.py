"""Held-out evaluation during training: LM loss and MaxVio_global on the same batches every time, and
bits per byte per reference set plus the offline task suite (`train.eval_suite`).

Why the same batches: the loader is rewound to its start before each evaluation, so two
evaluations differ only by the weights, and a curve of `eval/loss` is a curve of the model. The
loss is averaged over ranks and the router loads summed over every batch and rank before MaxVio
(Wang et al. 2024, Loss-Free Balancing: MaxVio_global = (max_i load_i − mean load) / mean load
over the whole evaluation set), so N processes report what one process would. The same routing
gives the frozen router's figures beside their floor (`router_frozen/*`, eval_frozen.py).
"""

from __future__ import annotations

import logging
import time
import weakref

import torch
import torch.distributed as dist

from services.trainer.eval_frozen import RoutingTap, frozen_router_metrics
from services.trainer.parallel import mean_over_ranks
from services.trainer.router_stats import RouterTally
from shared.config.train import EvalSuiteConfig

log = logging.getLogger(__name__)

# Held-out loaders whose eval has already said the floor is left out. The loader is rewound before
# every evaluation, so each one routes the same documents and the reason would repeat unchanged at
# every eval of the run; keyed by loader (not a global flag) so runs sharing a process (the
# router-balance benchmark's threads) each say it once.
_FLOOR_WARNED: weakref.WeakSet = weakref.WeakSet()


@torch.no_grad()
def evaluate(model, loader, batches: int, device: torch.device) -> dict[str, float]:
    """Mean LM loss over the first `batches` held-out batches (the same ones every time), and
    MaxVio_global: MaxVio of each MoE layer's loads summed over all of them and every rank."""
    loader.load_state_dict({"step": 0})
    model.eval()
    losses = []
    tally = RouterTally()
    with RoutingTap(model) as tap:
        for _ in range(batches):
            batch = next(loader)
            _, aux = model(batch.inputs_BT.to(device), batch.targets_BT.to(device))
            losses.append(float(aux["lm_loss"]))
            tally.add(aux["layers"])
            tap.batch(batch.inputs_BT, batch.sources_B)
    model.train()
    tally.reduce()
    out = {"eval/loss": mean_over_ranks(sum(losses) / len(losses), device)}
    stats = tally.layer_stats()
    if stats:
        out["eval/maxvio_global"] = max(s["maxvio"] for s in stats.values())
        out.update({f"eval/maxvio_global/layer{i}": s["maxvio"] for i, s in stats.items()})
        first = loader not in _FLOOR_WARNED
        frozen = frozen_router_metrics(tap, loader.mixture.eos_id, warn_no_floor=first)
        if first and "router_frozen/floor" not in frozen:
            _FLOOR_WARNED.add(loader)
        out.update(frozen)
    return out


class SuiteEvaluator:
    """BPB per reference set and the task suite, logged as `eval/bpb/<set>`, `eval/task/<task>/<metric>`.

    Why in the loop: loss in nats per token changes with the tokenizer, so the curves that compare
    runs on different data are BPB and task scores (DataDecide: the continuous ones, gold log-prob
    and BPB, rank data recipes at small scale where accuracies sit at chance). Every rank runs the
    same items (a sharded model needs every rank in each forward); the skip decision when the time
    budget runs out is rank 0's, broadcast, so all ranks run the same forwards. Each set or task is
    scored in full or skipped and counted (`eval/skipped_for_time`), never cut mid-way, so a
    logged value always covers the same texts and items. Texts and task files are read once.
    """

    def __init__(self, cfg: EvalSuiteConfig, tokenizer, seq_len: int) -> None:
        from shared.eval.reference_sets import load_reference_sets
        from shared.eval.tasks import discover_tasks, read_task_items

        self.cfg, self.tokenizer, self.seq_len = cfg, tokenizer, seq_len
        self.sets = {name: texts[:cfg.reference_texts] for name, texts in load_reference_sets(cfg.reference_sets).items()}
        self.tasks = discover_tasks(cfg.tasks_path) if cfg.tasks else []
        for task in self.tasks:  # a malformed task file stops the run here, before the first step
            read_task_items(task, cfg.task_items)

    @torch.no_grad()
    def __call__(self, model, device: torch.device) -> dict[str, float]:
        from shared.eval.bpb import bits_per_byte
        from shared.eval.tasks import score_task

        deadline = time.monotonic() + self.cfg.max_seconds
        out: dict[str, float] = {}
        skipped = []
        jobs = [(f"bpb/{n}", n) for n in self.sets] + [(f"task/{t.name}", t) for t in self.tasks]
        for key, what in jobs:
            if not _all_agree(time.monotonic() < deadline, device):
                skipped.append(key)
                continue
            if isinstance(what, str):
                r = bits_per_byte(model, self.tokenizer, self.sets[what], seq_len=self.seq_len,
                                  batch_size=self.cfg.batch_size)
                out[f"eval/bpb/{what}"] = r.bpb
                out[f"eval/nats_per_token/{what}"] = r.nats_per_token
            else:
                scores = score_task(model, self.tokenizer, what, seq_len=self.seq_len, batch_size=self.cfg.batch_size,
                                    limit=self.cfg.task_items)
                out.update({f"eval/task/{what.name}/{k}": v for k, v in scores.items()})
        out["eval/skipped_for_time"] = float(len(skipped))
        if skipped:
            log.warning("eval_suite: %.0f s budget spent; not scored this time: %s", self.cfg.max_seconds,
                        ", ".join(skipped))
        return out


def _all_agree(go_on: bool, device: torch.device) -> bool:
    """Rank 0's decision on every rank (so every rank runs the same forwards)."""
    if not (dist.is_available() and dist.is_initialized()):
        return go_on
    flag = torch.tensor([1.0 if go_on else 0.0], device=device)
    dist.broadcast(flag, src=0)
    return bool(flag.item() > 0.5)


def suite_evaluator(cfg, seq_len: int) -> SuiteEvaluator | None:
    """The run's SuiteEvaluator (its tokenizer is the one the shards were built with), or None when disabled."""
    if not cfg.train.eval_suite.enabled:
        return None
    from shared.data.prepare import ensure_tokenizer

    return SuiteEvaluator(cfg.train.eval_suite, ensure_tokenizer(cfg), seq_len)
