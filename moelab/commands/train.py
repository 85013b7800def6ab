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
        new: bool = typer.Option(False, "--new", help="The run name holds a run: start another beside it (NAME-2, …)."),
        allow_config_change: bool = typer.Option(
            False, "--allow-config-change", help="--resume even though the config changes the run (e.g. train.steps); "
            "the change is recorded in the run's config-changes.jsonl."),
    ) -> None:
        """Train the model a config describes; prints the final metrics as JSON.

        A run name that already holds a run is refused unless --resume or --new says which is meant."""
        extra = [f"train.workers={workers}", f"train.dp_size={workers}"] if workers else []
        cfg = load_or_exit(config, [*(overrides or []), *extra])
        from moelab.commands.config import report_findings

        report_findings(cfg, config)
        from services.trainer.launch import run_local, run_ray
        from services.trainer.loop import TrainingStopped
        from services.trainer.run_claim import RunClaimError, claim_run

        try:
            cfg = claim_run(cfg, resume=resume, new=new, allow_config_change=allow_config_change)
        except RunClaimError as exc:
            typer.secho(str(exc), fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2) from None

        try:
            result = run_local(cfg, resume=resume) if no_ray else run_ray(cfg, resume=resume)
        except TrainingStopped as exc:
            typer.secho(f"training stopped: {exc}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=1) from None
        typer.echo(json.dumps(result, default=str))
