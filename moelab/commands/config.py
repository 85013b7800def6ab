"""`moelab config show|check`: print or validate the resolved config."""

from __future__ import annotations

import typer

from moelab.commands.common import CONFIG_ARG, OVERRIDES_ARG, load_or_exit
from shared.config.loader import dump_yaml


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Inspect and validate experiment configs.", no_args_is_help=True)

    @group.command("show")
    def show(config: str = CONFIG_ARG, overrides: list[str] = OVERRIDES_ARG) -> None:
        """Print the fully resolved config (recipe + inheritance + overrides + defaults) as YAML."""
        typer.echo(dump_yaml(load_or_exit(config, overrides)), nl=False)

    @group.command("check")
    def check(config: str = CONFIG_ARG, overrides: list[str] = OVERRIDES_ARG) -> None:
        """Validate a config; exit 2 with field-level messages when it is wrong."""
        cfg = load_or_exit(config, overrides)
        typer.echo(f"ok: {config} ({cfg.name})")

    app.add_typer(group, name="config")
