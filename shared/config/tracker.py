"""Tracker section: where runs report their metrics (see services/tracker and shared/tracking)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from shared.config.base import Section


class TrackerConfig(Section):
    url: str = Field("http://127.0.0.1:8000", description="Base URL of the tracker service the client reports to.")
    project: str = Field("moelab", min_length=1, max_length=128, description="Project name that groups runs.")
    mode: Literal["online", "offline", "disabled"] = Field(
        "online", description="online: send (spooling while the server is down); offline: spool only; disabled: no tracking."
    )
    db_url: str = Field(
        "sqlite:///runs/tracker.db", description="SQLAlchemy URL of the tracker's store (SQLite file or PostgreSQL URL)."
    )
    port: int = Field(8000, ge=1, le=65535, description="Port `moelab tracker serve` listens on.")
    token_env: str = Field("MOELAB_TRACKER_TOKEN", description="Environment variable holding the API token for writes.")
    spool_dir: str = Field("runs/spool", description="Directory where the client spools points it could not send.")
    parent: str | None = Field(
        None, description="Pipeline (parent run) id that runs of this config belong to (set by cluster.pipeline for lineage)."
    )
    token_file: str = Field(
        "runs/tracker.token", description="File the client reads the API token from when the token variable is unset."
    )
    flush_interval_s: float = Field(
        1.0, gt=0, le=60, description="Seconds between the client's background batch sends."
    )
    heartbeat_s: float = Field(
        10.0, gt=0, le=600, description="Seconds between the client's heartbeats (a run without them becomes crashed)."
    )
    crash_after_s: float = Field(
        120.0, gt=0, le=86_400, description="Server: seconds without a heartbeat after which a running run is crashed."
    )
    read_protected: bool = Field(False, description="Require an API token for reads and pages (the dashboard asks for it).")
    allowed_hosts: list[str] = Field(
        default_factory=lambda: ["localhost", "127.0.0.1", "::1"],
        description="Host headers the server answers (DNS-rebinding guard); `serve --host` adds its interface; '*' allows any.",
    )
    max_body_mb: float = Field(32.0, gt=0, le=1024, description="Largest request body the server accepts, in MiB.")

    @model_validator(mode="after")
    def _heartbeats_outpace_the_crash_timeout(self):
        if self.crash_after_s < 3 * self.heartbeat_s:
            raise ValueError(
                f"tracker.crash_after_s={self.crash_after_s} must be at least 3 x tracker.heartbeat_s="
                f"{self.heartbeat_s}, or live runs would be marked crashed between two heartbeats"
            )
        return self
