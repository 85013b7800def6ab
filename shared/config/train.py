"""Train section: the step loop, batch shape, logging cadence, checkpoints, parallelism and health."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from shared.config.base import Section


class RouterHealthConfig(Section):
    """Thresholds for router-health warnings (services/trainer/health.py)."""

    maxvio_threshold: float = Field(1.0, gt=0.0, description="Warn when a layer's MaxVio stays above this for `window` steps.")
    dead_window: int = Field(50, ge=1, description="Warn when an expert received no token for this many consecutive steps.")
    entropy_floor: float = Field(
        0.3, ge=0.0, le=1.0, description="Warn when mean router entropy falls below this fraction of log(n_experts)."
    )
    window: int = Field(20, ge=1, description="Consecutive steps a MaxVio/entropy condition must hold before warning.")
    stop_on_collapse: bool = Field(False, description="Stop the run (with a checkpoint) when a warning fires.")


class EvalSuiteConfig(Section):
    """Bits per byte on reference sets and the offline task suite, every `train.eval_every` steps
    (services/trainer/evaluation.py). Small by default: the first texts/items of each, bounded in time."""

    enabled: bool = Field(True, description="Evaluate BPB and the task suite at every eval step.")
    reference_sets: list[str] = Field(default_factory=lambda: ["prose", "code", "math"],
                                      description="Reference sets (data/reference/<name>.jsonl) to score in bits per byte.")
    reference_texts: int = Field(4, ge=1, le=100_000, description="First N texts of each reference set scored.")
    tasks: bool = Field(True, description="Also score the task suite (acc, acc_norm, gold log-prob).")
    tasks_path: str | None = Field(None, description="Task YAML file or folder; None = the offline suite (data/reference/tasks).")
    task_items: int = Field(16, ge=1, le=100_000, description="First N items of each task scored.")
    batch_size: int = Field(8, ge=1, le=4096, description="Sequences per evaluation forward.")
    max_seconds: float = Field(
        120.0, gt=0.0, description="Time budget per evaluation; sets/tasks not started in time are skipped and counted."
    )

    @model_validator(mode="after")
    def _check_files(self) -> EvalSuiteConfig:
        if not self.enabled:
            return self
        from shared.eval.reference_sets import REFERENCE_DIR, available_reference_sets

        known = available_reference_sets()
        unknown = [n for n in self.reference_sets if n not in known]
        if unknown:
            raise ValueError(f"eval_suite.reference_sets: unknown {unknown}; available in {REFERENCE_DIR}: {known}")
        if self.tasks and self.tasks_path is not None:
            from pathlib import Path

            if not Path(self.tasks_path).exists():
                raise ValueError(f"eval_suite.tasks_path: {self.tasks_path} does not exist (a task YAML or folder)")
        return self


class TrainConfig(Section):
    seed: int = Field(0, ge=0, description="Seed for init, data order and dropout; same seed ⇒ same run.")
    steps: int = Field(200, ge=1, description="Optimizer steps.")
    seq_len: int = Field(128, ge=8, description="Tokens per training sequence.")
    micro_batch_size: int = Field(8, ge=1, description="Sequences per micro-batch per data-parallel rank.")
    grad_accum: int = Field(1, ge=1, description="Micro-batches accumulated per optimizer step.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: CUDA when available, else CPU.")
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="Autocast dtype for the forward (bfloat16 on GPU; CPUs here have no hardware bf16)."
    )
    compile: bool = Field(False, description="Compile each transformer block with torch.compile.")
    activation_checkpointing: bool = Field(
        False, description="Recompute each block's activations in backward (less memory, ~1/3 more compute)."
    )
    activation_checkpointing_policy: Literal["full", "selective"] = Field(
        "full",
        description="With activation_checkpointing: full recomputes each block's whole forward; selective keeps the "
        "outputs of its GEMMs and attention calls and recomputes only the cheap ops between them (more memory, "
        "about a third less recompute time).",
    )
    out_dir: str = Field("runs", description="Directory under which each run writes its config, checkpoints and logs.")
    run_name: str | None = Field(None, description="Run directory name under out_dir; None = the experiment name.")
    init_from: str | None = Field(
        None,
        description="A run folder (its newest checkpoint) or a checkpoints/step_* folder whose weights a new run "
        "starts from, at step 0 with a fresh optimizer and schedule (e.g. the output of `moelab import`); its "
        "config.yaml's model section must equal `model`. None = random init. --resume from this run's own "
        "checkpoint takes precedence.",
    )
    tags: list[str] = Field(
        default_factory=list, max_length=32,
        description="Tracker tags added after the fixed ones (train, the FFN kind), e.g. an ablation's arm:<name>; "
                    "each 1-64 printable characters, no surrounding space.",
    )
    log_every: int = Field(1, ge=1, description="Steps between scalar metric reports.")
    hist_every: int = Field(10, ge=1, description="Steps between expert-load histogram reports.")
    eval_every: int = Field(50, ge=1, description="Steps between held-out eval-loss measurements.")
    eval_batches: int = Field(4, ge=1, description="Micro-batches per eval.")
    eval_suite: EvalSuiteConfig = Field(default_factory=EvalSuiteConfig,
                                        description="BPB per reference set and task scores at every eval step.")
    checkpoint_every: int = Field(100, ge=1, description="Steps between checkpoints (and one at the end).")
    keep_last: int = Field(2, ge=1, description="Checkpoints kept on disk.")
    max_bad_steps: int = Field(
        5, ge=1, description="Consecutive NaN/Inf steps (skipped and counted) after which the run stops."
    )
    fault_inject_nan_steps: list[int] = Field(
        default_factory=list, description="Steps whose loss is made NaN on purpose, to test the bad-step guard."
    )
    workers: int = Field(1, ge=1, description="Training processes (Ray Train workers).")
    ep_size: int = Field(1, ge=1, description="Expert-parallel group size: routed experts are sharded over it.")
    dp_size: int = Field(1, ge=1, description="Data-parallel degree for dense/attention parameters (FSDP2).")
    ep_overlap: bool = Field(
        False,
        description="EP only: send each MoE layer's tokens as two pipelined halves, hiding one half's all-to-all "
        "behind the other's expert compute (and the shared experts behind the dispatch), forward and backward.",
    )
    router_health: RouterHealthConfig = Field(default_factory=RouterHealthConfig, description="Router-health warnings.")

    @model_validator(mode="after")
    def _check_parallel(self) -> TrainConfig:
        if self.dp_size != self.workers:
            raise ValueError(f"dp_size ({self.dp_size}) must equal workers ({self.workers}): every worker is a DP rank")
        if self.workers % self.ep_size:
            raise ValueError(f"ep_size ({self.ep_size}) must divide workers ({self.workers})")
        if self.ep_overlap and self.ep_size == 1:
            raise ValueError("ep_overlap=true needs ep_size > 1: without expert parallel there is no all-to-all to overlap")
        return self

    @model_validator(mode="after")
    def _check_tags(self) -> TrainConfig:
        """The tracker refuses a run whose tags it cannot store; say which one here, before training."""
        for tag in self.tags:
            if not (1 <= len(tag) <= 64 and tag == tag.strip() and tag.isprintable()):
                raise ValueError(f"tags: {tag!r} is not a tracker tag (1-64 printable characters, no surrounding space)")
        return self
