"""The whole data-to-model job: `ray job submit --working-dir . -- python -m cluster.pipeline CONFIG [overrides]`.

filter → oracle label → distill heads → calibrate → score → select + tokenize → train → summary.
One config drives every stage; each stage is content-addressed (cluster/stages.py), so a rerun
skips what is finished and a changed knob reruns only the stages that depend on it. Every stage
reports to the tracker as a child of one pipeline run (its id is exported as MOELAB_PARENT_RUN),
so the dashboard links a model run to the exact data that trained it. The stages run on the Ray
the job was submitted to (a local Ray when started by hand).
"""

from __future__ import annotations

import glob
import json
import os
import sys
from pathlib import Path
from typing import Any

from cluster.stages import Stage, StageResult, StageRunner, file_fingerprints
from shared import tracking
from shared.config import ConfigError, ExperimentConfig, load_config, save_resolved

EVAL_FRACTION = 0.02


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


def build_stages(cfg: ExperimentConfig) -> list[Stage]:
    from cluster.select import select_kept
    from services.data_filter.pipeline import run as run_filter
    from services.scorer.heads import HEADS_VERSION
    from services.scorer.pipeline import calibrate_stage, label_stage, train_stage
    from services.scorer.scoring import run_scoring
    from services.trainer.launch import run_local, run_ray
    from shared.data.prepare import tokenize

    root = Path(cfg.train.out_dir).parent
    scorer_out = Path(cfg.scorer.out_dir)
    j = lambda m: m.model_dump(mode="json")  # noqa: E731
    filtered = lambda: sorted(glob.glob(str(Path(cfg.data.out_dir) / "*.parquet")))  # noqa: E731

    def train() -> dict[str, Any]:
        return run_ray(cfg) if cfg.train.workers > 1 or cfg.cluster.address else run_local(cfg)

    def select_and_tokenize() -> dict[str, Any]:
        selected = select_kept(str(scorer_out / "scores" / "*.parquet"), root / "kept", EVAL_FRACTION)
        manifest = tokenize(cfg, progress=True)
        return {"selected": selected, "tokens": {k: manifest.get(k) for k in ("tokens", "docs", "sources")
                                                 if k in manifest}}

    return [
        Stage("filter", lambda: run_filter(cfg.data, experiment=cfg), j(cfg.data),
              outputs=(Path(cfg.data.out_dir),), extra_key=file_fingerprints(input_files(cfg))),
        Stage("label", lambda: label_stage(cfg), j(cfg.scorer.oracle), after=("filter",),
              outputs=(scorer_out / "labels.parquet",)),
        Stage("distill", lambda: train_stage(cfg),
              {"heads": j(cfg.scorer.heads), "heads_version": HEADS_VERSION, "backbone": cfg.scorer.backbone,
               "layers": [cfg.scorer.probe_layer, cfg.scorer.judge_layer]}, after=("label",)),
        Stage("calibrate", lambda: calibrate_stage(cfg), j(cfg.scorer.calibration), after=("distill",)),
        Stage("score", lambda: run_scoring(cfg, filtered()), j(cfg.scorer.scoring), after=("calibrate",),
              outputs=(scorer_out / "scores",)),
        Stage("tokenize", select_and_tokenize, {"mixture": j(cfg.mixture), "eval_fraction": EVAL_FRACTION},
              after=("score",), outputs=(root / "kept", Path(cfg.mixture.shard_dir),
                                         Path(cfg.mixture.shard_dir + "-eval"), Path(cfg.mixture.tokenizer.out_dir))),
        Stage("train", train, {"model": j(cfg.model), "optim": j(cfg.optim), "train": j(cfg.train)},
              after=("tokenize",), outputs=(Path(cfg.train.out_dir),)),
    ]


def summarize(results: dict[str, StageResult]) -> dict[str, Any]:
    """The numbers a user wants at the end: documents per stage, keep rates, tokens, losses, MFU."""
    r = {name: res.report for name, res in results.items()}
    filt, score, tok, train = r.get("filter", {}), r.get("score", {}), r.get("tokenize", {}), r.get("train", {})
    calib = r.get("calibrate", {})
    return {
        "scorer": {"held_out_spearman": {name: rub.get("spearman_quality", {}).get("judge")
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
    }


def run_pipeline(cfg: ExperimentConfig, log=print) -> dict[str, Any]:
    cfg = layout(cfg)
    root = Path(cfg.train.out_dir).parent
    save_resolved(cfg, root)
    os.environ.pop("MOELAB_PARENT_RUN", None)
    run = tracking.init(config=cfg, name=f"{cfg.name}-pipeline", tags=["pipeline"])
    # every stage's runs are children of this one: through the config (it travels to Ray workers)
    # and the environment (for code that reports without a config)
    cfg = cfg.model_copy(update={"tracker": cfg.tracker.model_copy(update={"parent": run.id})})
    os.environ["MOELAB_PARENT_RUN"] = run.id

    def started(name: str) -> None:
        log(f"== {name}: running")
        run.event("stage_start", f"{name} started", stage=name)

    def done(res: StageResult) -> None:
        state = "skipped (inputs and config unchanged)" if res.skipped else f"done in {res.seconds:.1f}s"
        log(f"== {res.name}: {state}")
        run.event("stage_summary", f"{res.name} {state}", stage=res.name, skipped=res.skipped,
                  seconds=res.seconds, key=res.key[:12])

    runner = StageRunner(root, on_start=started, on_done=done)
    try:
        for stage in build_stages(cfg):
            runner.run(stage)
    except Exception as exc:
        run.event("warning", f"pipeline failed: {exc}")
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
    summary = run_pipeline(cfg)
    print(json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
