"""`moelab compare-baseline CONFIG`: the MoE and its dense twin, same data, side by side."""

from __future__ import annotations

import json

import typer

from moelab.commands.common import CONFIG_ARG, OVERRIDES_ARG, load_or_exit


def register(app: typer.Typer) -> None:
    @app.command("compare-baseline")
    def compare_baseline_cmd(config: str = CONFIG_ARG, overrides: list[str] = OVERRIDES_ARG) -> None:
        """Train CONFIG and its dense twin (model.ffn=dense) on the same data; print loss, tokens/s, memory."""
        cfg = load_or_exit(config, overrides)
        from services.trainer.compare import compare_baseline, format_comparison

        table = compare_baseline(cfg)
        typer.echo(format_comparison(table))
        typer.echo(json.dumps(table))
