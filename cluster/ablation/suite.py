"""The default measurement of an arm-seed's model: the evaluation suite (BPB per reference set, tasks).

Kept in its own module so that an ablation run without the suite (`ablation.suite: false`, or the
tests' own metric) never imports it, and so that a missing evaluation package is found before any
arm trains (`check_available`), not after the first model is built.
"""

from __future__ import annotations

from cluster.ablation.documents import RecipeError
from shared.config import ExperimentConfig

SUITE_MODULES = ("shared.eval.suite", "shared.checkpoint.read")


def check_available() -> None:
    import importlib

    for name in SUITE_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise RecipeError(f"ablation.suite=true needs {name} ({exc}); set ablation.suite=false to compare the "
                               "arms on held-out eval loss alone") from None


def suite_metrics(checkpoint: str, cfg: ExperimentConfig, settings: dict) -> dict[str, float]:
    """Load the arm-seed's final checkpoint and run the evaluation suite on it."""
    from shared.checkpoint.read import load_trained_model
    from shared.eval.suite import evaluate_model

    trained = load_trained_model(checkpoint)
    # the window is the model's max_seq_len (the suite's default): task continuations may be longer
    # than the training sequences, and a RoPE model reads up to max_seq_len
    return evaluate_model(trained.model, trained.tokenizer, **settings)


class SuiteMetrics:
    """A picklable metric callable (Ray ships it to each arm-seed task) bound to the ablation's suite settings."""

    def __init__(self, ablation):
        self.settings = {"reference_sets": ablation.reference_sets, "tasks_path": ablation.tasks_path,
                         "max_seconds": ablation.eval_max_seconds, "reference_texts": ablation.reference_texts,
                         "task_items": ablation.task_items}

    def __call__(self, checkpoint: str, cfg: ExperimentConfig) -> dict[str, float]:
        values = suite_metrics(checkpoint, cfg, self.settings)
        # a metric the time bound left out is missing from this seed (so compared on fewer seeds), not zero
        return {k: float(v) for k, v in values.items() if k != "skipped_for_time"}
