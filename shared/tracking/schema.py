"""What the tracker stores: one set of rules that the client applies when an item is logged and the
server applies when it arrives, so whatever the client accepts the server stores.

Both sides validate the same pydantic models from the same JSON text (`check` serialises an item
the way the client sends it and parses it back with the server's model), so there is no second,
drifting copy of a rule. The one exception is the scalar hot path (`log` runs per step, per key):
it checks keys with `KEY_RE` and values with `encode_number`, which are exactly what
`SeriesPoints` and `Batch.metrics` accept; a property test holds the two equal.

Non-finite numbers: JSON has no NaN/Inf, so a NaN or ±Inf *metric value* travels as one of the
strings "NaN", "Infinity", "-Infinity" and is stored as an IEEE value. Anywhere else (config,
event data, histogram entries) a non-finite number is refused: a store that cannot give it back
as JSON must not take it. Text fields refuse control characters (PostgreSQL's text type cannot
hold NUL, and a name with a newline breaks every table it is shown in); JSON values (config, event
data, artifact meta) may hold any text but must be at most `MAX_JSON_DEPTH` deep.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

PRINTABLE = r"[^\x00-\x1f\x7f-\x9f]"  # no C0/C1 control characters, no DEL
NAME_RE = rf"^{PRINTABLE}{{1,200}}$"
PROJECT_RE = rf"^[^\x00-\x20\x7f-\x9f]({PRINTABLE}{{0,126}}[^\x00-\x20\x7f-\x9f])?$"  # no outer spaces
TAG_RE = rf"^[^\x00-\x20\x7f-\x9f]({PRINTABLE}{{0,62}}[^\x00-\x20\x7f-\x9f])?$"
KEY_RE = r"^[A-Za-z0-9_.\-/:@%+=\[\] ]{1,200}$"
KIND_RE = r"^[A-Za-z0-9_.\-/]{1,64}$"
ID_RE = r"^[A-Za-z0-9_\-]{1,64}$"

MAX_STEP = 2**53 - 1  # the largest integer a browser's JavaScript number holds exactly
MAX_POINTS_PER_BATCH = 200_000
MAX_ITEMS_PER_BATCH = 10_000
MAX_VECTOR = 65_536
MAX_MESSAGE = 65_536
MAX_TAGS = 64
MAX_JSON_DEPTH = 32
NONFINITE_STRINGS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def json_value_problem(value: Any, depth: int = 0) -> str | None:
    """Why `value` cannot be stored and given back as JSON, or None when it can."""
    if depth > MAX_JSON_DEPTH:
        return f"nested deeper than {MAX_JSON_DEPTH} levels"
    if isinstance(value, float) and not math.isfinite(value):
        return f"non-finite number {value!r} (JSON has no NaN/Infinity; send it as a metric value)"
    if isinstance(value, str):
        return _text_problem(value)
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"key {k!r} is a {type(k).__name__}, not a string"
            problem = _text_problem(k) or json_value_problem(v, depth + 1)
            if problem:
                return f"at {k!r}: {problem}"
        return None
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            problem = json_value_problem(v, depth + 1)
            if problem:
                return f"at [{i}]: {problem}"
        return None
    if value is None or isinstance(value, bool | int | float):
        return None
    return f"{type(value).__name__} is not a JSON value"


def _text_problem(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"text holds a lone surrogate at index {exc.start} (not valid Unicode)"
    return None


def _json_ok(value: Any) -> Any:
    problem = json_value_problem(value)
    if problem:
        raise ValueError(problem)
    return value


JsonDict = Annotated[dict[str, Any], AfterValidator(_json_ok)]
Key = Annotated[str, StringConstraints(pattern=KEY_RE)]
Tag = Annotated[str, StringConstraints(pattern=TAG_RE)]
RunId = Annotated[str, StringConstraints(pattern=ID_RE)]
Name = Annotated[str, StringConstraints(pattern=NAME_RE)]
Step = Annotated[StrictInt, Field(ge=0, le=MAX_STEP)]
Wall = Annotated[float, Field(strict=True, ge=0, le=1e11)]  # seconds since 1970, finite
Number = Annotated[float, Field(strict=True)]  # finite (allow_inf_nan=False); JSON ints too, never strings
NonFinite = Literal["NaN", "Infinity", "-Infinity"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class RunCreate(Strict):
    id: RunId | None = Field(None, description="Client-chosen run id; an existing id resumes that run.")
    project: Annotated[str, StringConstraints(pattern=PROJECT_RE)] = "default"
    name: Name | None = None
    config: JsonDict = Field(default_factory=dict)
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    git_commit: Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{4,64}$")] | None = None
    host: Annotated[str, StringConstraints(pattern=rf"^{PRINTABLE}{{0,255}}$")] | None = None
    parent: RunId | None = Field(None, description="Pipeline (parent run) id, for lineage.")
    created: Wall | None = Field(None, description="Client wall time of init (kept when replayed later).")
    fork_of: RunId | None = Field(None, description="Start this new run from another run's history (a fork).")
    fork_step: Step | None = Field(None, description="The fork keeps the source's points up to this step.")

    @model_validator(mode="after")
    def _fork_names_its_step(self):
        if (self.fork_of is None) != (self.fork_step is None):
            raise ValueError("fork_of and fork_step go together: name the run to fork and the last step it keeps")
        return self


class RunFinish(Strict):
    status: Literal["finished", "failed", "crashed"] = "finished"
    wall: Wall | None = None


class SeriesPoints(Strict):
    steps: list[Step] = Field(max_length=MAX_POINTS_PER_BATCH)
    walls: list[Wall] = Field(max_length=MAX_POINTS_PER_BATCH)
    values: list[Number | NonFinite] = Field(max_length=MAX_POINTS_PER_BATCH)

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
    step: Step
    wall: Wall
    values: list[Number] = Field(min_length=1, max_length=MAX_VECTOR)
    edges: list[Number] | None = Field(None, max_length=MAX_VECTOR + 1)

    @model_validator(mode="after")
    def _edges_match(self):
        if self.edges is not None and len(self.edges) != len(self.values) + 1:
            raise ValueError(f"edges must have len(values)+1 = {len(self.values) + 1} entries, got {len(self.edges)}")
        return self


class EventIn(Strict):
    kind: Annotated[str, StringConstraints(pattern=KIND_RE)]
    message: Annotated[str, StringConstraints(pattern=r"^[^\x00]*$", max_length=MAX_MESSAGE)] = ""
    data: JsonDict = Field(default_factory=dict)
    step: Step | None = None
    wall: Wall


class ArtifactIn(Strict):
    name: Name
    kind: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")] = "file"
    path: Annotated[str, StringConstraints(pattern=r"^[^\x00]+$", max_length=4096)]
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] | None = None
    size: Annotated[StrictInt, Field(ge=0, le=2**62)] | None = None
    meta: JsonDict = Field(default_factory=dict)


class Batch(Strict):
    batch_id: RunId = Field(description="Unique per batch; a batch sent twice is stored once.")
    metrics: dict[Key, SeriesPoints] = Field(default_factory=dict, max_length=MAX_ITEMS_PER_BATCH)
    histograms: list[HistogramIn] = Field(default_factory=list, max_length=MAX_ITEMS_PER_BATCH)
    events: list[EventIn] = Field(default_factory=list, max_length=MAX_ITEMS_PER_BATCH)
    artifacts: list[ArtifactIn] = Field(default_factory=list, max_length=1_000)

    @field_validator("metrics")
    @classmethod
    def _total_points(cls, metrics):
        total = sum(len(s.steps) for s in metrics.values())
        if total > MAX_POINTS_PER_BATCH:
            raise ValueError(f"a batch holds at most {MAX_POINTS_PER_BATCH} points, got {total}; send smaller batches")
        return metrics


ITEM_MODELS: dict[str, type[Strict]] = {"histograms": HistogramIn, "events": EventIn, "artifacts": ArtifactIn}


def describe(exc: ValidationError) -> str:
    """A ValidationError as one line: `field: message; field: message`."""
    parts = []
    for err in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def check(model: type[Strict], item: dict[str, Any], what: str) -> int:
    """Validate `item` exactly as the server will (from its JSON text); raise ValueError naming `what`.

    Returns the size of that JSON text in bytes (what the item adds to a request body)."""
    problem = json_value_problem(item)
    if problem:
        raise ValueError(f"{what}: {problem}")
    text = json.dumps(item, allow_nan=False)
    try:
        model.model_validate_json(text)
    except ValidationError as exc:
        raise ValueError(f"{what} is not accepted by the tracker: {describe(exc)}") from None
    return len(text)


def encode_number(value: Any, what: str) -> float | str:
    """A metric value as JSON carries it: finite numbers as floats, NaN/±Inf as the agreed strings."""
    if hasattr(value, "item"):  # torch / numpy scalars
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number, got {type(value).__name__}: {value!r}")
    try:
        value = float(value)
    except OverflowError:
        raise ValueError(f"{what} is too large for a float64: {value!r}") from None
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
