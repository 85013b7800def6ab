"""Data section: raw inputs, the filter chain each input runs, and where the data filter writes.

Each input runs one chain: `data.filter.chains[input.chain or input.kind]` with the input's own
`filter` overrides deep-merged on top, so one source can keep its own languages or thresholds
without restating the chain. Every input's chain is resolved and validated here, which is what
makes `moelab config check` catch an unknown filter, field or chain before any work starts.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from shared.config.base import Section
from shared.config.chains import ChainConfig, FilterConfig, deep_merge, relocate
from shared.config.kinds import SOURCE_KINDS, SourceKind

__all__ = ["SOURCE_KINDS", "DataConfig", "InputSource", "SourceKind"]


class InputSource(Section):
    name: str = Field(..., min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$", description="Source name (e.g. web).")
    kind: SourceKind = Field("web", description="Kind of text: selects the default filter chain and the scorer rubric.")
    paths: list[str] = Field(..., min_length=1, description="Files or globs (JSONL, .jsonl.gz, .jsonl.zst, Parquet).")
    chain: str | None = Field(None, description="Name of the chain in data.filter.chains this input runs; None = its kind's.")
    filter: dict[str, Any] | None = Field(
        None, description="Overrides merged onto that chain for this input only (e.g. {language: {languages: [es]}})."
    )


class DataConfig(Section):
    inputs: list[InputSource] = Field(default_factory=list, description="Raw document sources.")
    out_dir: str = Field("runs/data", description="Directory for filtered Parquet shards and their manifests.")
    filter: FilterConfig = Field(default_factory=FilterConfig, description="Per-source filter chains, dedup and pipeline knobs.")

    @model_validator(mode="after")
    def _every_input_has_a_valid_chain(self):
        errors: list[InitErrorDetails] = []
        names: set[str] = set()
        for i, src in enumerate(self.inputs):
            if src.name in names:
                errors.append({"type": PydanticCustomError("duplicate_input", "another input has this name; names must be unique"),
                               "loc": ("inputs", i, "name"), "input": src.name})
            names.add(src.name)
            errors.extend(self._chain_errors(i, src))
        if errors:
            raise ValidationError.from_exception_data("DataConfig", errors)
        return self

    def _chain_errors(self, i: int, src: InputSource) -> list[InitErrorDetails]:
        chain = src.chain or src.kind
        if chain not in self.filter.chains:
            msg = f"no chain named {chain!r} in data.filter.chains (have: {', '.join(self.filter.chains)})"
            return [{"type": PydanticCustomError("unknown_chain", msg), "loc": ("inputs", i, "chain" if src.chain else "kind"),
                     "input": chain}]
        if not src.filter:
            return []
        try:
            self.chain_for(src)
        except ValidationError as exc:
            return relocate(exc, ("inputs", i, "filter"))
        return []

    def chain_for(self, src: InputSource | str) -> ChainConfig:
        """The resolved chain of one input (by object or name): its chain plus its own overrides."""
        if isinstance(src, str):
            found = [s for s in self.inputs if s.name == src]
            if not found:
                raise KeyError(f"no input named {src!r} in data.inputs")
            src = found[0]
        base = self.filter.chains[src.chain or src.kind]
        if not src.filter:
            return base
        return ChainConfig.model_validate(deep_merge(base.model_dump(mode="json"), src.filter))

    def resolved_chains(self) -> dict[str, ChainConfig]:
        """Input name -> the chain it runs."""
        return {src.name: self.chain_for(src) for src in self.inputs}
