"""`moelab demo`: the main job on the embedded defaults.

It runs the stages of the data-to-model pipeline that exist today, in order, and says which ones
do not exist yet instead of faking them. As stages land they are added to `STAGES`.
"""

from __future__ import annotations

import typer


def _doctor() -> str:
    from moelab.commands.doctor import format_table
    from shared.hardware import run_doctor, store_peak

    report = run_doctor(quick=True)
    store_peak(report)
    typer.echo(format_table(report))
    if report.failures:
        raise typer.Exit(code=1)
    return "environment checked"


def _config() -> str:
    from shared.config import load_config

    cfg = load_config("configs/tiny.yaml")
    return f"config '{cfg.name}' valid"


STAGES = (("doctor", _doctor), ("config", _config))
NOT_YET = ("filter", "oracle label", "distill heads", "calibrate", "score", "tokenize + mixture", "train")


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo() -> None:
        """Run the pipeline on the embedded defaults (the stages that exist so far)."""
        for name, stage in STAGES:
            typer.secho(f"== {name}", bold=True)
            typer.echo(f"   {stage()}")
        typer.echo(f"not built yet (skipped, nothing faked): {', '.join(NOT_YET)}")
