"""Data section: raw inputs and where the data filter writes its output.

The per-source filter chains live in `data.filter` (services/data_filter reads them).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.config.base import Section
from shared.config.filters import FilterConfig

SourceKind = Literal["web", "code", "math", "science"]


class InputSource(Section):
    name: str = Field(..., min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$", description="Source name (e.g. web).")
    kind: SourceKind = Field("web", description="Kind of text: selects the filter chain and the scorer rubric.")
    paths: list[str] = Field(..., min_length=1, description="Files or globs (JSONL, .jsonl.gz, .jsonl.zst, Parquet).")


class DataConfig(Section):
    inputs: list[InputSource] = Field(default_factory=list, description="Raw document sources.")
    out_dir: str = Field("runs/data", description="Directory for filtered Parquet shards and their manifests.")
    filter: FilterConfig = Field(default_factory=FilterConfig, description="Per-source filter chains, dedup and pipeline knobs.")
