"""One call for every evaluation metric of an in-memory model: BPB per reference set and the task suite.

The trainer calls it between steps, an ablation on each freshly trained proxy, `moelab eval` on a
loaded checkpoint. Bounded in time without making numbers incomparable: each reference set and each
task is either scored in full or not at all; when `max_seconds` runs out the rest are skipped,
counted in `skipped_for_time` and logged, so a metric that is present always means the same items.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from shared.eval.bpb import bits_per_byte
from shared.eval.reference_sets import load_reference_sets
from shared.eval.tasks import discover_tasks, score_task

log = logging.getLogger(__name__)


def evaluate_model(model, tokenizer, *, reference_sets: dict[str, list[str]] | list[str] | None = None,
                   tasks_path: Path | str | None = None, max_seconds: float | None = None,
                   seq_len: int | None = None, batch_size: int = 8, reference_texts: int | None = None,
                   task_items: int | None = None, include_tasks: bool = True) -> dict[str, float]:
    """Flat metrics: `bpb/<set>`, `nats_per_token/<set>`, `task/<task>/{acc,acc_norm,logprob}`.

    reference_sets: name → texts, or names under data/reference/, or None for all of them.
    tasks_path: a task YAML or folder (default: the offline suite, data/reference/tasks/).
    seq_len: the evaluation window (default: the model's `cfg.max_seq_len`); pass the training
    sequence length to score in the context the model was trained on.
    reference_texts / task_items: score only the first N texts of each set / items of each task.
    """
    if seq_len is None:
        seq_len = getattr(getattr(model, "cfg", None), "max_seq_len", None)
        if seq_len is None:
            raise ValueError("evaluate_model: pass seq_len (the model has no cfg.max_seq_len)")
    sets = reference_sets if isinstance(reference_sets, dict) else load_reference_sets(reference_sets)
    tasks = discover_tasks(tasks_path) if include_tasks else []
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    out: dict[str, float] = {}
    skipped: list[str] = []

    def out_of_time() -> bool:
        return deadline is not None and time.monotonic() >= deadline

    for name, texts in sets.items():
        if out_of_time():
            skipped.append(f"bpb/{name}")
            continue
        if not texts:
            raise ValueError(f"reference set {name!r} is empty; bits per byte needs at least one text")
        r = bits_per_byte(model, tokenizer, texts[:reference_texts], seq_len=seq_len, batch_size=batch_size)
        out[f"bpb/{name}"] = r.bpb
        out[f"nats_per_token/{name}"] = r.nats_per_token
    for task in tasks:
        if out_of_time():
            skipped.append(f"task/{task.name}")
            continue
        scores = score_task(model, tokenizer, task, seq_len=seq_len, batch_size=batch_size, limit=task_items)
        out.update({f"task/{task.name}/{k}": v for k, v in scores.items()})
    if skipped:
        log.warning("evaluation ran out of its %.0f s budget; not scored: %s", max_seconds, ", ".join(skipped))
        out["skipped_for_time"] = float(len(skipped))
    return out
