"""The whole data-to-model job: `ray job submit --working-dir . -- python -m cluster.pipeline CONFIG [overrides]`.

filter → oracle label → distill heads → calibrate → score → select + tokenize → train → summary,
and the data ablation as a last stage when `ablation.pipeline_stage` asks for it (cluster/ablation/stage.py).
One config drives every stage; each stage is content-addressed (cluster/stages.py), so a rerun
skips what is finished and a changed knob reruns only the stages that depend on it. Every stage
reports to the tracker under one pipeline run: each stage gets a child run (its duration, status
and figures; see StageRuns), and the runs a stage opens are children of that stage run (the id
travels as tracker.parent and MOELAB_PARENT_RUN), so the dashboard links a model run to the
exact data that trained it. The stages run on the Ray
the job was submitted to (a local Ray when started by hand).

Placement: each stage asks Ray for what it needs (filter and tokenize: CPUs; the vLLM oracle:
TP × replicas GPUs; scoring actors: `scorer.scoring.actor_gpus` of `actor_accelerator_type`;
training: Ray Train workers with `cluster.train_*` resources). Before a GPU stage starts its
request is checked against the alive GPU nodes and the declared `cluster.gpu_nodes`
(`shared.placement`), and training runs under Ray Train — never in this driver, which on a
cluster runs on the CPU-only head — unless one CPU worker would run on the only node anyway.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

from cluster.driver_threads import JOB_CONFIG_ENV, use_node_cpus
from cluster.stages import Stage, StageResult, StageRunner, file_fingerprints
from shared import tracking
from shared.config import ConfigError, ExperimentConfig, load_config, save_resolved
from shared.placement import check_gpu_request, config_gpu_requests, declared_nodes, live_gpu_nodes

EVAL_FRACTION = 0.02
HELD_OUT_RULE = "byte share per source, hash-order prefix"  # in the stage key: a new rule re-splits


def layout(cfg: ExperimentConfig) -> ExperimentConfig:
    """Point every stage's inputs and outputs inside `<train.out_dir>/pipeline/<name>/`."""
    root = Path(cfg.train.out_dir) / "pipeline" / cfg.name
    kept = root / "kept"
    return cfg.model_copy(update={
        "data": cfg.data.model_copy(update={"out_dir": str(root / "filtered")}),
        "scorer": cfg.scorer.model_copy(update={"out_dir": str(root / "scorer"), "inputs": []}),
        "mixture": cfg.mixture.model_copy(update={
            "documents": [str(kept / "train" / "*.parquet")],
            "eval_documents": [str(kept / "eval" / "*.parquet")],
            "shard_dir": str(root / "tokens"),
            "tokenizer": cfg.mixture.tokenizer.model_copy(update={"out_dir": str(root / "tokenizer")}),
        }),
        "train": cfg.train.model_copy(update={"out_dir": str(root / "train")}),
    })


def input_files(cfg: ExperimentConfig) -> list[str]:
    files = sorted({p for src in cfg.data.inputs for pat in src.paths for p in glob.glob(pat, recursive=True)})
    if not files:
        raise FileNotFoundError("data.inputs match no file; check the paths in the config")
    return files


def _ray(cfg: ExperimentConfig):
    import ray

    if not ray.is_initialized():
        ray.init(address=cfg.cluster.address, num_cpus=cfg.cluster.num_cpus, namespace=cfg.cluster.namespace,
                 include_dashboard=False, configure_logging=False, log_to_driver=False)
    return ray


def check_placement(cfg: ExperimentConfig, prefix: str) -> None:
    """Refuse, before the stage starts, a GPU request (fields under `prefix`) that neither an alive
    node nor a declared `cluster.gpu_nodes` group can hold."""
    requests = [r for r in config_gpu_requests(cfg) if r.what.startswith(prefix)]
    if requests:
        _ray(cfg)
        nodes = live_gpu_nodes() + declared_nodes(cfg.cluster.gpu_nodes)
        for request in requests:
            check_gpu_request(request, nodes)


def trains_under_ray(cfg: ExperimentConfig) -> bool:
    """Ray Train workers, unless one CPU worker would run on this (the only) node anyway."""
    import ray

    from services.trainer.launch import wants_gpu_workers

    if cfg.train.workers > 1 or cfg.cluster.address or cfg.cluster.train_gpus_per_worker:
        return True
    if not ray.is_initialized():  # no Ray in this process (no Ray stage ran): this machine trains
        return False
    return wants_gpu_workers(cfg) or sum(1 for n in ray.nodes() if n["Alive"]) > 1


def _placed(cfg: ExperimentConfig, prefix: str, run):
    def checked() -> dict[str, Any]:
        check_placement(cfg, prefix)
        return run()

    return checked


def build_stages(cfg: ExperimentConfig) -> list[Stage]:
    from cluster.ablation.stage import ablation_stage
    from cluster.select import select_kept
    from services.data_filter.pipeline import run as run_filter
    from services.scorer.heads import HEADS_VERSION
    from services.scorer.pipeline import calibrate_stage, label_stage, train_stage
    from services.scorer.scoring import run_scoring
    from services.trainer.launch import run_local, run_ray
    from shared.data.prepare import tokenize
    from shared.data.stage_outputs import declared_outputs

    root = Path(cfg.train.out_dir).parent
    scorer_out = Path(cfg.scorer.out_dir)
    j = lambda m: m.model_dump(mode="json")  # noqa: E731
    filtered = lambda: [str(p) for p in declared_outputs(cfg.data.out_dir)]  # noqa: E731  (the manifest, not a glob)

    def train() -> dict[str, Any]:
        return run_ray(cfg) if trains_under_ray(cfg) else run_local(cfg)

    def select_and_tokenize() -> dict[str, Any]:
        selected = select_kept(scorer_out / "scores", root / "kept", EVAL_FRACTION)
        manifest = tokenize(cfg, progress=True)
        return {"selected": selected, "tokens": {k: manifest.get(k) for k in ("tokens", "docs", "sources")
                                                 if k in manifest}}

    stages = [
        Stage("filter", lambda: run_filter(cfg.data, experiment=cfg), j(cfg.data),
              outputs=(Path(cfg.data.out_dir),), extra_key=file_fingerprints(input_files(cfg))),
        Stage("label", _placed(cfg, "scorer.oracle", lambda: label_stage(cfg)), j(cfg.scorer.oracle), after=("filter",),
              outputs=(scorer_out / "labels.parquet",)),
        Stage("distill", lambda: train_stage(cfg),
              {"heads": j(cfg.scorer.heads), "heads_version": HEADS_VERSION, "backbone": cfg.scorer.backbone,
               "layers": [cfg.scorer.probe_layer, cfg.scorer.judge_layer]}, after=("label",)),
        Stage("calibrate", lambda: calibrate_stage(cfg), j(cfg.scorer.calibration), after=("distill",)),
        Stage("score", _placed(cfg, "scorer.scoring", lambda: run_scoring(cfg, filtered())), j(cfg.scorer.scoring),
              after=("calibrate",),
              outputs=(scorer_out / "scores",)),
        Stage("tokenize", select_and_tokenize, {"mixture": j(cfg.mixture), "eval_fraction": EVAL_FRACTION,
                                                  "held_out": HELD_OUT_RULE},
              after=("score",), outputs=(root / "kept", Path(cfg.mixture.shard_dir),
                                         Path(cfg.mixture.shard_dir + "-eval"), Path(cfg.mixture.tokenizer.out_dir))),
        Stage("train", _placed(cfg, "train", train), {"model": j(cfg.model), "optim": j(cfg.optim), "train": j(cfg.train)},
              after=("tokenize",), outputs=(Path(cfg.train.out_dir),)),
    ]
    ablation = ablation_stage(cfg, root)  # optional: `ablation.pipeline_stage`, after the data stages
    return stages if ablation is None else [*stages, ablation]


def summarize(results: dict[str, StageResult]) -> dict[str, Any]:
    """The numbers a user wants at the end: documents per stage, keep rates, tokens, losses, MFU."""
    r = {name: res.report for name, res in results.items()}
    filt, score, tok, train = r.get("filter", {}), r.get("score", {}), r.get("tokenize", {}), r.get("train", {})
    calib = r.get("calibrate", {})
    return {
        # Both heads: the Probe (a cheap early-exit read) can agree with the oracle better than the Judge.
        "scorer": {"held_out_spearman": {name: {head: rub.get("spearman_quality", {}).get(head) for head in ("probe", "judge")}
                                         for name, rub in calib.get("rubrics", {}).items()},
                   "flops_saved": calib.get("compute", {}).get("flops_saved"),
                   "judge_passes_skipped": score.get("judge_passes_skipped"),
                   "read_fraction": score.get("read_fraction_mean")},
        "documents": {"raw": filt.get("records"), "after_filter": filt.get("written"),
                      "scored": tok.get("selected", {}).get("scored"), "kept": tok.get("selected", {}).get("kept")},
        "keep_rate": score.get("keep_rate"),
        "sources": tok.get("selected", {}).get("sources"),
        "tokens": tok.get("tokens"),
        "train": {k: train.get(k) for k in ("loss", "eval/loss", "tokens_per_s", "mfu", "steps", "run_id")},
        "stages": {n: {"seconds": round(res.seconds, 1), "skipped": res.skipped} for n, res in results.items()},
        "ablation": {k: r["ablation"].get(k) for k in ("verdicts", "failed_runs", "files")} if "ablation" in r else None,
    }


def stage_figures(report: dict[str, Any], prefix: str = "", depth: int = 0) -> dict[str, float]:
    """A stage report's numbers (nested dicts to `a/b` keys, two levels deep) as tracker scalars."""
    out: dict[str, float] = {}
    for k, v in report.items():
        key = prefix + re.sub(r"[^A-Za-z0-9_.\-/:@%+=\[\] ]", "_", str(k))
        if isinstance(v, dict) and depth < 2:
            out.update(stage_figures(v, key + "/", depth + 1))
        elif isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            out[key[:200]] = v
    return out


class StageRuns:
    """One tracker run per stage, a child of the pipeline run, opened when the stage starts (so its
    duration is the stage's own) and finished with the stage report's figures. While a stage runs,
    runs its code opens (the data filter's funnel, the scorer's reports, the training run) are
    children of its stage run, through the config (which travels to Ray workers) and the env."""

    def __init__(self, cfg: ExperimentConfig, pipeline_id: str):
        self.cfg, self.pipeline_id, self.current = cfg, pipeline_id, None

    def _open(self, name: str, tags: list[str]):
        return tracking.init(config=self.cfg, name=f"{self.cfg.name}-{name}", tags=["stage", name, *tags],
                             parent=self.pipeline_id)

    def _parent(self, run_id: str) -> None:
        self.cfg.tracker.parent = run_id  # the stages' closures read this config object
        os.environ["MOELAB_PARENT_RUN"] = run_id

    def start(self, name: str) -> None:
        self.current = self._open(name, [])
        self._parent(self.current.id)

    def done(self, res: StageResult) -> None:
        run = self._open(res.name, ["skipped"]) if res.skipped else self.current
        run.log({**stage_figures(res.report or {}), "seconds": res.seconds}, step=0)
        run.finish()
        self.current = None
        self._parent(self.pipeline_id)

    def failed(self) -> None:
        if self.current is not None:
            self.current.finish(status="failed")
            self.current = None
        self._parent(self.pipeline_id)


def run_pipeline(cfg: ExperimentConfig, log=print) -> dict[str, Any]:
    cfg = layout(cfg)
    root = Path(cfg.train.out_dir).parent
    save_resolved(cfg, root)
    outer_parent = os.environ.pop("MOELAB_PARENT_RUN", None)
    try:
        return _run_stages(cfg, root, log)
    finally:  # the caller's environment as it was: a later run in this process is no stage's child
        os.environ.pop("MOELAB_PARENT_RUN", None)
        if outer_parent is not None:
            os.environ["MOELAB_PARENT_RUN"] = outer_parent


def _run_stages(cfg: ExperimentConfig, root: Path, log) -> dict[str, Any]:
    run = tracking.init(config=cfg, name=f"{cfg.name}-pipeline", tags=["pipeline"])
    # every stage's runs are children of this one: through the config (it travels to Ray workers)
    # and the environment (for code that reports without a config)
    cfg = cfg.model_copy(update={"tracker": cfg.tracker.model_copy(update={"parent": run.id})})
    os.environ["MOELAB_PARENT_RUN"] = run.id
    stage_runs = StageRuns(cfg, run.id)

    def started(name: str) -> None:
        log(f"== {name}: running")
        run.event("stage_start", f"{name} started", stage=name)
        stage_runs.start(name)

    def done(res: StageResult) -> None:
        state = "skipped (inputs and config unchanged)" if res.skipped else f"done in {res.seconds:.1f}s"
        log(f"== {res.name}: {state}")
        run.event("stage_summary", f"{res.name} {state}", stage=res.name, skipped=res.skipped,
                  seconds=res.seconds, key=res.key[:12])
        stage_runs.done(res)

    runner = StageRunner(root, on_start=started, on_done=done)
    try:
        for stage in build_stages(cfg):
            runner.run(stage)
    except Exception as exc:
        stage_runs.failed()
        run.event("warning", f"pipeline failed: {str(exc)[:4000]}")
        run.finish(status="failed")
        raise
    summary = summarize(runner.results)
    run.log({"pipeline/kept_docs": summary["documents"]["kept"] or 0}, step=0)
    run.finish()
    summary["pipeline_run"] = run.id
    return summary


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    try:
        cfg = load_config(args[0], args[1:])
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    if JOB_CONFIG_ENV in os.environ:  # a Ray job's entrypoint: Ray is reachable, OMP_NUM_THREADS is Ray's
        threads = use_node_cpus(_ray(cfg))
        if threads:
            print(f"driver: torch uses {threads} threads (this node's Ray CPUs; the job started with OMP_NUM_THREADS=1)")
    summary = run_pipeline(cfg)
    print(json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
