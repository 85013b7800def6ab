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


def suite_metrics(checkpoint: str, cfg: ExperimentConfig, reference_sets: list[str] | None, tasks_path: str | None,
                  max_seconds: float | None) -> dict[str, float]:
    """Load the arm-seed's final checkpoint and run the evaluation suite on it."""
    from shared.eval.suite import evaluate_model

    from shared.checkpoint.read import load_trained_model

    trained = load_trained_model(checkpoint)
    return evaluate_model(trained.model, trained.tokenizer, reference_sets=reference_sets, tasks_path=tasks_path,
                          max_seconds=max_seconds, seq_len=cfg.train.seq_len)


class SuiteMetrics:
    """A picklable metric callable (Ray ships it to each arm-seed task) bound to the ablation's suite settings."""

    def __init__(self, reference_sets: list[str] | None, tasks_path: str | None, max_seconds: float | None):
        self.reference_sets, self.tasks_path, self.max_seconds = reference_sets, tasks_path, max_seconds

    def __call__(self, checkpoint: str, cfg: ExperimentConfig) -> dict[str, float]:
        values = suite_metrics(checkpoint, cfg, self.reference_sets, self.tasks_path, self.max_seconds)
        return {k: float(v) for k, v in values.items() if isinstance(v, int | float)}
