"""What every oracle backend provides: raw answers for a list of prompts, counted.

Backends only produce text; validation against the rubric's schema, retries of invalid answers
and recording failures live in `services.scorer.labeling`, so every backend gets them the same.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True)
class OracleRequest:
    prompt: str
    schema: dict
    text: str
    kind: str
    regex: str = ""


class Oracle(ABC):
    """Base class: `answer(requests)` returns one raw string per request (never raises per item).

    `calls` counts documents sent to the model (tests use it to prove the cache works); a
    transport failure after all retries is returned as an answer starting with `<error>` so the
    labeller records it with the reason instead of losing the document.
    """

    name = "oracle"
    model = "unknown"
    is_stand_in = False

    def __init__(self) -> None:
        self.calls = 0

    def answer(self, requests: list[OracleRequest]) -> list[str]:
        self.calls += len(requests)
        return self._answer(requests)

    @abstractmethod
    def _answer(self, requests: list[OracleRequest]) -> list[str]:
        """One raw answer per request, in order."""
