"""`moelab config show|check`: print or validate the resolved config."""

from __future__ import annotations

import typer
import yaml

from moelab.commands.common import CONFIG_ARG, OVERRIDES_ARG, load_or_exit
from shared.config.loader import dump_yaml


def report_findings(cfg, label: str) -> None:
    """Print `check_config`'s warnings; on any error print them all and exit 2 (before any work)."""
    from shared.config.validation import check_config

    findings = check_config(cfg)
    for f in (f for f in findings if not f.error):
        typer.secho(f"warning ({label}):\n{f}", fg=typer.colors.YELLOW, err=True)
    errors = [f for f in findings if f.error]
    if errors:
        typer.secho(f"invalid config ({label}):\n" + "\n".join(str(f) for f in errors), fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Inspect and validate experiment configs.", no_args_is_help=True)

    @group.command("show")
    def show(
        config: str = CONFIG_ARG,
        overrides: list[str] = OVERRIDES_ARG,
        resolved: bool = typer.Option(
            True, "--resolved/--recipe", help="Every field with its default filled in (default), or only what the "
            "recipe, its `base:` chain and the overrides set, merged as `base:` merges them."),
    ) -> None:
        """Print the config: resolved (recipe + `base:` + overrides + defaults) or the merged recipe alone."""
        if resolved:
            typer.echo(dump_yaml(load_or_exit(config, overrides)), nl=False)
            return
        from shared.config.loader import merged_recipe

        load_or_exit(config, overrides)  # a recipe that does not validate is reported, not printed
        typer.echo(yaml.safe_dump(merged_recipe(config, overrides or []), sort_keys=False, allow_unicode=True), nl=False)

    @group.command("check")
    def check(config: str = CONFIG_ARG, overrides: list[str] = OVERRIDES_ARG) -> None:
        """Validate a config and the files it names; exit 2 with field-level messages when it is wrong."""
        cfg = load_or_exit(config, overrides)
        report_findings(cfg, config)
        typer.echo(f"ok: {config} ({cfg.name})")

    app.add_typer(group, name="config")
