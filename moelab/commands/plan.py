"""`moelab plan CONFIG --gpus N --gpu-mem GB`: memory per GPU for a recipe, and a refusal when it cannot fit."""

from __future__ import annotations

import json

import typer

from moelab.commands.common import CONFIG_ARG, OVERRIDES_ARG, load_or_exit


def register(app: typer.Typer) -> None:
    @app.command("plan", context_settings={"allow_interspersed_args": True})
    def plan(
        config: str = CONFIG_ARG,
        overrides: list[str] = OVERRIDES_ARG,
        gpus: int = typer.Option(None, "--gpus", min=1, help="GPUs (one training worker each); default train.workers."),
        gpu_mem: float = typer.Option(None, "--gpu-mem", min=1.0, help="Memory of one GPU in GB (GiB, as "
                                      "torch reports it: 80 for H100, 141 for H200); default: this machine's GPU."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of the table."),
    ) -> None:
        """Weights, grads, optimizer state, low-precision copies and activations per GPU; exits 1 when the plan
        does not fit the GPU, before anything is allocated."""
        from shared.plan.memory import GIB, format_plan, plan_memory

        extra = [f"train.workers={gpus}", f"train.dp_size={gpus}"] if gpus else []
        cfg = load_or_exit(config, [*(overrides or []), *extra])
        if gpu_mem is None:
            gpu_mem = _local_gpu_gib()
        try:
            result = plan_memory(cfg, gpus, gpu_mem)
        except ValueError as exc:
            typer.secho(str(exc), fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2) from None
        if as_json:
            typer.echo(json.dumps({"config": config, **result.to_json()}))
        else:
            typer.echo(format_plan(result, config))
        if result.fits is False:
            over = result.total / GIB - gpu_mem
            typer.secho(
                f"refused: {result.total / GIB:.1f} GiB per GPU is {over:.1f} GiB over {gpu_mem:g} GiB. Try "
                "train.activation_checkpointing=true, a smaller train.micro_batch_size (more train.grad_accum), "
                "more GPUs (FSDP shards weights, grads and optimizer state) or train.ep_size for the experts.",
                fg=typer.colors.RED, err=True,
            )
            raise typer.Exit(code=1)


def _local_gpu_gib() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / 2**30
