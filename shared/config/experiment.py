"""The root config: one section per stage of the data-to-model path."""

from __future__ import annotations

from pydantic import Field, model_validator

from shared.config.ablation import AblationConfig
from shared.config.base import Section
from shared.config.cluster import ClusterConfig
from shared.config.data import DataConfig
from shared.config.mixture import MixtureConfig
from shared.config.model import ModelConfig
from shared.config.optim import OptimConfig
from shared.config.scorer import ScorerConfig
from shared.config.tracker import TrackerConfig
from shared.config.train import TrainConfig


class ExperimentConfig(Section):
    name: str = Field("experiment", min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$", description="Experiment name.")
    data: DataConfig = Field(default_factory=DataConfig, description="Raw inputs and the data filter.")
    scorer: ScorerConfig = Field(default_factory=ScorerConfig, description="Model-based quality scoring.")
    mixture: MixtureConfig = Field(default_factory=MixtureConfig, description="Tokenizer, shards and mixture rates.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="The MoE transformer.")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimizer and LR schedule.")
    train: TrainConfig = Field(default_factory=TrainConfig, description="Training loop.")
    tracker: TrackerConfig = Field(default_factory=TrackerConfig, description="Experiment tracking.")
    cluster: ClusterConfig = Field(default_factory=ClusterConfig, description="Where Ray work runs.")
    ablation: AblationConfig | None = Field(None, description="Data arms × seeds compared by `moelab ablate` (None: no ablation).")

    @model_validator(mode="after")
    def _check_cross_section(self) -> ExperimentConfig:
        p = self.model.moe.precision
        if p.fp8_scaling == "delayed" and p.expert == "fp8" and self.train.ep_size > 1:
            raise ValueError(
                "model.moe.precision.fp8_scaling=delayed with train.ep_size > 1 is not supported: each rank would "
                "keep amax histories for its own experts only, and they are reduced over data-parallel ranks "
                "alone; use fp8_scaling=current, or ep_size=1"
            )
        if self.ablation is not None and self.train.workers != 1:
            raise ValueError(f"ablation: each arm-seed trains as one Ray task; set train.workers=1 "
                             f"(got {self.train.workers})")
        if self.ablation is not None:
            from shared.config.ablation import check_arms_against_data

            check_arms_against_data(self.ablation, self.data)
        if self.cluster.gpu_nodes:  # what the declared GPU groups cannot hold fails before any stage runs
            from shared.placement import check_gpu_request, config_gpu_requests, declared_nodes

            nodes = declared_nodes(self.cluster.gpu_nodes)
            for request in config_gpu_requests(self):
                check_gpu_request(request, nodes)
        return self
