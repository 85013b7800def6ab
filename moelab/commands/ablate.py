"""`moelab ablate CONFIG [overrides]`: train the same proxy on every data arm × seed and print the verdicts."""

from __future__ import annotations

import json

import typer

from moelab.commands.common import CONFIG_ARG, OVERRIDES_ARG, load_or_exit


def register(app: typer.Typer) -> None:
    @app.command("ablate", context_settings={"allow_interspersed_args": True})
    def ablate(
        config: str = CONFIG_ARG,
        overrides: list[str] = OVERRIDES_ARG,
        check: bool = typer.Option(False, "--check", help="Prepare and check every arm (inputs, held-out set, "
                                                          "token budget) without training."),
        no_suite: bool = typer.Option(False, "--no-suite", help="Compare on held-out eval loss only (ablation.suite=false)."),
    ) -> None:
        """Data ablation: arms × seeds as Ray tasks; writes report.json/.md/.png under ablation.out_dir."""
        cfg = load_or_exit(config, [*(overrides or []), *(["ablation.suite=false"] if no_suite else [])])
        if cfg.ablation is None:
            typer.secho(f"{config}: no `ablation` section (arms, baseline, eval_documents); see docs/evaluation.md",
                        fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2)
        from cluster.ablation import run_ablation
        from cluster.ablation.documents import RecipeError

        try:
            result = run_ablation(cfg, log=typer.echo, check_only=check)
        except RecipeError as exc:
            typer.secho(str(exc), fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2) from None
        if check:
            typer.echo(json.dumps(result, default=str))
            typer.echo(f"ok: every arm of {config} is ready; the budget is {result['budget_tokens']:,} tokens per run")
            return
        typer.secho("\n== verdicts", bold=True)
        for line in result["verdicts"]:
            typer.echo(line)
        typer.echo(f"report: {result['files']['markdown']} (JSON {result['files']['json']}, plot {result['files']['png']})")
        if result["failed_runs"]:
            typer.secho(f"{result['failed_runs']} arm-seed run(s) failed after retries; see the report",
                        fg=typer.colors.RED, err=True)
            raise typer.Exit(code=1)
