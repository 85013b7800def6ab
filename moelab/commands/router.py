"""`moelab router frozen|calibrate CKPT`: a trained model's frozen router, measured and calibrated.

CKPT is a run folder (its newest checkpoint) or a checkpoint folder. Both print one line per
stream and, last, one JSON object with every figure (services/trainer/router_calibration.py).
"""

from __future__ import annotations

import json

import typer

from shared.config.model import BalanceConfig

# `moelab router calibrate` solves on as many tokens as a run's end-of-training calibration does
CALIBRATION_TOKENS = BalanceConfig.model_fields["calibration_tokens"].default
CKPT_ARG = typer.Argument(..., help="Run folder (its newest checkpoint) or checkpoint folder (with meta.json).")


def _fail(exc: Exception) -> None:
    typer.secho(str(exc), fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2) from None


def register(app: typer.Typer) -> None:
    router = typer.Typer(help="The frozen router: MaxVio against its floor, post-hoc bias calibration.",
                         no_args_is_help=True)
    app.add_typer(router, name="router")

    @router.command("frozen")
    def frozen(
        ckpt: str = CKPT_ARG,
        tokens: int = typer.Option(131072, "--tokens", min=1024, help="Unseen tokens of each stream to route (the held-out split is read once: at most all of it)."),
        held_out: bool = typer.Option(True, "--held-out/--no-held-out", help="Also route the held-out documents."),
    ) -> None:
        """MaxVio of the frozen model (worst layer and per layer) over the training stream after the
        checkpoint (after its calibration tokens, on a calibrated checkpoint) and the held-out set,
        beside its block-bootstrap floor, the no-bias MaxVio and the bias sensitivity."""
        from services.trainer.data import with_parquet_documents
        from services.trainer.router_calibration import (
            calibration_skip,
            frozen_report,
            load_checkpoint,
            summary_line,
        )

        try:
            cfg, model, _, meta, _ = load_checkpoint(ckpt)
        except (FileNotFoundError, ValueError) as exc:
            _fail(exc)
        skip = calibration_skip(meta)
        if skip:
            typer.echo(f"skipped the {skip:,} training-stream tokens after the checkpoint that its eval-time bias "
                       "was calibrated on")
        report = frozen_report(model, with_parquet_documents(cfg), meta["data"], tokens, skip_tokens=skip,
                               held_out=held_out)
        for stream, stats in report.items():
            typer.echo(summary_line(stream, stats))
        typer.echo(json.dumps({"checkpoint": ckpt, "step": meta["step"], "calibration_tokens_skipped": skip, **report}))

    @router.command("calibrate")
    def calibrate(
        ckpt: str = CKPT_ARG,
        tokens: int = typer.Option(CALIBRATION_TOKENS, "--tokens", help="Training-stream tokens to re-solve the bias on (>= 65,536; default: model.moe.balance.calibration_tokens's)."),
        eval_tokens: int = typer.Option(131072, "--eval-tokens", min=1024,
                                        help="Tokens after those, never calibrated on, that judge before and after."),
        out: str = typer.Option(None, "--out", help="Run folder to write (config.yaml + checkpoints/; default: <run>/calibrated)."),
        held_out: bool = typer.Option(True, "--held-out/--no-held-out", help="Also judge on the held-out documents."),
    ) -> None:
        """Re-solve each MoE layer's eval-time bias on the frozen model, layer by layer, and write a new
        checkpoint (everything else as it was, the calibration recorded in its meta)."""
        from services.trainer.router_calibration import calibrate_checkpoint, summary_line

        try:
            result = calibrate_checkpoint(ckpt, tokens, eval_tokens, out, held_out)
        except (FileNotFoundError, ValueError) as exc:
            _fail(exc)
        for when in ("before", "after"):
            for stream, stats in result[when].items():
                typer.echo(summary_line(f"{when}, {stream}", stats))
        typer.echo(f"written: {result['checkpoint']}")
        typer.echo(json.dumps(result))
