"""Arms × seeds as parallel Ray tasks: train the proxy, measure it, write one result file each.

Each arm-seed is one Ray task asking for `ablation.cpus_per_run` CPUs (and `gpus_per_run` GPUs),
spread over the cluster's nodes; torch uses that many threads whatever node it lands on, so an
arm-seed computes the same numbers on one node or on several (the trainer is bitwise
deterministic on CPU for a given seed and thread count). A finished arm-seed writes
`<run>/ablation_result.json` atomically, keyed by its config; a rerun with the same key skips it.
A failed task is submitted again up to `ablation.retries` times and then reported with its error,
never dropped: the report lists it and compares the arms on the seeds that finished.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.ablation.prepare import ArmPlan
from cluster.stages import digest
from shared.config import ExperimentConfig
from shared.data.atomic import atomic_write_json

RESULT = "ablation_result.json"
# (checkpoint path, the arm-seed's config) -> {metric: value}; must be importable by Ray workers
Metrics = Callable[[str, ExperimentConfig], dict[str, float]]


@dataclass
class ArmSeed:
    arm: str
    seed: int
    cfg: ExperimentConfig
    data_key: str = ""

    @property
    def result_file(self) -> Path:
        return Path(self.cfg.train.out_dir) / self.cfg.train.run_name / RESULT

    def key(self) -> str:
        """What decides the result: the config without where it reports to (tracker, tags), and the arm's data."""
        return digest({"cfg": self.cfg.model_dump(mode="json", exclude={"tracker": True, "train": {"tags"}}),
                       "data": self.data_key})


def group_tags(ablation: str, arm: str) -> list[str]:
    """The tags that group an arm-seed's training run in the tracker: `ablation:<name>` (cut to the
    tracker's 64 characters) and `arm:<arm>` (arm names are at most 60 characters, so it always fits)."""
    return [f"ablation:{ablation}"[:64], f"arm:{arm}"]


def arm_seeds(plans: list[ArmPlan], seeds: list[int], parent_run: str | None) -> list[ArmSeed]:
    out = []
    for plan in plans:
        tags = [*plan.cfg.train.tags, *group_tags(plan.cfg.name, plan.name)]
        for seed in seeds:
            cfg = plan.cfg.model_copy(update={
                "name": f"{plan.cfg.name}-{plan.name}",
                "train": plan.cfg.train.model_copy(update={"seed": seed, "run_name": f"{plan.name}-s{seed}",
                                                           "tags": tags}),
                "tracker": plan.cfg.tracker.model_copy(update={"parent": parent_run}),
            })
            out.append(ArmSeed(plan.name, seed, cfg, plan.data_key))
    return out


def finished(item: ArmSeed) -> dict[str, Any] | None:
    """The stored result when this arm-seed already finished under the same config."""
    if not item.result_file.is_file():
        return None
    done = json.loads(item.result_file.read_text())
    return done if done.get("key") == item.key() else None


def train_and_measure(cfg_json: dict, cwd: str, threads: int, metrics: Metrics | None) -> dict[str, Any]:
    """The body of one arm-seed task: train in this worker, then measure the final checkpoint."""
    import ray
    import torch

    from services.trainer.launch import run_local
    from shared.config.loader import validate

    if os.path.isdir(cwd):  # the job's relative paths mean the driver's folder, where this node has it
        os.chdir(cwd)
    torch.set_num_threads(threads)
    cfg = validate(cfg_json, source="ablation arm-seed")
    t0 = time.perf_counter()
    result = run_local(cfg)
    values = {"eval/loss": float(result["eval/loss"])} if "eval/loss" in result else {}
    if metrics is not None:
        values.update({k: float(v) for k, v in metrics(result["checkpoint"], cfg).items()})
    return {"metrics": values, "train_loss": result.get("loss"), "run_id": result.get("run_id"),
            "checkpoint": result.get("checkpoint"), "node": ray.get_runtime_context().get_node_id(),
            "seconds": time.perf_counter() - t0}


def run_all(items: list[ArmSeed], cpus: float, gpus: float, retries: int, metrics: Metrics | None,
            on_event: Callable[..., None] = lambda kind, message, **data: None) -> tuple[dict, dict]:
    """Run every unfinished arm-seed as a Ray task; returns ({(arm, seed): result}, {(arm, seed): error})."""
    import ray

    results: dict[tuple[str, int], dict] = {}
    failures: dict[tuple[str, int], str] = {}
    todo = []
    for item in items:
        done = finished(item)
        if done is not None:
            results[(item.arm, item.seed)] = {**done, "skipped": True}
            on_event("arm_seed_skipped", f"{item.arm} seed {item.seed}: finished earlier, reused",
                     arm=item.arm, seed=item.seed)
        else:
            todo.append(item)
    task = ray.remote(train_and_measure).options(num_cpus=cpus, num_gpus=gpus, max_retries=0,
                                                 scheduling_strategy="SPREAD")
    threads = max(1, int(cpus))
    cwd = os.getcwd()

    def submit(item: ArmSeed):
        return task.remote(item.cfg.model_dump(mode="json"), cwd, threads, metrics)

    pending = {submit(item): (item, 0) for item in todo}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        item, attempt = pending.pop(ready[0])
        try:
            out = ray.get(ready[0])
        except Exception as exc:  # noqa: BLE001 - a failed arm-seed is retried, then reported
            error = _short_error(exc)
            if attempt < retries:
                on_event("arm_seed_retry", f"{item.arm} seed {item.seed} failed, retrying: {error}",
                         arm=item.arm, seed=item.seed, attempt=attempt + 1)
                pending[submit(item)] = (item, attempt + 1)
            else:
                failures[(item.arm, item.seed)] = error
                on_event("arm_seed_failed", f"{item.arm} seed {item.seed} failed after {attempt + 1} attempts: {error}",
                         arm=item.arm, seed=item.seed)
            continue
        out = {**out, "key": item.key(), "arm": item.arm, "seed": item.seed, "attempts": attempt + 1}
        atomic_write_json(item.result_file, out)
        results[(item.arm, item.seed)] = {**out, "skipped": False}
        on_event("arm_seed_done", f"{item.arm} seed {item.seed}: " + ", ".join(
            f"{k} {v:.4f}" for k, v in sorted(out["metrics"].items())), arm=item.arm, seed=item.seed)
    return results, failures


def _short_error(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc
    lines = traceback.format_exception_only(type(cause), cause)
    return "".join(lines).strip().splitlines()[-1][:500]
