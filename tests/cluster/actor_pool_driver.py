"""Driver for the 2-node fault test: a Ray Data map_batches actor pool over `n` rows.

Run as `python actor_pool_driver.py ADDRESS OUT_JSON MARKER_DIR N`. Each actor appends one line
per batch to MARKER_DIR/<node_id>-<pid>, so the test can see on which nodes actors run and when to
kill one; the output rows (id, node of the actor that produced it) go to OUT_JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(address: str, out: str, markers: str, n: int) -> None:
    import numpy as np
    import ray

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False

    class Tag:
        def __init__(self):
            self.node = ray.get_runtime_context().get_node_id()
            self.path = os.path.join(markers, f"{self.node}-{os.getpid()}")
            open(self.path, "a").close()

        def __call__(self, batch):
            # Barrier: no actor starts working before both exist, so on a slow machine the head's
            # actor cannot finish the whole stage before the second node's actor has begun.
            deadline = time.monotonic() + 90
            while len(os.listdir(markers)) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.2)
            with open(self.path, "a") as fh:
                fh.write(f"{len(batch['id'])}\n")
            batch["node"] = np.array([self.node] * len(batch["id"]))
            return batch

    ds = ray.data.from_items([{"id": i} for i in range(n)], override_num_blocks=n // 5)
    # Two actors of half a CPU each: Ray Data spreads them over the two 1-CPU nodes.
    pool = ray.data.ActorPoolStrategy(size=2)
    rows = ds.map_batches(Tag, batch_size=5, compute=pool, num_cpus=0.5).take_all()
    tmp = out + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"ids": [int(r["id"]) for r in rows], "nodes": [str(r["node"]) for r in rows]}, fh)
    os.replace(tmp, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
