"""`moelab train CONFIG [overrides]`: train on a local Ray (default), in one process, or resume."""

from __future__ import annotations

import json

import typer

from moelab.commands.common import CONFIG_ARG, OVERRIDES_ARG, load_or_exit


def register(app: typer.Typer) -> None:
    @app.command("train", context_settings={"allow_interspersed_args": True})
    def train(
        config: str = CONFIG_ARG,
        overrides: list[str] = OVERRIDES_ARG,
        workers: int = typer.Option(None, "--workers", help="Training processes (default: train.workers)."),
        no_ray: bool = typer.Option(False, "--no-ray", help="Run in this process (debugging); same code path."),
        resume: bool = typer.Option(False, "--resume", help="Continue from the run's latest checkpoint."),
    ) -> None:
        """Train the model a config describes; prints the final metrics as JSON."""
        extra = [f"train.workers={workers}", f"train.dp_size={workers}"] if workers else []
        cfg = load_or_exit(config, [*(overrides or []), *extra])
        from services.trainer.launch import run_local, run_ray
        from services.trainer.loop import TrainingStopped

        try:
            result = run_local(cfg, resume=resume) if no_ray else run_ray(cfg, resume=resume)
        except TrainingStopped as exc:
            typer.secho(f"training stopped: {exc}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=1) from None
        typer.echo(json.dumps(result, default=str))
