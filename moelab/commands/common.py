"""Helpers every command shares: loading a config with overrides and failing with a clean message."""

from __future__ import annotations

import typer

from shared.config import ConfigError, ExperimentConfig, load_config


def load_or_exit(config: str | None, overrides: list[str] | None) -> ExperimentConfig:
    """Load and validate a config; on a bad value print the field-level message and exit 2."""
    try:
        return load_config(config, overrides or [])
    except ConfigError as exc:
        typer.secho(str(exc), fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2) from None


CONFIG_ARG = typer.Argument(..., help="YAML recipe, e.g. configs/tiny.yaml.")
OVERRIDES_ARG = typer.Argument(None, help="Dotted overrides, e.g. model.moe.top_k=4.")
