"""Record an export on the run that trained the model, so a folder on disk leads back to its run.

The event (kind `artifact`) goes to the source run's tracker run (its id is in the checkpoint's
meta), through the same client as training: online when a tracker answers, spooled otherwise,
nothing when the run's tracker mode is `disabled`. Failing to record never fails an export.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from shared import tracking
from shared.checkpoint import TrainedModel

if TYPE_CHECKING:
    from services.exporter.export import ExportResult

log = logging.getLogger(__name__)


def record_export(trained: TrainedModel, result: ExportResult) -> str | None:
    """Send the `artifact` event; returns the tracker run id it went to (None when not recorded)."""
    cfg = trained.cfg
    if cfg.tracker.mode == "disabled":
        return None
    try:
        run = tracking.init(config=cfg, name=cfg.train.run_name or cfg.name, tags=["train", cfg.model.ffn],
                            id=trained.meta.get("tracker_run_id"), mode=cfg.tracker.mode)
        run.event("artifact", f"exported to {result.out} as {result.architecture.name}", step=trained.step,
                  path=str(result.out), format="hf", architecture=result.architecture.name,
                  max_abs_logit_diff=result.check.max_abs_logit_diff, greedy_equal=result.check.greedy_equal,
                  source_checkpoint=str(trained.checkpoint), router_bias=result.bias)
        run.finish()
        return run.id
    except Exception as exc:  # the export is done and checked; a tracker problem is reported, not fatal
        log.warning("export written but not recorded in the tracker: %s", exc)
        return None
