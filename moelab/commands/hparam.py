"""Hyper-parameter transfer: `moelab mup check`, `moelab sweep lr`, `moelab lr-predict`.

The workflow for predicting a large run's LR from small proxies (services/trainer/hparam):
check that muP keeps coordinates flat across width, confirm on a width sweep that the optimal LR
transfers, then fit the optimal LR against the token budget and extrapolate it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from moelab.commands.common import CONFIG_ARG, OVERRIDES_ARG, load_or_exit

CORPUS_OPT = typer.Option(
    False, "--pydoc-corpus", help="Train on Python's reference manual (pydoc_data), written under OUT/corpus (CPU examples)."
)


def _numbers(text: str, what: str, kind=float) -> list:
    try:
        values = [kind(float(v)) if kind is int else kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(f"{what} must be comma-separated numbers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise typer.BadParameter(f"{what} must be positive numbers, got {text!r}")
    return sorted(set(values))


def _modes(text: str) -> list[bool]:
    names = {"mup": True, "sp": False}
    picked = [v.strip().lower() for v in text.split(",") if v.strip()]
    bad = [p for p in picked if p not in names]
    if bad or not picked:
        raise typer.BadParameter(f"--modes takes mup and/or sp (comma-separated), got {text!r}")
    return [names[p] for p in dict.fromkeys(picked)]


def _load(config: str, overrides: list[str] | None, out: Path, corpus: bool):
    extra: list[str] = []
    if corpus:
        from services.trainer.hparam.corpus import pydoc_corpus_overrides

        extra = pydoc_corpus_overrides(out / "corpus")
    return load_or_exit(config, [*extra, *(overrides or [])])


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _init_ray(cfg) -> None:
    import ray

    if not ray.is_initialized():
        ray.init(address=cfg.cluster.address, num_cpus=cfg.cluster.num_cpus, namespace=cfg.cluster.namespace,
                 include_dashboard=False, configure_logging=False, log_to_driver=False)


def register(app: typer.Typer) -> None:
    mup_group = typer.Typer(help="muP checks.", no_args_is_help=True)
    sweep_group = typer.Typer(help="Hyper-parameter sweeps over small proxies (Ray Tune).", no_args_is_help=True)

    @mup_group.command("check", context_settings={"allow_interspersed_args": True})
    def mup_check(
        config: str = CONFIG_ARG,
        overrides: list[str] = OVERRIDES_ARG,
        widths: str = typer.Option("64,128,256,512,1024", "--widths", help="Comma-separated widths (multiples of the head width)."),
        steps: int = typer.Option(3, "--steps", min=1, help="Optimizer steps recorded per width."),
        modes: str = typer.Option("mup,sp", "--modes", help="Parameterisations: mup and/or sp."),
        optimizers: str = typer.Option("adamw,muon_adamw", "--optimizers", help="Optimizers: adamw and/or muon_adamw."),
        seeds: int = typer.Option(3, "--seeds", min=1, help="Runs (init and data) averaged per point."),
        micro_batch: int = typer.Option(1, "--micro-batch", min=1, help="Sequences per step (muP's limit: few tokens vs width)."),
        seq_len: int = typer.Option(8, "--seq-len", min=8, help="Tokens per sequence."),
        lr: float = typer.Option(3e-3, "--lr", min=1e-8, help="Constant LR of the check (small: one update's scaling, not the recipe's)."),
        out: Path = typer.Option(Path("runs/hparam/coord_check"), "--out", help="Folder for the PNG, tables and records."),
        corpus: bool = CORPUS_OPT,
    ) -> None:
        """Coordinate check: each matrix's ΔW·x on its input at init, and each block's contribution, across widths (muP vs SP)."""
        cfg = _load(config, overrides, out, corpus)
        from services.trainer.hparam.coord_check import (
            coord_check,
            coord_table,
            summary_by_step,
            summary_table,
        )
        from services.trainer.hparam.plots import plot_coord_check

        picked = [o.strip() for o in optimizers.split(",") if o.strip()]
        try:
            records = coord_check(cfg, _numbers(widths, "--widths", int), steps, _modes(modes), picked, seeds,
                                  micro_batch, seq_len, lr)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        summary, table = summary_table(records), coord_table(records)
        _write_text(out / "coord_check.md", "## hidden matrices, ΔW·x growth exponents\n\n" + summary
                    + "\n\n## the same, step by step\n\n" + summary_by_step(records)
                    + "\n\n## every row\n\n" + table + "\n")
        _write_text(out / "coord_check.json", json.dumps([r.__dict__ for r in records]))
        png = plot_coord_check(records, out / "coord_check.png")
        typer.echo(summary)
        typer.echo(f"\nplot: {png}\ntable: {out / 'coord_check.md'}")

    @sweep_group.command("lr", context_settings={"allow_interspersed_args": True})
    def sweep_lr(
        config: str = CONFIG_ARG,
        overrides: list[str] = OVERRIDES_ARG,
        widths: str = typer.Option(..., "--widths", help="Comma-separated widths, e.g. 32,64,128."),
        lrs: str = typer.Option(..., "--lrs", help="Comma-separated peak LRs, e.g. 1e-3,3e-3,1e-2."),
        modes: str = typer.Option("mup,sp", "--modes", help="Parameterisations: mup and/or sp."),
        tokens: int = typer.Option(None, "--tokens", min=1, help="Training tokens per trial (default: the recipe's steps)."),
        seeds: int = typer.Option(1, "--seeds", min=1, help="Seeds per (width, LR); optima use the mean and a bootstrap error."),
        out: Path = typer.Option(Path("runs/hparam/sweep"), "--out", help="Results folder; rerunning resumes it."),
        no_ray: bool = typer.Option(False, "--no-ray", help="Train the trials one by one in this process."),
        cpus_per_trial: float = typer.Option(0.5, "--cpus-per-trial", min=0.01, help="Ray CPUs per trial (fractional)."),
        corpus: bool = CORPUS_OPT,
    ) -> None:
        """Width × LR sweep: does the optimal LR stay put across widths (muP) or drift (SP)?"""
        cfg = _load(config, overrides, out, corpus)
        from services.trainer.hparam.analysis import drift_table, lr_drift, optimal_lrs, sweep_table
        from services.trainer.hparam.plots import plot_sweep
        from services.trainer.hparam.sweep import Trial, run_sweep

        trials = [Trial(w, m, lr, tokens, s) for m in _modes(modes) for w in _numbers(widths, "--widths", int)
                  for lr in _numbers(lrs, "--lrs") for s in range(seeds)]
        if not no_ray:
            _init_ray(cfg)
        outcome = run_sweep(cfg, trials, out, use_ray=not no_ray, cpus_per_trial=cpus_per_trial, run_name="sweep-lr")
        if not outcome.results:
            typer.secho(f"no trial finished; see the Ray Tune logs under {out / 'ray_tune'}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=1)
        text = sweep_table(outcome.results) + "\n\n" + drift_table(lr_drift(optimal_lrs(outcome.results)))
        _write_text(out / "sweep.md", text + "\n")
        png = plot_sweep(outcome.results, out / "sweep.png")
        typer.echo(text)
        typer.echo(f"\n{len(outcome.trained)} trials trained now, {len(outcome.results) - len(outcome.trained)} reused, "
                   f"{len(outcome.failed)} failed\nplot: {png}")
        if outcome.failed:
            raise typer.Exit(code=1)

    @app.command("lr-predict", context_settings={"allow_interspersed_args": True})
    def lr_predict(
        config: str = CONFIG_ARG,
        overrides: list[str] = OVERRIDES_ARG,
        tokens: str = typer.Option(..., "--tokens", help="Comma-separated token budgets of the proxy sweeps."),
        lrs: str = typer.Option(..., "--lrs", help="Comma-separated peak LRs swept at every budget."),
        target: float = typer.Option(..., "--target", min=1, help="Token budget to predict the optimal LR for, e.g. 1e13."),
        width: int = typer.Option(None, "--width", help="Proxy width (default: the recipe's d_model)."),
        level: float = typer.Option(0.9, "--level", min=0.5, max=0.999, help="Prediction-interval level."),
        seeds: int = typer.Option(1, "--seeds", min=1, help="Seeds per (budget, LR); optima use the mean and a bootstrap error."),
        holdout: int = typer.Option(None, "--holdout-tokens", min=1,
                                    help="A budget outside the fit: sweep it (same LRs + the predicted LR) and check the law."),
        out: Path = typer.Option(Path("runs/hparam/lr_law"), "--out", help="Results folder; rerunning resumes it."),
        no_ray: bool = typer.Option(False, "--no-ray", help="Train the trials one by one in this process."),
        cpus_per_trial: float = typer.Option(0.5, "--cpus-per-trial", min=0.01, help="Ray CPUs per trial (fractional)."),
        corpus: bool = CORPUS_OPT,
    ) -> None:
        """Fit ln(lr*) = a + b·ln(tokens) on proxy sweeps and predict the LR for a target budget."""
        cfg = _load(config, overrides, out, corpus)
        from services.trainer.hparam.analysis import sweep_table
        from services.trainer.hparam.lr_law import fit_lr_law, law_report
        from services.trainer.hparam.plots import plot_law
        from services.trainer.hparam.sweep import Trial, run_sweep

        w, mup = width or cfg.model.d_model, cfg.model.mup.enabled
        grid = _numbers(lrs, "--lrs")
        trials = [Trial(w, mup, lr, int(t), s) for t in _numbers(tokens, "--tokens", int) for lr in grid
                  for s in range(seeds)]
        if not no_ray:
            _init_ray(cfg)
        outcome = run_sweep(cfg, trials, out, use_ray=not no_ray, cpus_per_trial=cpus_per_trial, run_name="lr-law")
        try:
            law = fit_lr_law(outcome.results, w, mup)
        except ValueError as exc:
            typer.secho(str(exc), fg=typer.colors.RED, err=True)
            raise typer.Exit(code=1) from None
        report = law_report(law, target, level)
        lr, lo, hi = law.fit.predict(target, level)
        _write_text(out / "law.json", json.dumps({**law.fit.as_dict(), "target_tokens": target, "level": level,
                                                  "predicted_lr": lr, "interval": [lo, hi],
                                                  "points": [[t, o.as_dict()] for t, o in law.points]}, indent=1))
        _write_text(out / "lr_law.md", sweep_table(outcome.results) + "\n\n```\n" + report + "\n```\n")
        png = plot_law(law, target, out / "lr_law.png", level)
        typer.echo(sweep_table(outcome.results) + "\n\n" + report)
        typer.echo(f"\nplot: {png}")
        if holdout is not None:
            from services.trainer.hparam.lr_law import holdout_check

            predicted = law.fit.predict(holdout, level)[0]
            check_trials = [Trial(w, mup, lr, holdout, s) for lr in [*grid, predicted] for s in range(seeds)]
            checked = run_sweep(cfg, check_trials, out, use_ray=not no_ray, cpus_per_trial=cpus_per_trial,
                                run_name="lr-law-holdout")
            try:
                check = holdout_check(law, checked.results, checked.results[0].tokens, w, mup, level)
            except (ValueError, IndexError) as exc:
                typer.secho(f"hold-out check failed: {exc}", fg=typer.colors.RED, err=True)
                raise typer.Exit(code=1) from None
            _write_text(out / "holdout.json", json.dumps({
                "tokens": check.tokens, "predicted_lr": check.predicted_lr, "interval": list(check.interval),
                "measured_lr": check.measured.lr, "measured_ln_lr_se": check.measured.ln_lr_se,
                "inside_interval": check.inside_interval, "loss_at_prediction": check.loss_at_prediction,
                "best_loss": check.best_loss, "loss_lost": check.loss_lost, "fit_r2": law.fit.r2, "fit_n": law.fit.n,
                "max_fit_tokens": max(t for t, _ in law.points)}, indent=1))
            _write_text(out / "holdout.md", sweep_table(checked.results) + "\n\n" + check.report() + "\n")
            typer.echo("\n" + sweep_table(checked.results) + "\n\n" + check.report())

    app.add_typer(mup_group, name="mup")
    app.add_typer(sweep_group, name="sweep")
