"""What `Run.finish()` returns: how much of the run reached the server, and what did not.

Why a return value and not only a message: a caller that measures (a benchmark) or reports (the
trainer's result) must be able to tell a fully delivered run from one whose points sit in a spool
or were refused; a line on stderr is easy to miss and impossible to test against.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Delivery:
    """Counts for one run at its `finish()` (scalar points; ops are whole requests)."""

    run_id: str
    mode: str
    points_logged: int  # scalar points `log` accepted, and the system samples the run took
    points_stored: int  # scalar points the server acknowledged as stored
    points_spooled: int  # scalar points left in the spool (offline, or the server could not be reached)
    ops_spooled: int  # requests left in the spool, `moelab tracker sync` uploads them
    refused: int  # ops, items or unreadable spool lines the server refused (kept in the rejected log)
    spool_path: str | None = None
    rejected_path: str | None = None

    @property
    def complete(self) -> bool:
        """Everything logged is on the server: nothing spooled, nothing refused."""
        return (self.mode != "disabled" and not self.ops_spooled and not self.refused
                and self.points_stored == self.points_logged)

    def as_dict(self) -> dict:
        return {**asdict(self), "complete": self.complete}

    def summary(self) -> str:
        state = "delivered" if self.complete else "NOT fully delivered"
        return (f"tracker run {self.run_id} {state}: {self.points_stored:,} of {self.points_logged:,} points stored, "
                f"{self.points_spooled:,} spooled in {self.ops_spooled} op(s), {self.refused} refused")
