"""`moelab eval CKPT`: bits per byte on the reference sets and task scores through lm-evaluation-harness."""

from __future__ import annotations

import json
from pathlib import Path

import typer

# the offline suite (shared.eval.tasks.SUITE_DIR), spelled out so the CLI starts without importing torch
SUITE_DIR = Path(__file__).resolve().parents[2] / "data" / "reference" / "tasks"


def _print_table(metrics: dict[str, float]) -> None:
    width = max(map(len, metrics), default=10)
    for key, value in metrics.items():
        typer.echo(f"  {key:<{width}}  {value:.4f}")


def run_eval(checkpoint: str, tasks: str, *, limit: int | None, batch_size: int, bpb: bool,
             seq_len: int | None, reference_texts: int | None = None) -> dict[str, float]:
    """Load the checkpoint, score BPB per reference set, run `tasks` (names or a local path) in lm-eval."""
    from shared.checkpoint.read import CheckpointError, load_trained_model
    from shared.eval.reference_sets import ReferenceSetError
    from shared.eval.suite import evaluate_model
    from shared.eval.tasks import TaskFileError, check_task_files

    local = bool(tasks) and Path(tasks).exists()
    try:
        names = check_task_files(tasks) if local else [t.strip() for t in tasks.split(",") if t.strip()]
        loaded = load_trained_model(checkpoint, require_tokenizer=True)
    except (CheckpointError, TaskFileError) as exc:
        typer.secho(f"moelab eval: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2) from None
    seq_len = seq_len or min(loaded.cfg.train.seq_len, loaded.cfg.model.max_seq_len)
    metrics: dict[str, float] = {}
    if bpb:
        try:
            metrics.update(evaluate_model(loaded.model, loaded.tokenizer, seq_len=seq_len, batch_size=batch_size,
                                          include_tasks=False, reference_texts=reference_texts))
        except ReferenceSetError as exc:
            typer.secho(f"moelab eval: {exc}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2) from None
    if names:
        metrics.update(harness_scores(loaded.model, loaded.tokenizer, names, include_path=Path(tasks) if local else None,
                                      seq_len=seq_len, batch_size=batch_size, limit=limit))
    return metrics


def harness_scores(model, tokenizer, names: list[str], *, include_path: Path | None, seq_len: int,
                   batch_size: int = 8, limit: int | None = None) -> dict[str, float]:
    """`task/<task>/<metric>` from `lm_eval.simple_evaluate` with the moelab adapter (zero-shot)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    from services.evaluator.harness_model import MoelabLM

    folder = None if include_path is None else (include_path if include_path.is_dir() else include_path.parent)
    manager = TaskManager(include_path=str(folder)) if folder else TaskManager()
    lm = MoelabLM(model=model, tokenizer=tokenizer, seq_len=seq_len, batch_size=batch_size)
    out = lm_eval.simple_evaluate(model=lm, tasks=names, task_manager=manager, limit=limit, num_fewshot=0,
                                  log_samples=False, bootstrap_iters=0)
    metrics = {}
    for task, result in sorted(out["results"].items()):
        for key, value in result.items():
            metric, _, _filter = key.partition(",")
            if isinstance(value, int | float) and not key.endswith("_stderr") and "_stderr," not in key and metric != "alias":
                metrics[f"task/{task}/{metric}"] = float(value)
    return metrics


def register(app: typer.Typer) -> None:
    @app.command("eval")
    def eval_cmd(
        checkpoint: str = typer.Argument(..., help="A run folder (its newest checkpoint) or a step_* checkpoint folder."),
        tasks: str = typer.Option(str(SUITE_DIR), "--tasks",
                                  help="Comma-separated lm-eval task names (hellaswag,arc_easy,…; needs the datasets), "
                                  "or a local task YAML file or folder (default: the offline suite). '' for none."),
        limit: int = typer.Option(None, "--limit", min=1, help="Score only the first N items of each task."),
        batch_size: int = typer.Option(8, "--batch-size", min=1, help="Sequences per forward."),
        bpb: bool = typer.Option(True, "--bpb/--no-bpb", help="Bits per byte on every reference set (data/reference)."),
        reference_texts: int = typer.Option(None, "--reference-texts", min=1,
                                            help="Score only the first N texts of each reference set (quicker, noisier)."),
        seq_len: int = typer.Option(None, "--seq-len", min=8, help="Scoring window (default: the run's train.seq_len)."),
        output: Path = typer.Option(None, "--output", "-o", help="Also write the metrics as JSON here (atomically)."),
    ) -> None:
        """Evaluate a checkpoint: BPB per reference set and task accuracy/acc_norm/log-prob through lm-eval."""
        metrics = run_eval(checkpoint, tasks, limit=limit, batch_size=batch_size, bpb=bpb, seq_len=seq_len,
                           reference_texts=reference_texts)
        _print_table(metrics)
        if output is not None:
            from shared.data.atomic import atomic_write_json

            atomic_write_json(output, metrics)
        typer.echo(json.dumps(metrics))
