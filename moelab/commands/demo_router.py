"""The demo's frozen router: the model the demo trained, routing unseen tokens, beside its floor.

Why the demo prints it: the training line's router figures are those of steps whose bias moves
after every micro-batch, which flatter the router; the figure a deployed model shows is the frozen
MaxVio (docs/moe.md, "The frozen router"). The demo trains with `calibrate_at_end`, so the final
checkpoint's eval-time bias was re-solved on the training-stream tokens after its loader position;
the training-stream figures start after those (`calibration_skip`), the held-out ones are the
first tokens of the held-out split. Measuring is forward-only on the tiny model: seconds on CPU.
A run that cannot be found or measured is said so in one line; the demo goes on.
"""

from __future__ import annotations

from pathlib import Path

import typer

HEADER = "== router (frozen model)"
FROZEN_TOKENS = 131072  # per stream, as `moelab router frozen` routes by default
TARGET_RATIO = 1.5  # a frozen MaxVio within 1.5x its floor is balanced (docs/moe.md)
STREAMS = (("held_out", "held-out"), ("train", "training stream"))


def frozen_router_lines(report: dict[str, dict], calibrated_tokens: int, skipped_tokens: int) -> list[str]:
    """The lines the demo prints for a `frozen_report` (held-out first), and whether the bias was
    calibrated at the end of training on `calibrated_tokens` (0: not calibrated) and whether the
    training-stream figures skipped them."""
    lines = ["", HEADER]
    for stream, label in STREAMS:
        if stream in report:
            s = report[stream]
            lines.append(f"{label}: frozen MaxVio {s['maxvio_worst']:.3f} worst layer, floor {s['floor_worst']:.3f} "
                         f"({s['ratio_to_floor']:.2f}x the floor; target <= {TARGET_RATIO}x), "
                         f"{s['tokens']:,} tokens in {s['documents']:,} documents")
            if "maxvio_at_reference_mix_worst" in s:
                missing = s["reference_mix_missing"]
                lines.append(f"{label} at the training stream's source mix: frozen MaxVio "
                             f"{s['maxvio_at_reference_mix_worst']:.3f} worst layer (the same documents, their "
                             "sources reweighted to the training stream's token shares"
                             + (f"; without {', '.join(missing)}, absent there)" if missing else ")"))
    if not calibrated_tokens:
        lines.append("bias: not calibrated at the end of training (model.moe.balance.calibrate_at_end is off); "
                     "the eval-time bias is the average of the training-time bias")
    elif skipped_tokens == calibrated_tokens:
        lines.append(f"bias: calibrated at the end of training on {calibrated_tokens:,} training-stream tokens; "
                     "the training-stream figures route the tokens after them")
    else:
        lines.append(f"bias: calibrated at the end of training on {calibrated_tokens:,} training-stream tokens from "
                     "another loader position than the checkpoint's, so the training-stream figures may include them")
    return lines


def demo_run_folder(root: Path, config: str, runs: Path) -> Path:
    """The training run folder the demo's pipeline writes: `<runs>/pipeline/<name>/train/<run name>`
    (`cluster.pipeline.layout` under `train.out_dir=<runs>`, then the trainer's run folder)."""
    from cluster.pipeline import layout
    from services.trainer.run_claim import run_folder
    from shared.config import load_config

    return run_folder(layout(load_config(root / config, [f"train.out_dir={runs}"])))


def measure_frozen_router(run: Path, tokens: int = FROZEN_TOKENS) -> list[str]:
    """Load the newest checkpoint of `run`, route `tokens` of each stream frozen, print the lines and
    return them (for the transcript). Never raises for a run it cannot load or measure: it says so."""
    try:
        from services.trainer.data import with_parquet_documents
        from services.trainer.router_calibration import calibration_skip, frozen_report, load_checkpoint

        cfg, model, _, meta, _ = load_checkpoint(run)
    except Exception as exc:  # the demo's report, not its result: a missing run must not fail the demo
        lines = ["", HEADER, f"frozen router not measured: no loadable checkpoint in the demo's training run {run} "
                             f"(looked for its newest checkpoint under {run / 'checkpoints'}): {type(exc).__name__}: {exc}"]
    else:
        skip = calibration_skip(meta)
        record = meta.get("router_calibration") or {}
        try:
            report = frozen_report(model, with_parquet_documents(cfg), meta["data"], tokens, skip_tokens=skip,
                                   held_out=True)
        except Exception as exc:  # as above: say why, go on to the ablation
            lines = ["", HEADER, f"frozen router not measured on {run} (step {meta.get('step')}): "
                                 f"{type(exc).__name__}: {exc}"]
        else:
            lines = frozen_router_lines(report, int((record.get("data") or {}).get("tokens") or 0), skip)
    for line in lines:
        typer.secho(line, bold=line.startswith("== "))
    return lines
