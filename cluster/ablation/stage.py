"""The ablation as the pipeline's optional last stage (`ablation.pipeline_stage: true`).

It comes after the data stages because its arms usually name what they made (the filtered set,
the scorer's scored set, the kept set). Its key is the ablation section, the proxy it trains
(model, optimizer, schedule, tokenizer settings), the key of the tokenize stage (so any change to
the data before it reruns it) and the fingerprints of the arm and held-out files that live outside
the pipeline's folder (raw inputs, reference text), which no other stage's key covers. A rerun
with the same key skips the stage; one that reruns still reuses every arm-seed whose config and
data are unchanged (runs.py), so only what changed trains again.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

from cluster.stages import Stage, file_fingerprints
from shared.config import ExperimentConfig

# the trainer's fields that say where a run is written, not what it computes
_WHERE = {"out_dir", "run_name"}


def _outside_files(cfg: ExperimentConfig, pipeline_root: Path) -> list[str]:
    """Files the arms and held-out set name that the pipeline did not make (inside its root: covered by
    the upstream stage keys, and possibly not made yet when the stages are built)."""
    a = cfg.ablation
    root = pipeline_root.resolve()
    patterns = [*a.eval_documents, *(p for arm in a.arms for p in arm.documents)]
    patterns += [str(Path(arm.scores) / "manifest.json") for arm in a.arms if arm.scores]
    files = {f for p in patterns for f in glob.glob(p, recursive=True) if Path(f).is_file()}
    return sorted(f for f in files if not Path(f).resolve().is_relative_to(root))


def stage_report(report: dict[str, Any]) -> dict[str, Any]:
    """What the pipeline keeps of the ablation's report: verdicts, where the full report is, and each
    comparison's mean and interval (the full report, with every run, stays in its own files)."""
    keep = ("mean", "ci_low", "ci_high", "excludes_zero")
    return {
        "verdicts": report["verdicts"], "failed_runs": report["failed_runs"], "files": report.get("files", {}),
        "ablation_run": report.get("ablation_run"), "budget_tokens": report.get("budget_tokens"),
        "comparisons": {arm: {m: {k: c[k] for k in keep if k in c} for m, c in per.items()}
                        for arm, per in report["comparisons"].items()},
    }


def ablation_stage(cfg: ExperimentConfig, pipeline_root: Path) -> Stage | None:
    """The pipeline's ablation stage, or None when the config has no ablation or does not ask for the stage."""
    a = cfg.ablation
    if a is None or not a.pipeline_stage:
        return None

    def run() -> dict[str, Any]:
        from cluster.ablation import run_ablation

        return stage_report(run_ablation(cfg))

    j = lambda m, **kw: m.model_dump(mode="json", **kw)  # noqa: E731
    config = {"name": cfg.name, "ablation": j(a), "model": j(cfg.model), "optim": j(cfg.optim),
              "train": j(cfg.train, exclude=_WHERE), "tokenizer": j(cfg.mixture.tokenizer, exclude={"out_dir", "path"}),
              "data": j(cfg.data, exclude={"out_dir"})}
    return Stage("ablation", run, config, after=("tokenize",),
                 extra_key=file_fingerprints(_outside_files(cfg, pipeline_root)))
