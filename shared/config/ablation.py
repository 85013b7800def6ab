"""Ablation section: K data arms × S seeds of the same proxy, compared on the same evaluations.

Each arm names only its data recipe (which documents, optionally run through the data filter
with the arm's own overrides, or the scorer's scored set re-selected at another keep rate,
optionally re-weighted); the model, optimizer, schedule, token
budget (train.steps × tokens per step) and tokenizer are the experiment's and shared by every
arm, so a difference between arms is a difference between their data.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from shared.config.base import Section


class ArmConfig(Section):
    name: str = Field("", max_length=60, pattern=r"^[A-Za-z0-9_.-]*$", description="Arm name (e.g. raw, curated); required.")
    documents: list[str] = Field(
        default_factory=list,
        description="JSONL(.gz) or Parquet globs the arm trains on as they are (e.g. raw inputs or a pipeline's kept set).",
    )
    filter: dict[str, Any] | None = Field(
        None, description="Run the data filter over data.inputs with these overrides on data.filter ({} = as configured); "
                          "replaces `documents`.",
    )
    scores: str | None = Field(
        None, description="The scorer's scored set (the folder whose manifest.json lists the score stage's shards, "
                          "e.g. runs/pipeline/demo/scorer/scores), re-selected at `keep_rate`; replaces `documents`.",
    )
    keep_rate: float | None = Field(
        None, gt=0, le=1, description="With `scores`: fraction of each source's scored documents kept, highest "
                                      "scorer quality first (the scorer's per-source threshold set at this rate).",
    )
    rates: dict[str, float] = Field(
        default_factory=dict, description="Mixture rates per source for this arm; empty: each source by its tokens.",
    )

    @model_validator(mode="after")
    def _one_recipe(self) -> ArmConfig:
        if not self.name:
            raise ValueError("every arm needs a name (letters, digits, _ . -)")
        if sum((bool(self.documents), self.filter is not None, self.scores is not None)) != 1:
            raise ValueError(f"arm {self.name!r} needs exactly one recipe: `documents` (globs), `filter` (overrides) "
                             "or `scores` (the scorer's scored set, with `keep_rate`)")
        if (self.scores is None) != (self.keep_rate is None):
            raise ValueError(f"arm {self.name!r}: `scores` and `keep_rate` go together (the scored set and the "
                             "fraction of each source to keep from it)")
        bad = {k: v for k, v in self.rates.items() if not v >= 0}
        if bad or (self.rates and sum(self.rates.values()) <= 0):
            raise ValueError(f"arm {self.name!r}: rates must be non-negative and not all zero, got {self.rates}")
        return self


class AblationConfig(Section):
    arms: list[ArmConfig] = Field(default_factory=list, description="The data recipes compared (at least two).")
    baseline: str = Field("", description="Arm every other arm is compared against (required).")
    seeds: int = Field(3, ge=2, le=64, description="Seeds per arm (init and data order); two or more give an interval.")
    first_seed: int = Field(0, ge=0, description="Seeds are first_seed, first_seed + 1, …")
    eval_documents: list[str] = Field(
        default_factory=list,
        description="Held-out JSONL/Parquet globs for eval loss on the shared tokenizer; removed from every arm by text.",
    )
    reference_sets: list[str] | None = Field(
        None, description="Reference sets for bits per byte (the evaluation suite's names); None: its defaults.",
    )
    tasks_path: str | None = Field(None, description="Offline task folder for the evaluation suite; None: its default.")
    suite: bool = Field(True, description="Also run the evaluation suite (BPB per reference set, tasks) on each model.")
    reference_texts: int | None = Field(None, ge=1, description="Score only the first N texts of each reference set.")
    task_items: int | None = Field(None, ge=1, description="Score only the first N items of each task.")
    eval_max_seconds: float | None = Field(None, gt=0, description="Time bound for one model's evaluation suite.")
    tokenizer_path: str | None = Field(
        None, description="tokenizer.json shared by every arm; None trains one on an equal sample of every arm.",
    )
    tokenizer_docs_per_arm: int = Field(2000, ge=1, description="Documents per arm in the shared tokenizer's sample.")
    max_epochs: float = Field(
        1.0, gt=0, le=100, description="Passes over an arm's tokens the budget may take; an arm holding fewer tokens "
                                       "than budget / max_epochs is refused before training.",
    )
    cpus_per_run: float = Field(1.0, gt=0, le=256, description="Ray CPUs per arm-seed task (torch uses that many threads).")
    gpus_per_run: float = Field(0.0, ge=0, le=8, description="Ray GPUs per arm-seed task.")
    retries: int = Field(1, ge=0, le=5, description="Times a failed arm-seed is retried before it is reported as failed.")
    out_dir: str = Field("runs/ablation", min_length=1, description="Folder for the arms' data, runs and the report.")
    pipeline_stage: bool = Field(
        False, description="cluster.pipeline also runs this ablation, as a stage after the data stages (a rerun "
                           "skips it while its config and the data before it are unchanged).",
    )

    @model_validator(mode="after")
    def _arms_are_distinct_and_baseline_is_one(self) -> AblationConfig:
        if len(self.arms) < 2:
            raise ValueError(f"an ablation compares at least two arms; got {len(self.arms)}")
        if not self.eval_documents:
            raise ValueError("eval_documents is empty: name held-out documents every arm is measured on")
        names = [a.name for a in self.arms]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"arm names must be unique; repeated: {dup}")
        if self.baseline not in names:
            raise ValueError(f"baseline {self.baseline!r} is not an arm (arms: {', '.join(names)})")
        return self


def arm_data(data: Any, arm: ArmConfig) -> Any:
    """The data section a `filter` arm runs: `data` with the arm's overrides merged onto `data.filter`
    (a `DataConfig`; raises pydantic's ValidationError naming the bad filter field)."""
    from shared.config.chains import deep_merge

    merged = deep_merge(data.model_dump(mode="json"), {"filter": arm.filter or {}})
    return type(data).model_validate(merged)


def check_arms_against_data(ablation: AblationConfig, data: Any) -> None:
    """Refuse, at config load, a filter arm that has no `data.inputs` to filter or whose overrides do
    not make a valid filter config."""
    from pydantic import ValidationError

    for arm in ablation.arms:
        if arm.filter is None:
            continue
        if not data.inputs:
            raise ValueError(f"ablation arm {arm.name!r} filters data.inputs, but data.inputs is empty")
        try:
            arm_data(data, arm)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ValueError(f"ablation arm {arm.name!r}: filter override is invalid at data.{where}: "
                             f"{first['msg']}") from None
