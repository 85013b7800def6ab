"""`moelab compare-baseline CONFIG`: the MoE and its dense twin, same data, side by side."""

from __future__ import annotations

import json

import typer

from moelab.commands.common import CONFIG_ARG, OVERRIDES_ARG, load_or_exit


def register(app: typer.Typer) -> None:
    @app.command("compare-baseline")
    def compare_baseline_cmd(
        config: str = CONFIG_ARG,
        overrides: list[str] = OVERRIDES_ARG,
        new: bool = typer.Option(False, "--new", help="The run names hold runs: use the next free ones (NAME-2, …)."),
    ) -> None:
        """Train CONFIG and its dense twin (model.ffn=dense) on the same data; print loss, tokens/s, memory.

        The runs are named `<name>-compare` and `<name>-compare-dense` (or train.run_name and its
        `-dense`), never the plain `moelab train` run's name; names that hold runs are refused unless --new."""
        cfg = load_or_exit(config, overrides)
        from moelab.commands.config import report_findings

        report_findings(cfg, config)
        from services.trainer.compare import compare_baseline, dense_twin, format_comparison
        from services.trainer.run_claim import RunClaimError, claim_run, holds_run, run_folder

        if cfg.train.run_name is None:
            cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"run_name": f"{cfg.name}-compare"})})
        base, n = cfg.train.run_name, 1
        while new and (holds_run(run_folder(cfg)) or holds_run(run_folder(dense_twin(cfg)))):
            n += 1
            cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"run_name": f"{base}-{n}"})})
        try:
            claim_run(cfg)
            claim_run(dense_twin(cfg))
        except RunClaimError as exc:
            typer.secho(str(exc), fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2) from None

        table = compare_baseline(cfg)
        typer.echo(format_comparison(table))
        typer.echo(json.dumps(table))
