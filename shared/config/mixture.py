"""Mixture section: tokenizer, token shards and SeqIO-style sampling rates."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from shared.config.base import Section


class TokenizerConfig(Section):
    path: str | None = Field(None, description="A tokenizer.json to load; None trains a byte-level BPE on the corpus.")
    vocab_size: int = Field(4096, ge=260, le=1_048_576, description="Vocabulary size when training a tokenizer.")
    out_dir: str = Field("runs/tokenizer", min_length=1, description="Folder where a trained tokenizer is saved (and reused).")
    min_frequency: int = Field(2, ge=1, description="BPE: a pair must occur this often to be merged.")
    eos_token: str = Field("<|endoftext|>", min_length=1, description="Special token that separates documents when packing.")
    train_docs: int = Field(100_000, ge=1, description="At most this many documents (in input order) train the tokenizer.")


class MixtureConfig(Section):
    rates: dict[str, float] = Field(default_factory=dict, description="Target share of tokens per source; normalised to 1.")
    on_exhausted: Literal["repeat", "stop"] = Field(
        "repeat", description="When a source runs out: repeat it with a new epoch shuffle, or stop the stream."
    )
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig, description="Tokenizer used for the shards.")
    shard_dir: str = Field("runs/tokens", description="Directory of token shards (.bin + .idx + manifest.json).")
    documents: list[str] = Field(
        default_factory=list, description="Parquet globs or folders with a manifest.json to tokenize; empty: the shards the data "
        "filter's manifest in data.out_dir declares."
    )
    eval_documents: list[str] = Field(
        default_factory=list, description="Parquet globs of held-out documents for the trainer's eval loss (empty: no eval)."
    )
    docs_per_shard: int = Field(50_000, ge=1, description="Rows per tokenization work item (≈ documents per shard).")
    workers: int = Field(2, ge=1, le=4096, description="Concurrent Ray Data tokenization tasks.")
    cpus_per_worker: float = Field(0.5, gt=0, le=64, description="CPUs reserved per tokenization task (fractional avoids starving other stages).")
    use_ray: bool = Field(True, description="Build shards with Ray Data; false tokenizes in this process.")
    doc_boundaries: bool = Field(False, description="Also yield per-token document ids for document-masked attention.")
    verify: Literal["size", "full"] = Field(
        "size", description="Shard check when opening: file sizes only, or full sha256 of every shard."
    )

    @field_validator("rates")
    @classmethod
    def _check_rates(cls, rates: dict[str, float]) -> dict[str, float]:
        bad = {k: v for k, v in rates.items() if not (v >= 0.0 and v == v)}
        if bad:
            raise ValueError(f"rates must be non-negative numbers, got {bad}")
        if rates and sum(rates.values()) <= 0:
            raise ValueError("rates must not all be zero")
        return rates
