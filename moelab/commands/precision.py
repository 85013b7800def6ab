"""`moelab precision-report CONFIG`: HBM bytes per parameter for each precision mode at a recipe."""

from __future__ import annotations

import json

import typer

from moelab.commands.common import CONFIG_ARG, OVERRIDES_ARG, load_or_exit

MODES = ("bf16", "fp8", "nvfp4")
PARTS = ("weights", "grads", "optimizer", "lowp_copies")


def register(app: typer.Typer) -> None:
    @app.command("precision-report")
    def precision_report(
        config: str = CONFIG_ARG,
        overrides: list[str] = OVERRIDES_ARG,
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    ) -> None:
        """Bytes per parameter (weights, grads, optimizer state, low-precision copies) per expert mode and
        master-weight dtype, and the whole model's parameter memory, for CONFIG (e.g. configs/proxy-7b2a.yaml)."""
        from shared.precision.memory import bytes_per_param, model_bytes, param_classes

        cfg = load_or_exit(config, overrides)
        prec = cfg.model.moe.precision
        gran = prec.fp8_granularity
        classes = param_classes(cfg.model, cfg.optim)
        rows = []
        for master in ("fp32", "bf16"):
            for mode in MODES:
                per = bytes_per_param(mode, master, "muon", gran)
                whole = model_bytes(classes, mode, prec.dense, master, gran)
                rows.append({"expert": mode, "master": master, **{p: getattr(per, p) for p in PARTS},
                             "bytes_per_param": per.total, "model_gib": whole["total"] / 2**30,
                             "params": whole["params"]})  # fmt: skip
        if as_json:
            typer.echo(json.dumps({"config": config, "dense": prec.dense, "fp8_granularity": gran, "rows": rows}))
            return
        n = rows[0]["params"]
        typer.echo(f"{config}: {n / 1e9:.2f}B parameters; dense GEMMs {prec.dense}; fp8 scales {gran}")
        typer.echo("bytes per expert parameter (Muon); whole model = every parameter by its class and optimizer")
        typer.echo("| expert | master | weights | grads | optimizer | low-precision copies | total B/param | model GiB |")
        typer.echo("|---|---|---|---|---|---|---|---|")
        for r in rows:
            mark = " *" if (r["expert"], r["master"]) == (prec.expert, prec.master_weights) else ""
            typer.echo(
                f"| {r['expert']}{mark} | {r['master']} | {r['weights']:g} | {r['grads']:g} | {r['optimizer']:g} | "
                f"{r['lowp_copies']:.4g} | {r['bytes_per_param']:.4g} | {r['model_gib']:.1f} |"
            )
        typer.echo("* = this config's choice. Activations are per token and not included.")
