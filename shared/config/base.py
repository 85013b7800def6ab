"""Base class for every config section.

Why a shared base: every knob must be a validated field with a default and a one-line
description, and an unknown key must be an error (never silently ignored), so all sections
forbid extra keys and validate on assignment (overrides are applied through the same path).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A strict config section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, validate_default=True)
