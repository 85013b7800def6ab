"""Request bodies of the REST API: every user-supplied field validated for shape, size and charset.

Non-finite numbers: JSON has no NaN/Inf, so a value that is NaN or +-Inf travels as one of the
strings "NaN", "Infinity", "-Infinity" (what `shared.tracking` sends). Bare NaN/Infinity tokens
and any other string are rejected with 422, so a non-finite value is never stored by accident.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StringConstraints,
    field_validator,
    model_validator,
)

NAME_RE = r"^[^\x00-\x1f\x7f]{1,200}$"  # any printable text; the page escapes it
PROJECT_RE = r"^[A-Za-z0-9_.\-]{1,128}$"
KEY_RE = r"^[A-Za-z0-9_.\-/:@%+=\[\] ]{1,200}$"
TAG_RE = r"^[A-Za-z0-9_.\-:/+=@]{1,64}$"
ID_RE = r"^[A-Za-z0-9_\-]{1,64}$"

Key = Annotated[str, StringConstraints(pattern=KEY_RE)]
Tag = Annotated[str, StringConstraints(pattern=TAG_RE)]
RunId = Annotated[str, StringConstraints(pattern=ID_RE)]
NonFinite = Literal["NaN", "Infinity", "-Infinity"]

MAX_POINTS_PER_BATCH = 200_000
MAX_VECTOR = 65_536


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class RunCreate(Strict):
    id: RunId | None = Field(None, description="Client-chosen run id; an existing id resumes that run.")
    project: Annotated[str, StringConstraints(pattern=PROJECT_RE)] = "default"
    name: Annotated[str, StringConstraints(pattern=NAME_RE)] | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    tags: list[Tag] = Field(default_factory=list, max_length=64)
    git_commit: Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{4,64}$")] | None = None
    host: Annotated[str, StringConstraints(max_length=255, pattern=r"^[^\x00-\x1f\x7f]*$")] | None = None
    parent: RunId | None = Field(None, description="Pipeline (parent run) id, for lineage.")
    created: float | None = Field(None, description="Client wall time of init (kept when replayed later).")


class RunFinish(Strict):
    status: Literal["finished", "failed", "crashed"] = "finished"
    wall: float | None = None


class SeriesPoints(Strict):
    steps: list[Annotated[StrictInt, Field(ge=0, lt=2**62)]] = Field(max_length=MAX_POINTS_PER_BATCH)
    walls: list[StrictFloat | StrictInt] = Field(max_length=MAX_POINTS_PER_BATCH)
    values: list[StrictFloat | StrictInt | NonFinite] = Field(max_length=MAX_POINTS_PER_BATCH)

    @model_validator(mode="after")
    def _same_length(self):
        if not (len(self.steps) == len(self.walls) == len(self.values)):
            raise ValueError(
                f"steps, walls and values must have the same length "
                f"(got {len(self.steps)}, {len(self.walls)}, {len(self.values)})"
            )
        return self


class HistogramIn(Strict):
    key: Key
    step: int = Field(ge=0)
    wall: float
    values: list[float] = Field(min_length=1, max_length=MAX_VECTOR)
    edges: list[float] | None = Field(None, max_length=MAX_VECTOR + 1)

    @model_validator(mode="after")
    def _edges_match(self):
        if self.edges is not None and len(self.edges) != len(self.values) + 1:
            raise ValueError(f"edges must have len(values)+1 = {len(self.values) + 1} entries, got {len(self.edges)}")
        return self


class EventIn(Strict):
    kind: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.\-/]{1,64}$")]
    message: str = Field("", max_length=4096)
    data: dict[str, Any] = Field(default_factory=dict)
    step: int | None = Field(None, ge=0)
    wall: float


class ArtifactIn(Strict):
    name: Annotated[str, StringConstraints(pattern=NAME_RE)]
    kind: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")] = "file"
    path: str = Field(min_length=1, max_length=4096)
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] | None = None
    size: int | None = Field(None, ge=0)
    meta: dict[str, Any] = Field(default_factory=dict)


class Batch(Strict):
    batch_id: RunId = Field(description="Unique per batch; a batch sent twice is stored once.")
    metrics: dict[Key, SeriesPoints] = Field(default_factory=dict, max_length=10_000)
    histograms: list[HistogramIn] = Field(default_factory=list, max_length=10_000)
    events: list[EventIn] = Field(default_factory=list, max_length=10_000)
    artifacts: list[ArtifactIn] = Field(default_factory=list, max_length=1_000)

    @field_validator("metrics")
    @classmethod
    def _total_points(cls, metrics):
        total = sum(len(s.steps) for s in metrics.values())
        if total > MAX_POINTS_PER_BATCH:
            raise ValueError(f"a batch holds at most {MAX_POINTS_PER_BATCH} points, got {total}; send smaller batches")
        return metrics
