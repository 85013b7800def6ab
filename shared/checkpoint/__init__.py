"""Reading trained checkpoints outside the trainer: evaluation, export, generation, calibration."""

from shared.checkpoint.read import (
    CheckpointError,
    TrainedModel,
    inspect_checkpoint,
    load_trained_model,
    resolve_checkpoint,
)

__all__ = ["CheckpointError", "TrainedModel", "inspect_checkpoint", "load_trained_model", "resolve_checkpoint"]
