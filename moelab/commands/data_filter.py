"""`moelab data filter CONFIG` and `moelab data inspect OUT_DIR`: run the data filter, read its results."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import typer

from moelab.commands.common import CONFIG_ARG, OVERRIDES_ARG, load_or_exit


def register_data(group: typer.Typer) -> None:
    @group.command("filter")
    def filter_cmd(
        config: str = CONFIG_ARG,
        overrides: list[str] = OVERRIDES_ARG,
        out: str = typer.Option(None, "--out", help="Output directory (default: data.out_dir)."),
        workers: int = typer.Option(None, "--workers", help="Ray actors (0 = in-process, no Ray)."),
        address: str = typer.Option(None, "--address", help="Connect to this Ray cluster instead of a local Ray."),
        submit: str = typer.Option(None, "--submit", help="Submit as a Ray job to this dashboard address and return."),
    ) -> None:
        """Filter, dedup and shard `data.inputs` (local Ray by default), with a progress bar."""
        cfg = load_or_exit(config, overrides)
        if submit:
            from ray.job_submission import JobSubmissionClient

            args = ["moelab", "data", "filter", config, *(overrides or [])] + (["--out", out] if out else [])
            job = JobSubmissionClient(submit).submit_job(entrypoint=shlex.join(args), runtime_env={"working_dir": "."})
            typer.echo(f"submitted Ray job {job} to {submit}")
            return
        if workers is not None:
            cfg.data.filter.workers = workers
        if address:
            cfg.data.filter.ray_address = address
        if not cfg.data.inputs:
            typer.secho("data.inputs is empty: nothing to filter (add sources to the recipe)", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2)
        from tqdm import tqdm

        from services.data_filter.pipeline import run
        from services.data_filter.rerun import RunMismatch

        bar = tqdm(desc="filter units", unit="unit")

        def progress(done: int | None, total: int) -> None:
            bar.total = total
            if done is None:
                bar.update(1)
            else:
                bar.n = done
                bar.refresh()

        try:
            stats = run(cfg.data, out, progress, experiment=cfg)
        except (RunMismatch, FileNotFoundError, ValueError) as exc:
            bar.close()
            typer.secho(str(exc), fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2) from None
        bar.close()
        typer.echo(format_funnel(stats))
        typer.echo(f"output: {Path(out or cfg.data.out_dir)} ({stats['tracker']})")

    @group.command("inspect")
    def inspect_cmd(
        out_dir: str = typer.Argument(..., help="A data filter output directory."),
        reason: str = typer.Option(None, "--reason", help="Show removed samples of this reason (e.g. c4:curly_bracket)."),
        source: str = typer.Option(None, "--source", help="Only this input source: its removals, bytes and samples."),
        flagged: bool = typer.Option(False, "--flagged", help="Show written documents kept with a layout or edit flag, and how far they failed."),
        n: int = typer.Option(3, "-n", help="Samples to show per reason."),
        rejects: bool = typer.Option(False, "--rejects", help="List rejected input lines instead."),
        chars: int = typer.Option(300, "--chars", help="Characters of each sample to print."),
    ) -> None:
        """Print the funnel, removals and bytes per source, and samples of removed (or flagged-and-kept) documents."""
        from moelab.commands.data_inspect import (
            describe_how_far,
            flagged_kept,
            format_sources,
            removed_samples,
        )

        root = Path(out_dir)
        stats_file = root / "stats.json"
        if not stats_file.is_file():
            typer.secho(f"{stats_file} not found: run `moelab data filter` first", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2)
        stats = json.loads(stats_file.read_text())
        if rejects:
            for line in (root / "rejects.jsonl").read_text(encoding="utf-8").splitlines():
                r = json.loads(line)
                typer.echo(f"{r['path']}:{r['line']}  {r['reason']}  {r['detail'][:80]}")
            return
        if source is None:
            typer.echo(format_funnel(stats))
        try:
            typer.echo(format_sources(stats, source))
        except KeyError as exc:
            typer.secho(str(exc.args[0]), fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2) from None
        if flagged:
            for r in flagged_kept(root, source, reason, n):
                typer.echo(f"\n--- kept, flagged {r['tag']}  id={r['id']}  source={r['source']}  {describe_how_far(r)}")
                typer.echo(r["text"][:chars])
            return
        for s in removed_samples(root, source, reason, n):
            typer.echo(f"\n--- {s['tag']}  id={s['id']}  source={s['source']}")
            typer.echo(s["text"][:chars])


def format_funnel(stats: dict) -> str:
    lines = ["funnel: " + " -> ".join(f"{f['stage']} {f['docs']}" for f in stats["funnel"])]
    if stats["rejected"]:
        lines.append("rejected: " + ", ".join(f"{k} {v}" for k, v in stats["rejected"].items()))
    for kind, stages in stats["chains"].items():
        lines.append(f"chain {kind}:")
        for st in stages:
            why = ", ".join(f"{k} {v}" for k, v in st["removed"].items()) or "-"
            lines.append(f"  {st['name']:<15} in {st['in']:>8}  kept {st['kept']:>8}  {st['seconds']:8.2f}s  removed: {why}")
            if st.get("skipped"):
                lines.append(f"  {'':<15} skipped (counted, not removed): "
                             + ", ".join(f"{k} {v}" for k, v in st["skipped"].items()))
            if st.get("flagged"):
                what = "reviewed (kept unless removed above)" if st["name"] == "perplexity" else "flagged for review"
                lines.append(f"  {'':<15} {what}: " + ", ".join(f"{k} {v}" for k, v in st["flagged"].items()))
    for source, d in stats.get("sources", {}).items():
        if "funnel" in d:
            lines.append(f"source {source}: " + " -> ".join(f"{f['stage']} {f['docs']}" for f in d["funnel"]))
    lines.append(f"near duplicates: {stats['near_duplicates']}  written: {stats['written']}")
    if "ids" in stats:
        from moelab.commands.data_inspect import describe_ids

        lines.append(describe_ids(stats["ids"]))
    return "\n".join(lines)
