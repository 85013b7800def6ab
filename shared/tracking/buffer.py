"""The run's in-memory buffer and how it is cut into batches the server takes whole.

A batch is bounded three ways, each below what the server refuses: scalar points
(`max_batch_points`, the server takes 200,000), items per list (`MAX_ITEMS_PER_BATCH`) and an
estimate of its JSON size (`max_batch_bytes`, well under the server's default 32 MiB body limit);
a long network stall can buffer far more than one batch holds.
"""

from __future__ import annotations

import uuid
from typing import Any

from shared.tracking.schema import MAX_ITEMS_PER_BATCH

POINT_BYTES = 40  # a step, a wall time and a value in JSON, with separators


class Buffer:
    """Points and items logged since the last batch; the caller holds the run's lock around it."""

    def __init__(self):
        self.metrics: dict[str, tuple[list, list, list]] = {}
        self.items: dict[str, list[tuple[dict[str, Any], int]]] = {"histograms": [], "events": [], "artifacts": []}
        self.pending = 0  # scalar points + items: wakes the sender when it reaches a batch's worth

    def add_points(self, step: int, wall: float, encoded: list[tuple[str, float | str]]) -> None:
        for key, value in encoded:
            cols = self.metrics.get(key)
            if cols is None:
                cols = self.metrics[key] = ([], [], [])
            cols[0].append(step)
            cols[1].append(wall)
            cols[2].append(value)
        self.pending += len(encoded)

    def add_item(self, field: str, item: dict[str, Any], size: int) -> None:
        """An item with the size of its JSON text (known from its validation)."""
        self.items[field].append((item, size))
        self.pending += 1

    def take_batches(self, run_id: str, max_points: int, max_bytes: int) -> list[dict[str, Any]]:
        """Everything buffered, as batch ops within the bounds above; the buffer is left empty."""
        if not self.pending:
            return []
        metrics, self.metrics = self.metrics, {}
        items, self.items = self.items, {"histograms": [], "events": [], "artifacts": []}
        self.pending = 0
        bodies: list[dict[str, Any]] = []
        body = _empty_body()
        room_points, room_bytes = max_points, max_bytes
        for key, (steps, walls, values) in metrics.items():
            i = 0
            while i < len(steps):
                fit = min(room_points, max(1, room_bytes // POINT_BYTES))
                if room_points == 0 or room_bytes < POINT_BYTES:
                    bodies.append(body)
                    body, room_points, room_bytes = _empty_body(), max_points, max_bytes
                    continue
                j = min(len(steps), i + fit)
                body["metrics"][key] = {"steps": steps[i:j], "walls": walls[i:j], "values": values[i:j]}
                room_points -= j - i
                room_bytes -= (j - i) * POINT_BYTES
                i = j
        for field in ("histograms", "events", "artifacts"):
            for item, size in items[field]:
                if len(body[field]) >= MAX_ITEMS_PER_BATCH or (size > room_bytes and _holds_anything(body)):
                    bodies.append(body)
                    body, room_points, room_bytes = _empty_body(), max_points, max_bytes
                body[field].append(item)
                room_bytes -= size
        bodies.append(body)
        return [{"op": "batch", "run": run_id, "body": b} for b in bodies if _holds_anything(b)]


def _empty_body() -> dict[str, Any]:
    return {"batch_id": uuid.uuid4().hex, "metrics": {}, "histograms": [], "events": [], "artifacts": []}


def _holds_anything(body: dict[str, Any]) -> bool:
    return bool(body["metrics"] or body["histograms"] or body["events"] or body["artifacts"])
