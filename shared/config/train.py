"""Train section: the step loop, batch shape, logging cadence, checkpoints and parallelism."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from shared.config.base import Section


class TrainConfig(Section):
    seed: int = Field(0, ge=0, description="Seed for init, data order and dropout; same seed ⇒ same run.")
    steps: int = Field(200, ge=1, description="Optimizer steps.")
    seq_len: int = Field(128, ge=8, description="Tokens per training sequence.")
    micro_batch_size: int = Field(8, ge=1, description="Sequences per micro-batch per data-parallel rank.")
    grad_accum: int = Field(1, ge=1, description="Micro-batches accumulated per optimizer step.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: CUDA when available, else CPU.")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="Autocast dtype for the forward (CPU: float32).")
    out_dir: str = Field("runs", description="Directory under which each run writes its config, checkpoints and logs.")
    log_every: int = Field(1, ge=1, description="Steps between scalar metric reports.")
    hist_every: int = Field(10, ge=1, description="Steps between expert-load histogram reports.")
    eval_every: int = Field(50, ge=1, description="Steps between held-out eval-loss measurements.")
    eval_batches: int = Field(4, ge=1, description="Micro-batches per eval.")
    checkpoint_every: int = Field(100, ge=1, description="Steps between checkpoints.")
    keep_last: int = Field(2, ge=1, description="Checkpoints kept on disk.")
    workers: int = Field(1, ge=1, description="Ray Train workers (processes).")
    ep_size: int = Field(1, ge=1, description="Expert-parallel group size.")
    dp_size: int = Field(1, ge=1, description="Data-parallel group size.")

    @model_validator(mode="after")
    def _check_parallel(self) -> TrainConfig:
        if self.ep_size * self.dp_size != self.workers and not (self.ep_size == 1 and self.dp_size == 1):
            raise ValueError(
                f"ep_size × dp_size ({self.ep_size}×{self.dp_size}) must equal workers ({self.workers})"
            )
        return self
