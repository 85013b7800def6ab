"""The width sweep's optimal-LR slope with its seed uncertainty: a bootstrap over seeds.

`moelab sweep lr` reports the slope of ln lr* against ln width from the seed-mean losses. How
much of it is seed noise: each resample draws, per width, as many seeds as were run (with
replacement), refits every width's parabola on the resampled means and the slope on those optima.

    .venv/bin/python scripts/sweep_slope_bootstrap.py runs/hparam-example/proxies-indep-wide --widths 64,128,256

Last line: JSON with `slope`, `sd`, `lo` and `hi` (the `--level` interval), `resamples`, `widths`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.sweep_report import load_results  # noqa: E402
from services.trainer.hparam.analysis import lr_drift, optimal_lrs  # noqa: E402
from services.trainer.hparam.sweep import TrialResult  # noqa: E402


def slope(results: list[TrialResult]) -> float:
    (drift,) = lr_drift(optimal_lrs(results))
    return drift.slope


def bootstrap(results: list[TrialResult], resamples: int = 300, level: float = 0.9, seed: int = 0) -> dict:
    widths = sorted({r.width for r in results})
    by_seed: dict[tuple[int, int], list[TrialResult]] = {}
    for r in results:
        by_seed.setdefault((r.width, r.seed), []).append(r)
    seeds = {w: sorted(s for (w2, s) in by_seed if w2 == w) for w in widths}
    rng = random.Random(seed)
    slopes = []
    for _ in range(resamples):
        drawn = []
        for w in widths:
            for i in range(len(seeds[w])):  # a seed drawn twice counts twice: relabel each draw
                s = rng.choice(seeds[w])
                drawn += [dataclasses.replace(r, seed=1000 * (i + 1) + s) for r in by_seed[(w, s)]]
        slopes.append(slope(drawn))
    slopes.sort()
    tail = (1 - level) / 2
    return {"slope": slope(results), "sd": statistics.pstdev(slopes), "lo": slopes[int(tail * resamples)],
            "hi": slopes[min(resamples - 1, int((1 - tail) * resamples))], "resamples": resamples, "widths": widths}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sweep_dir", type=Path)
    p.add_argument("--widths", default="", help="comma-separated widths to keep (default: all)")
    p.add_argument("--resamples", type=int, default=300)
    p.add_argument("--level", type=float, default=0.9)
    args = p.parse_args()
    results = load_results(args.sweep_dir)
    if args.widths:
        keep = {int(w) for w in args.widths.split(",")}
        results = [r for r in results if r.width in keep]
    if len({r.width for r in results}) < 2:
        raise SystemExit("need trials at two widths or more")
    out = bootstrap(results, args.resamples, args.level)
    print(f"widths {out['widths']}: slope {out['slope']:.3f} per ln(width); bootstrap over seeds sd {out['sd']:.3f}, "
          f"{args.level:.0%} interval [{out['lo']:.3f}, {out['hi']:.3f}]")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
