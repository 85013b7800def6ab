"""Driver for the 2-node scoring fault test: the scorer's real `run_scoring` stage on a 2-node Ray.

Run as `python scoring_driver.py ADDRESS WORK_DIR MARKER_DIR`. It writes random Probe/Judge heads
and a calibration (what the distill and calibrate stages would produce) and document shards into
WORK_DIR, then runs `services.scorer.scoring.run_scoring` with a pool of two actors. The actor
class is the scorer's own, subclassed only to leave a marker per batch (node id and pid) so the
test sees where actors run and when to kill the second node.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main(address: str, work: str, markers: str) -> None:
    import ray

    from services.scorer import scoring
    from shared.config import ExperimentConfig
    from tests.services.scorer.test_scoring import _random_heads, _shards

    work_dir = Path(work)
    out = work_dir / "scorer"
    out.mkdir(parents=True, exist_ok=True)
    _random_heads(out)
    paths = _shards(work_dir, n_shards=8, per_shard=10)

    class MarkedScorerActor(scoring.ScorerActor):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.marker = os.path.join(markers, f"{ray.get_runtime_context().get_node_id()}-{os.getpid()}")
            open(self.marker, "a").close()
            self.waited = False

        def __call__(self, batch):
            time.sleep(0.3)
            out = super().__call__(batch)
            with open(self.marker, "a") as fh:
                fh.write(f"{batch.num_rows}\n")
            if not self.waited:
                # No actor works alone: after its first batch an actor waits until every actor has
                # scored one, so the stage must use both nodes however fast the head's actor is.
                # Ray Data queues a few batches per actor, then hands the rest to the idle one.
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and not (
                    len(os.listdir(markers)) >= 2
                    and all(os.path.getsize(os.path.join(markers, m)) for m in os.listdir(markers))
                ):
                    time.sleep(0.1)
                self.waited = True
            return out

    scoring.ScorerActor = MarkedScorerActor
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    # One batch in flight per actor: by default Ray Data may queue every shard of this small
    # stage on the first actor that is ready (2 x its max concurrency), leaving node2 idle.
    ctx.max_tasks_in_flight_per_actor = 1
    cfg = ExperimentConfig()
    cfg.scorer.out_dir = str(out)
    cfg.scorer.scoring.batch_size = 5
    cfg.scorer.scoring.actors_max = 2
    cfg.scorer.scoring.actors_min = 2
    cfg.scorer.scoring.actor_cpus = 0.5
    report = scoring.run_scoring(cfg, paths, progress=False)
    tmp = work_dir / "report.json.tmp"
    tmp.write_text(json.dumps({"report": report, "inputs": paths}))
    os.replace(tmp, work_dir / "report.json")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
