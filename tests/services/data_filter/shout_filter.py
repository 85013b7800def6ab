"""A toy filter written the way a new filter is added, to show (and test) that it is one file.

It lives outside `services/data_filter/filters/`, so the package's discovery never sees it: a
test adds it with the one registry line a plugin would write, `register_filter(ShoutFilter)`.
"""

from __future__ import annotations

from pydantic import Field

from services.data_filter.filters import Doc, Filter
from shared.config.filters import FilterSettings


class ShoutSettings(FilterSettings):
    enabled: bool = Field(False, description="Toy filter for the registry tests.")
    max_upper_ratio: float = Field(0.5, ge=0, le=1, description="Most upper-case letters per letter.")


class ShoutFilter(Filter):
    """Removes documents written in capitals."""

    name = "shout"
    reasons = ("too_much_upper_case",)
    settings = ShoutSettings

    def check(self, doc: Doc) -> str | None:
        letters = [c for c in doc.text if c.isalpha()]
        upper = sum(c.isupper() for c in letters) / max(len(letters), 1)
        return "too_much_upper_case" if upper > self.settings_for(doc).max_upper_ratio else None
