"""Request bodies parsed strictly, and a batch validated item by item when it is not valid whole.

Every body is read as bytes and validated by the shared schema's models from its JSON text, so a
malformed body (not JSON, a bare NaN where a number belongs, a wrong type) is a 422 naming the
field, never a 500. A batch that fails validation as a whole is opened up: each series,
histogram, event and artifact is validated on its own, the valid ones are stored and the others
come back in `refused` with their reasons, so one bad item never costs the rest of its batch (a
batch whose every item is refused is a 422 listing them).
Only a broken envelope (not a JSON object, no valid `batch_id`, unknown fields, wrong container
types, over the batch limits) refuses the whole batch.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import HTTPException
from pydantic import BaseModel, TypeAdapter, ValidationError

from shared.tracking.schema import (
    ITEM_MODELS,
    MAX_ITEMS_PER_BATCH,
    Batch,
    Key,
    RunId,
    SeriesPoints,
    describe,
)

_KEY = TypeAdapter(Key)
_RUN_ID = TypeAdapter(RunId)
FIELDS = {"batch_id", "metrics", "histograms", "events", "artifacts"}


def unprocessable(detail: Any) -> HTTPException:
    return HTTPException(422, detail)


def parse_body(model: type[BaseModel], raw: bytes):
    """`model` from a JSON body, or a 422 with pydantic's field-by-field reasons."""
    if not raw.strip():
        raise unprocessable("the body is empty; send a JSON object")
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise unprocessable(json.loads(exc.json(include_url=False, include_input=False))) from None


def _load(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise unprocessable(f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise unprocessable(f"a batch must be a JSON object, got {type(data).__name__}")
    extra = set(data) - FIELDS
    if extra:
        raise unprocessable(f"unknown batch fields {sorted(extra)}; allowed: {sorted(FIELDS)}")
    try:
        _RUN_ID.validate_python(data.get("batch_id"))
    except ValidationError as exc:
        raise unprocessable(f"batch_id: {describe(exc)}") from None
    if not isinstance(data.get("metrics", {}), dict):
        raise unprocessable("metrics must be an object of key -> {steps, walls, values}")
    for field in ITEM_MODELS:
        items = data.get(field, [])
        if not isinstance(items, list):
            raise unprocessable(f"{field} must be a list")
        if len(items) > (1_000 if field == "artifacts" else MAX_ITEMS_PER_BATCH):
            raise unprocessable(f"{field}: too many items ({len(items)}); send smaller batches")
    if len(data.get("metrics", {})) > MAX_ITEMS_PER_BATCH:
        raise unprocessable(f"metrics: too many keys ({len(data['metrics'])}); send smaller batches")
    return data


def _item(model: type[BaseModel], item: Any):
    """Validate one item from its own JSON text: the same rules, the same parser as a whole batch."""
    return model.model_validate_json(json.dumps(item))


def parse_batch(raw: bytes) -> tuple[Batch, list[dict[str, str]]]:
    """(the storable part of the batch, the refused items with reasons)."""
    try:
        return Batch.model_validate_json(raw), []
    except ValidationError:
        pass  # open it up below
    data = _load(raw)
    refused: list[dict[str, str]] = []
    metrics = {}
    for key, points in data.get("metrics", {}).items():
        try:
            metrics[_KEY.validate_python(key)] = _item(SeriesPoints, points)
        except (ValidationError, ValueError) as exc:
            refused.append({"item": f"metrics.{key}", "error": describe(exc) if isinstance(exc, ValidationError)
                            else str(exc)})
    lists: dict[str, list] = {}
    for field, model in ITEM_MODELS.items():
        lists[field] = []
        for i, item in enumerate(data.get(field, [])):
            try:
                lists[field].append(_item(model, item))
            except (ValidationError, ValueError) as exc:
                refused.append({"item": f"{field}[{i}]", "error": describe(exc) if isinstance(exc, ValidationError)
                                else str(exc)})
    if refused and not metrics and not any(lists.values()):
        raise unprocessable({"error": "every item of the batch was refused", "refused": refused})
    try:
        batch = Batch.model_validate({"batch_id": data["batch_id"], "metrics": metrics, **lists})
    except ValidationError as exc:
        raise unprocessable(describe(exc)) from None
    return batch, refused
