"""`run_ablation`: prepare every arm, train arms × seeds on Ray, report, and show it in the tracker.

The ablation is one tracker run (tags `ablation`); every arm-seed's training run is its child
(`tracker.parent`), named `<arm>-s<seed>` and tagged `ablation:<name>` and `arm:<arm>`, so the
dashboard groups the arms under it and the compare view can pick an arm's seeds by tag; the
ablation run carries an event per finished, retried, failed or reused arm-seed, the verdicts as
events, the whole report as one `ablation_report` event (its page shows it), the comparison
figures as its summary, and the report files as artifacts.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from cluster.ablation.prepare import prepare
from cluster.ablation.report import build_report, write_report
from cluster.ablation.runs import Metrics, arm_seeds, run_all
from shared import tracking
from shared.config import ExperimentConfig, save_resolved


def _ray(cfg: ExperimentConfig):
    import ray

    if not ray.is_initialized():
        c = cfg.cluster
        ray.init(address=c.address, num_cpus=c.num_cpus, namespace=c.namespace, include_dashboard=False,
                 configure_logging=False, log_to_driver=False)
    return ray


def default_metrics(cfg: ExperimentConfig) -> Metrics | None:
    """The evaluation suite when `ablation.suite` (checked importable now), else None (eval loss only)."""
    a = cfg.ablation
    if not a.suite:
        return None
    from cluster.ablation.suite import SuiteMetrics, check_available

    check_available()
    return SuiteMetrics(a)


def json_safe(value: Any) -> Any:
    """`value` with every non-finite float as the tracker's string for it ("NaN", "Infinity",
    "-Infinity"): an interval on one seed or an undefined sd must not get the whole report refused."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def _figures(report: dict[str, Any]) -> dict[str, float]:
    out = {}
    for arm, per_metric in report["comparisons"].items():
        for m, c in per_metric.items():
            for k in ("mean", "ci_low", "ci_high"):
                if k in c and math.isfinite(c[k]):
                    out[re.sub(r"[^A-Za-z0-9_./-]", "_", f"ablation/{arm}/{m}/{k}")] = c[k]
    out["ablation/failed_runs"] = report["failed_runs"]
    return out


def run_ablation(cfg: ExperimentConfig, metrics: Metrics | None | str = "default", log=print,
                 check_only: bool = False) -> dict[str, Any]:
    """Prepare and check every arm (this alone with `check_only`), train arms × seeds, write the report."""
    if cfg.ablation is None:
        raise ValueError("the config has no `ablation` section: add arms, a baseline and eval_documents")
    a = cfg.ablation
    metric_fn = default_metrics(cfg) if metrics == "default" else metrics
    out = Path(a.out_dir)
    save_resolved(cfg, out)
    plans, prepared = prepare(cfg, log=log)
    prepared["arms"] = {p.name: p.report for p in plans}
    if check_only:
        return prepared
    seeds = list(range(a.first_seed, a.first_seed + a.seeds))
    run = tracking.init(config=cfg, name=f"{cfg.name}-ablation", tags=["ablation"])
    outer_parent = os.environ.pop("MOELAB_PARENT_RUN", None)

    def event(kind: str, message: str, **data: Any) -> None:
        log(f"ablation: {message}")
        run.event(kind, message, **data)

    try:
        _ray(cfg)
        items = arm_seeds(plans, seeds, run.id)
        event("ablation_start", f"{len(plans)} arms × {len(seeds)} seeds, {prepared['budget_tokens']:,} tokens each")
        results, failures = run_all(items, a.cpus_per_run, a.gpus_per_run, a.retries, metric_fn, on_event=event)
        report = build_report(cfg.name, a.baseline, [p.name for p in plans], seeds, results, failures, prepared)
        report["ablation_run"] = run.id
        paths = write_report(report, out)
        for line in report["verdicts"]:
            run.event("verdict", line)
        run.event("ablation_report", f"{len(plans)} arms × {len(seeds)} seeds against {a.baseline}: "
                  f"{len(report['verdicts'])} verdicts, {report['failed_runs']} failed runs", **json_safe(report))
        run.log(_figures(report), step=0)
        for kind, path in paths.items():
            run.artifact(str(path), kind=f"ablation_report_{kind}")
    except Exception as exc:
        run.event("warning", f"ablation failed: {str(exc)[:4000]}")
        run.finish(status="failed")
        raise
    finally:
        if outer_parent is not None:
            os.environ["MOELAB_PARENT_RUN"] = outer_parent
    run.finish()
    report["files"] = {k: str(v) for k, v in paths.items()}
    return report
