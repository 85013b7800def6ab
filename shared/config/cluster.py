"""Cluster section: where Ray work runs (a local in-process Ray by default, or a cluster address)."""

from __future__ import annotations

from pydantic import Field

from shared.config.base import Section


class ClusterConfig(Section):
    address: str | None = Field(
        None, description="Ray address to connect to ('auto', 'ray://host:10001'); None starts a local Ray."
    )
    num_cpus: int | None = Field(None, ge=1, description="CPUs for a local Ray (None: all cores).")
    namespace: str = Field("moelab", min_length=1, description="Ray namespace for named actors of the pipeline.")
