"""`moelab score label|train|calibrate|run CONFIG`: the scorer's stages (services/scorer).

label: oracle labels for a sample (cached); train: Probe and Judge heads on cached backbone
features; calibrate: τ_keep per source and τ_drop for the cascade, with the agreement report;
run: score every input shard on Ray Data, resumable by shard. Each stage writes
`<scorer.out_dir>/<stage>_report.json` and reports to the tracker.
"""

from __future__ import annotations

import json

import typer

from moelab.commands.common import CONFIG_ARG, OVERRIDES_ARG, load_or_exit


def _print(report: dict) -> None:
    typer.echo(json.dumps(report, indent=2, sort_keys=True, default=float))


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Model-based quality scoring: oracle labels, Probe/Judge heads, calibrated cascade.",
                        no_args_is_help=True)

    @group.command("label")
    def label(config: str = CONFIG_ARG, overrides: list[str] = OVERRIDES_ARG) -> None:
        """Label a seeded sample with the oracle (scorer.oracle.backend); reuses the label cache."""
        from services.scorer.pipeline import label_stage

        cfg = load_or_exit(config, overrides)
        if cfg.scorer.oracle.backend == "heuristic":
            typer.secho("oracle=heuristic: a text-statistics STAND-IN for the demo, not a language model",
                        fg=typer.colors.YELLOW, err=True)
        _print(label_stage(cfg))

    @group.command("train")
    def train(config: str = CONFIG_ARG, overrides: list[str] = OVERRIDES_ARG) -> None:
        """Train the Probe and Judge heads on the labels (backbone features cached on disk)."""
        from services.scorer.pipeline import train_stage

        _print(train_stage(load_or_exit(config, overrides)))

    @group.command("calibrate")
    def calibrate(config: str = CONFIG_ARG, overrides: list[str] = OVERRIDES_ARG) -> None:
        """Choose τ_keep per source and τ_drop for the Probe; write the calibration report and plot."""
        from services.scorer.pipeline import calibrate_stage

        _print(calibrate_stage(load_or_exit(config, overrides)))

    @group.command("run")
    def run(config: str = CONFIG_ARG, overrides: list[str] = OVERRIDES_ARG,
            max_shards: int = typer.Option(None, help="Score at most this many pending shards, then stop."),
            address: str = typer.Option(None, "--address", help="Score on this Ray cluster (e.g. ray://head:10001 "
                                        "or auto) instead of a local Ray; sets cluster.address.")) -> None:
        """Score the shards the data filter declares (or scorer.inputs) with the calibrated cascade on Ray
        Data; skips shards whose input and scorer are unchanged, counts empty inputs."""
        from services.scorer.scoring import run_scoring
        from services.scorer.stage_support import input_paths, report_stage

        cfg = load_or_exit(config, overrides)
        if address:
            cfg.cluster.address = address
        try:
            paths = input_paths(cfg)
        except FileNotFoundError as exc:
            typer.secho(str(exc), fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2) from None
        report = run_scoring(cfg, paths, max_shards=max_shards)
        report_stage(cfg, "run", report)
        _print(report)

    app.add_typer(group, name="score")
