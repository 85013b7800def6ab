"""The ablation's report: per arm and metric mean ± sd over seeds, each arm against the baseline as a
paired difference with a Student-t 95% interval, and a verdict per metric; as JSON, Markdown and PNG.

A metric's direction comes from its name: losses and bits per byte (`loss`, `bpb`, `nats`,
`nll`, `perplexity` in the name) are better lower, everything else (accuracies, log-probabilities of the
correct answer) better higher.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from shared.data.atomic import atomic_write_bytes
from shared.stats import compare_paired, mean_sd, verdict_line

LOWER_IS_BETTER = ("loss", "bpb", "nats", "nll", "perplexity")


def higher_is_better(metric: str) -> bool:
    return not any(word in metric.lower() for word in LOWER_IS_BETTER)


def build_report(name: str, baseline: str, arms: list[str], seeds: list[int], results: dict, failures: dict,
                 prepared: dict[str, Any]) -> dict[str, Any]:
    """Everything the ablation measured, in one JSON-able dict (see the module docstring)."""
    per_arm: dict[str, dict] = {}
    metrics = sorted({m for r in results.values() for m in r["metrics"]})
    for arm in arms:
        runs = {seed: results[(arm, seed)] for seed in seeds if (arm, seed) in results}
        summary = {}
        for m in metrics:
            values = [r["metrics"][m] for r in runs.values() if m in r["metrics"]]
            if values:
                mean, sd = mean_sd(values)
                summary[m] = {"mean": mean, "sd": sd, "n": len(values)}
        per_arm[arm] = {
            **prepared.get("arms", {}).get(arm, {}),
            "metrics": summary,
            "runs": {str(seed): {"metrics": r["metrics"], "node": r.get("node"), "run_id": r.get("run_id"),
                                 "skipped": r.get("skipped", False), "attempts": r.get("attempts")}
                     for seed, r in runs.items()},
            "failed": {str(seed): failures[(arm, seed)] for seed in seeds if (arm, seed) in failures},
        }
    comparisons: dict[str, dict] = {}
    verdicts: list[str] = []
    for arm in arms:
        if arm == baseline:
            continue
        comparisons[arm] = {}
        for m in metrics:
            mine = {s: results[(arm, s)]["metrics"][m] for s in seeds if m in results.get((arm, s), {}).get("metrics", {})}
            base = {s: results[(baseline, s)]["metrics"][m] for s in seeds
                    if m in results.get((baseline, s), {}).get("metrics", {})}
            try:
                comp = compare_paired(mine, base)
            except ValueError as exc:
                comparisons[arm][m] = {"error": str(exc)}
                verdicts.append(f"{arm} vs {baseline} on {m}: not compared ({exc})")
                continue
            line = verdict_line(m, arm, baseline, comp, higher_is_better(m))
            comparisons[arm][m] = {**comp.as_dict(), "higher_is_better": higher_is_better(m),
                                   "excludes_zero": comp.excludes_zero, "verdict": line}
            verdicts.append(line)
    return {"name": name, "baseline": baseline, "arms_order": arms, "seeds": seeds, "metrics": metrics,
            **{k: v for k, v in prepared.items() if k != "arms"}, "arms": per_arm, "comparisons": comparisons,
            "verdicts": verdicts, "failed_runs": sum(len(a["failed"]) for a in per_arm.values())}


def markdown(report: dict[str, Any]) -> str:
    arms, metrics = report["arms_order"], report["metrics"]
    lines = [f"# Ablation `{report['name']}`", "",
             f"Baseline arm: **{report['baseline']}**; seeds {report['seeds']}; token budget "
             f"{report.get('budget_tokens', 0):,} per run; one tokenizer for every arm.", "",
             "## Verdicts", "", *[f"- {v}" for v in report["verdicts"]], "",
             "## Arms (mean ± sd over seeds)", "",
             "| arm | documents | tokens | " + " | ".join(metrics) + " |",
             "|---|---:|---:|" + "---:|" * len(metrics)]
    for arm in arms:
        a = report["arms"][arm]
        cells = [f"{a['metrics'][m]['mean']:.4f} ± {a['metrics'][m]['sd']:.4f}" if m in a["metrics"] else "—"
                 for m in metrics]
        docs = a.get("documents", {}).get("written", "")
        lines.append(f"| {arm} | {docs} | {a.get('tokens', ''):,} | " + " | ".join(cells) + " |")
    lines += ["", f"## Against {report['baseline']} (arm − baseline, paired by seed, Student-t 95% interval)", "",
              "| arm | metric | mean difference | interval | seeds |", "|---|---|---:|---|---:|"]
    for arm, per_metric in report["comparisons"].items():
        for m, c in per_metric.items():
            if "error" in c:
                lines.append(f"| {arm} | {m} | — | {c['error']} | 0 |")
            else:
                lines.append(f"| {arm} | {m} | {c['mean']:+.4f} | [{c['ci_low']:+.4f}, {c['ci_high']:+.4f}] | "
                             f"{len(c['seeds'])} |")
    failed = [(arm, s, e) for arm in arms for s, e in report["arms"][arm]["failed"].items()]
    if failed:
        lines += ["", "## Failed runs (retried, then left out of the comparison)", ""]
        lines += [f"- {arm} seed {s}: {e}" for arm, s, e in failed]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    """One panel per metric: every seed's value per arm (points) and the arm's mean (bar)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics, arms = report["metrics"], report["arms_order"]
    fig, axes = plt.subplots(1, max(1, len(metrics)), figsize=(3.2 * max(1, len(metrics)), 3.2), squeeze=False)
    for ax, m in zip(axes[0], metrics, strict=False):
        for i, arm in enumerate(arms):
            a = report["arms"][arm]
            values = [v for r in a["runs"].values() if math.isfinite(v := r["metrics"].get(m, math.nan))]
            if values:
                ax.bar(i, sum(values) / len(values), color="#c8d7e8", width=0.6)
                ax.scatter([i] * len(values), values, color="#1f4e79", s=14, zorder=3)
        ax.set_xticks(range(len(arms)), arms, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{m} ({'higher' if higher_is_better(m) else 'lower'} is better)", fontsize=8)
        # a metric a run could not measure (NaN) is left off the plot, not allowed to break it
        values = [v for a in report["arms"].values() for r in a["runs"].values()
                  if math.isfinite(v := r["metrics"].get(m, math.nan))]
        if values:
            lo, hi = min(values), max(values)
            pad = (hi - lo) * 0.3 or abs(hi) * 0.01 or 0.01
            ax.set_ylim(lo - pad, hi + pad)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def write_report(report: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """report.json, report.md and report.png under `out_dir`, each written atomically."""
    paths = {"json": out_dir / "report.json", "markdown": out_dir / "report.md", "png": out_dir / "report.png"}
    atomic_write_bytes(paths["json"], (json.dumps(report, indent=2, default=str) + "\n").encode())
    atomic_write_bytes(paths["markdown"], markdown(report).encode())
    plot(report, paths["png"])
    return paths
