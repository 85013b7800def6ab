"""The tracking client every moelab stage reports through (a small, W&B-like API; stable).

    from shared import tracking
    run = tracking.init(project="moe-ablation", config=cfg, name="top2-fp8", tags=["fp8"], parent=None)
    run.log({"loss": 2.31, "lr": 3e-4, "tokens_per_s": 41_000, "mfu": 0.38}, step=120)
    run.log_histogram("router/load/layer3", per_expert_token_counts, step=120)   # → heatmap row
    run.event("router_health", "expert 5 dead for 200 steps", layer=3, expert=5, step=120)
    run.artifact("runs/ckpt/step_1000", kind="checkpoint")                      # path + sha256
    delivery = run.finish()   # counts stored / left spooled / refused; delivery.complete

Why our own client: it must never block or lose a point. `log` only appends to an in-memory
buffer; a background thread sends a batch every `flush_interval` seconds (columnar JSON, one
request for all keys). When the server is unreachable each batch is appended to a local spool
file (`<spool_dir>/<run_id>.jsonl`) and replayed in order once the server answers; the server
stores a batch id once, so a batch replayed twice is not double counted. `mode="offline"` only
spools (upload later with `moelab tracker sync`), `mode="disabled"` makes every call a no-op.
Resume a run by passing its id: `tracking.init(id=run.id, ...)`.

Every call is checked against the server's own schema (`shared.tracking.schema`) when it is made,
so what the client accepts the server stores; an item the server refuses anyway (an older
server, a smaller body limit) is refused alone, kept in `<run_id>.rejected.jsonl` with the reason
and listed in `run.refused`; `tracking.sync` offers it again.

Layout: `api` (init), `run` (the calls), `buffer` + `sender` (batching, the background thread),
`transport` (HTTP and what each answer means), `spool` (the spool, the rejected log, sync),
`schema` (the rules, shared with the server), `summaries` (funnel/calibration/hash helpers).

Conventions the dashboard renders (keys are free-form; these names get dedicated charts):
- scalars: `loss`, `lr`, `tokens_per_s`, `mfu`, `eval/loss` (training); `router/maxvio`,
  `router/dead_experts` (router health; `router/maxvio/layerN` per layer works too). A key logged
  once (a stage's figures) is shown in the run's summary table instead of a chart.
- histograms: `router/load/layerN` with one value per expert (token counts) → an expert-load
  heatmap per layer over steps. `log_histogram(key, samples, bins=30)` bins raw samples instead.
- events: any `kind`; `router_health`, `warning`, `error` and `bad_step` are drawn red on the charts.
- funnels: `run.log_funnel({"raw": 10_000, "language": 7_400, "dedup": 5_100}, name="documents")`
  sends an event of kind `funnel` (data: name, ordered stages with counts) → funnel chart; one per
  name (`documents/<source>` for a source's own funnel).
- calibration: `run.log_calibration(predicted, observed, name="helpfulness", bins=10)` sends an
  event of kind `calibration` (data: name, bins with edges, mean predicted/observed and count,
  ECE) → reliability diagram. Predicted and observed are on the same scale (e.g. 0–4 scores).
Non-finite values (NaN, ±Inf) are sent explicitly and counted by the server, never dropped.
"""

from __future__ import annotations

from shared.tracking.api import init, resolve_token
from shared.tracking.delivery import Delivery
from shared.tracking.run import Run
from shared.tracking.spool import SyncResult, replay_spool, sync
from shared.tracking.transport import Transport

# names the rest of the repository (and its tests) already use
_resolve_token = resolve_token
_Transport = Transport

__all__ = ["Delivery", "Run", "SyncResult", "init", "replay_spool", "resolve_token", "sync"]
