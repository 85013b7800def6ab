"""Resumable LR sweeps over proxies on Ray Tune: one trial per (width, muP on/off, LR, token budget).

Each trial is the recipe at that point (`proxy.proxy_config`), keyed by a hash of its resolved
config. A finished trial writes `trials/<key>.json` atomically; before launching, the runner
reads the files that exist and launches only the missing trials, so a killed or extended sweep
never retrains a finished one (the datatrove-style completion marker). A diverged run (the
trainer stops on repeated NaN steps) is a finished trial with loss = inf, not a failure to retry.

Trials run as Ray Tune function trainables with fractional CPUs (several small proxies share a
core; on 2 CPUs a pool taking every CPU starves Ray's own tasks), or in-process with
`use_ray=False`. Every result is also logged to the tracker under one sweep run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from services.trainer.hparam.proxy import proxy_config, tokens_per_step
from shared import tracking
from shared.config import ExperimentConfig
from shared.config.loader import validate

log = logging.getLogger(__name__)

TrainFn = Callable[[ExperimentConfig], dict[str, Any]]
# The sections that decide a trial's loss; the others (tracker, cluster, scorer, data filter) do not,
# so a new default there never invalidates finished trials.
KEYED_SECTIONS = ("model", "optim", "train", "mixture")


@dataclass(frozen=True)
class Trial:
    width: int
    mup: bool
    lr: float
    tokens: int | None = None  # None: the recipe's own train.steps
    seed: int = 0  # added to the recipe's train.seed (init and data order)


@dataclass(frozen=True)
class TrialResult:
    key: str
    width: int
    mup: bool
    lr: float
    tokens: int
    steps: int
    loss: float  # what the sweep ranks by: held-out eval loss when the recipe has eval data, else final train loss
    train_loss: float
    eval_loss: float | None
    diverged: bool
    seed: int = 0


def _inside_results(value, root: Path):
    """`value` with every path inside the results folder written relative to it (`<results>/...`).

    Why: a sweep's own files (the `--pydoc-corpus` documents, its token shards) live under its
    results folder, so their absolute paths would tie every trial's key to where the folder is; a
    sweep copied or committed elsewhere would then retrain everything instead of resuming.
    """
    if isinstance(value, dict):
        return {k: _inside_results(v, root) for k, v in value.items()}
    if isinstance(value, list):
        return [_inside_results(v, root) for v in value]
    if isinstance(value, str) and value:
        try:
            return "<results>/" + Path(value).resolve().relative_to(root).as_posix()
        except (ValueError, OSError):
            return value
    return value


def trial_config(cfg: ExperimentConfig, trial: Trial, results_dir: str | os.PathLike) -> tuple[str, ExperimentConfig]:
    """(key, config) of one trial; the key hashes the sections that shape training, not where it writes."""
    tcfg = proxy_config(cfg, width=trial.width, mup=trial.mup, lr=trial.lr, tokens=trial.tokens)
    data = tcfg.model_dump(mode="json")
    data["train"]["seed"] = cfg.train.seed + trial.seed
    data["train"].update(run_name=None, out_dir="")
    keyed = {k: data[k] for k in KEYED_SECTIONS}
    keyed["mixture"] = _inside_results(keyed["mixture"], Path(results_dir).resolve())
    key = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:16]
    data["train"].update(run_name=f"trial-{key}", out_dir=str(Path(results_dir).resolve() / "runs"),
                         checkpoint_every=tcfg.train.steps, keep_last=1)
    # Proxies are ranked by loss alone, so router-health warnings are switched off (windows longer
    # than the run).
    data["train"]["router_health"].update(window=tcfg.train.steps + 1, dead_window=tcfg.train.steps + 1)
    return key, validate(data, source=f"trial {trial}")


def _result_path(results_dir: str | os.PathLike, key: str) -> Path:
    return Path(results_dir) / "trials" / f"{key}.json"


def load_result(results_dir: str | os.PathLike, key: str) -> TrialResult | None:
    """The finished trial's result, or None when it has not finished (no or unreadable file)."""
    path = _result_path(results_dir, key)
    try:
        return TrialResult(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, TypeError) as exc:
        log.warning("ignoring unreadable trial result %s (%s); the trial will run again", path, exc)
        return None


def _write_result(results_dir: str | os.PathLike, result: TrialResult) -> None:
    path = _result_path(results_dir, result.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(asdict(result), indent=1))
    os.replace(tmp, path)


def _default_train(cfg: ExperimentConfig) -> dict[str, Any]:
    from services.trainer.launch import run_local

    return run_local(cfg)


def run_trial(cfg_json: dict, key: str, trial: dict, results_dir: str, train_fn: TrainFn | None = None) -> TrialResult:
    """Train one trial and write its result file; a run stopped by non-finite steps counts as diverged."""
    from services.trainer.loop import TrainingStopped

    cfg = validate(cfg_json, source=f"trial {key}")
    try:
        metrics = (train_fn or _default_train)(cfg)
    except TrainingStopped as exc:
        log.warning("trial %s diverged: %s", key, exc)
        metrics = {"loss": math.inf}
    train_loss = float(metrics.get("loss", math.inf))
    eval_loss = metrics.get("eval/loss")
    loss = float(eval_loss) if eval_loss is not None else train_loss
    diverged = not math.isfinite(loss)
    result = TrialResult(key, trial["width"], trial["mup"], trial["lr"], cfg.train.steps * tokens_per_step(cfg),
                         cfg.train.steps, math.inf if diverged else loss, train_loss,
                         None if eval_loss is None else float(eval_loss), diverged, int(trial.get("seed", 0)))
    _write_result(results_dir, result)
    return result


def _run_with_tune(pending: dict[str, tuple[Trial, ExperimentConfig]], results_dir: Path, train_fn: TrainFn | None,
                   cpus_per_trial: float, max_concurrent: int | None) -> None:
    import ray
    from ray import tune

    if not ray.is_initialized():
        ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False)
    payload = {k: (t.__dict__, c.model_dump(mode="json")) for k, (t, c) in pending.items()}
    out = str(results_dir.resolve())
    cwd = os.getcwd()

    def trainable(config: dict) -> None:
        # Tune starts each function trial in its own working directory; relative paths in the recipe
        # (data/demo/…, runs/…, the tracker spool) mean the launching directory, so go back to it.
        if os.path.isdir(cwd):
            os.chdir(cwd)
        trial, cfg_json = payload[config["key"]]
        result = run_trial(cfg_json, config["key"], trial, out, train_fn)
        tune.report({"loss": result.loss, "diverged": result.diverged})

    name = "tune-" + hashlib.sha256(",".join(sorted(pending)).encode()).hexdigest()[:8]
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": cpus_per_trial}),
        param_space={"key": tune.grid_search(sorted(pending))},
        tune_config=tune.TuneConfig(max_concurrent_trials=max_concurrent),
        run_config=tune.RunConfig(name=name, storage_path=str(results_dir.resolve() / "ray_tune"), verbose=0),
    )
    grid = tuner.fit()
    if grid.errors:
        log.error("%d sweep trials failed: %s", len(grid.errors), [str(e)[:300] for e in grid.errors])


@dataclass
class SweepOutcome:
    results: list[TrialResult]
    trained: list[str]  # keys trained by this call (the rest were finished already)
    failed: list[str]  # keys with no result after this call


def run_sweep(
    cfg: ExperimentConfig,
    trials: Sequence[Trial],
    results_dir: str | os.PathLike,
    train_fn: TrainFn | None = None,
    use_ray: bool = True,
    cpus_per_trial: float = 0.5,
    max_concurrent: int | None = None,
    run_name: str = "sweep-lr",
) -> SweepOutcome:
    """Train every trial that has no result yet; return all results (finished ones read back from disk).

    `train_fn` (default: the trainer's `run_local`) maps a trial config to final metrics with
    `loss` and optionally `eval/loss`. With the real trainer the token shards are built once here,
    before the trials start, so concurrent trials never race to build them.
    """
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    keyed = [(trial, *trial_config(cfg, trial, results_dir)) for trial in trials]
    pending = {key: (trial, tcfg) for trial, key, tcfg in keyed if load_result(results_dir, key) is None}
    log.info("sweep: %d trials, %d finished already, %d to train", len(keyed), len(keyed) - len(pending), len(pending))
    if pending and train_fn is None:
        from services.trainer.data import prepare_shards, with_parquet_documents

        prepare_shards(with_parquet_documents(cfg), 0)
    if pending and use_ray:
        _run_with_tune(pending, results_dir, train_fn, cpus_per_trial, max_concurrent)
    elif pending:
        from tqdm import tqdm

        for key, (trial, tcfg) in tqdm(pending.items(), desc="sweep", dynamic_ncols=True):
            run_trial(tcfg.model_dump(mode="json"), key, trial.__dict__, str(results_dir), train_fn)
    results, failed = [], []
    for _, key, _ in keyed:
        res = load_result(results_dir, key)
        (results.append(res) if res is not None else failed.append(key))
    _track(cfg, results, run_name)
    return SweepOutcome(results, [k for k in pending if k not in failed], failed)


def _track(cfg: ExperimentConfig, results: list[TrialResult], name: str) -> None:
    """One tracker run per sweep call: each trial's final loss as a point, x = trial index."""
    run = tracking.init(config=cfg, name=name, tags=["sweep", "hparam"])
    for i, r in enumerate(sorted(results, key=lambda r: (r.tokens, not r.mup, r.width, r.lr))):
        run.log({"trial/loss": r.loss if math.isfinite(r.loss) else float("inf"), "trial/lr": r.lr,
                 "trial/width": r.width, "trial/mup": int(r.mup), "trial/tokens": r.tokens, "trial/seed": r.seed}, step=i)
    run.finish()
