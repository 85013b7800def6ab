"""Driver for the two-node ablation test: `python ablation_driver.py ADDRESS|local WORK_DIR`.

Runs the test corpus's two-arm, two-seed ablation (eval loss only) on the Ray at ADDRESS, or on a
fresh one-node local Ray with `local`, and leaves the report at WORK_DIR/out/report.json.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(address: str, work: str) -> None:
    import ray

    from cluster.ablation import run_ablation
    from tests.cluster.ablation_corpus import ablation_config

    if address == "local":
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, log_to_driver=False)
    run_ablation(ablation_config(Path(work)), metrics=None)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
