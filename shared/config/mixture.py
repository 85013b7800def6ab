"""Mixture section: tokenizer, token shards and SeqIO-style sampling rates."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from shared.config.base import Section


class TokenizerConfig(Section):
    path: str | None = Field(None, description="A tokenizer.json to load; None trains a byte-level BPE on the corpus.")
    vocab_size: int = Field(4096, ge=260, le=1_048_576, description="Vocabulary size when training a tokenizer.")


class MixtureConfig(Section):
    rates: dict[str, float] = Field(default_factory=dict, description="Target share of tokens per source; normalised to 1.")
    on_exhausted: Literal["repeat", "stop"] = Field(
        "repeat", description="When a source runs out: repeat it with a new epoch shuffle, or stop the stream."
    )
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig, description="Tokenizer used for the shards.")
    shard_dir: str = Field("runs/tokens", description="Directory of token shards (.bin + .idx + manifest.json).")

    @field_validator("rates")
    @classmethod
    def _check_rates(cls, rates: dict[str, float]) -> dict[str, float]:
        bad = {k: v for k, v in rates.items() if not (v >= 0.0 and v == v)}
        if bad:
            raise ValueError(f"rates must be non-negative numbers, got {bad}")
        if rates and sum(rates.values()) <= 0:
            raise ValueError("rates must not all be zero")
        return rates
