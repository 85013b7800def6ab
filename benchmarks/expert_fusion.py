"""The routed path's three CPU ways (loop, fused, fused on both cores) over a grid of shapes, and
whether the autotuner's real choice and the fixed rules pick the fastest, judged on timings of
their own.

The ways are those of `shared.kernels.expert_path_autotune`: `loop` (whole-tensor permute,
grouped GEMMs, combine), `fused` (per expert, `shared.kernels.fused_experts`, experts one after
another on torch's threads) and `fused-concurrent` (the experts in one single-threaded group per
core). For each shape the run first asks the autotuner which way the model would run
(`expert_path_autotune.TUNER.way`: the cached choice in `$MOELAB_HOME`, a fresh measurement
where none is cached, or the fixed rules on a busy machine), and only then times the routed path
alone (no router, no shared expert), forward + backward in fp32, each way with
`expert_path_autotune.time_ways` (interleaved rounds, fastest call of each; `--repeats` rounds).
The tuner's choice is graded on those later timings, never on the ones it chose from, so a wrong
cached choice shows as a miss. The fixed rules are fused above `FUSE_MIN_EXPERT_MACS`
multiply-adds per expert GEMM, concurrent below `CONCURRENT_MAX_EXPERT_MACS`.

    .venv/bin/python benchmarks/expert_fusion.py             # the grid
    .venv/bin/python benchmarks/expert_fusion.py --quick     # two small shapes (smoke test)
    .venv/bin/python benchmarks/expert_fusion.py --check     # exit 1 when the tuner's choice misses

Last line: JSON with `ms` per shape and way, `rules` and `tuned` (the way each picks per shape),
`tuned_from` (cache, measured, or rules where the tuner left it to them), `rules_right` /
`tuned_right` (shapes where the pick is within 5% of the fastest way, out of `shapes`), `ratio`
(geometric mean over shapes of the rules' pick's time / the tuner's pick's: > 1 means the tuner
beats the fixed rules, < 1 that it chose worse) and the machine line.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]  # benchmarks/tokenize.py shadows stdlib
sys.path.insert(0, str(_HERE.parent))

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402

import torch  # noqa: E402

from benchmarks.result_file import save_cpu_result  # noqa: E402
from shared.kernels.blas_probe import print_machine_line  # noqa: E402
from shared.kernels.dispatch import FUSE_MIN_EXPERT_MACS  # noqa: E402
from shared.kernels.expert_path_autotune import MARGIN, TUNER, PathClass, time_ways, ways_for  # noqa: E402
from shared.kernels.expert_threads import CONCURRENT_MAX_EXPERT_MACS, expert_groups, use_expert_threads  # noqa: E402

# (tokens, d_model, expert width, experts, top_k): small recipes up to the moe_layer benchmark's shape and past it.
GRID = [
    (1024, 64, 64, 8, 2), (1024, 256, 128, 32, 4), (2048, 256, 128, 16, 2), (4096, 512, 256, 16, 2), (4096, 256, 64, 64, 6),
    (4096, 512, 128, 32, 4), (4096, 256, 128, 64, 8), (4096, 512, 128, 64, 8), (4096, 1024, 256, 64, 8),
    (8192, 512, 128, 64, 8),
]
# The second quick shape has many experts with few rows each, where running them one after another
# (`fused`) is several times slower than the loop: a wrong cached choice there cannot pass as a tie.
QUICK = [(256, 64, 32, 8, 2), (256, 64, 32, 64, 2)]


def rules_way(T: int, D: int, F: int, E: int, K: int) -> str:
    """The way the fixed rules pick (what `auto` runs where it does not measure)."""
    expert_macs = T * K / E * D * F
    if expert_macs <= FUSE_MIN_EXPERT_MACS:
        return "loop"
    return "fused-concurrent" if expert_groups(expert_macs, E) > 1 else "fused"


def geomean(values: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def within_margin(way: str, times: dict[str, float]) -> bool:
    """Whether `way` is within `MARGIN` of the fastest way in `times` (the grading rule)."""
    return times[way] <= min(times.values()) / (1 - MARGIN)


def tuned_way(T: int, D: int, F: int, E: int, K: int) -> tuple[str, str]:
    """The way the model would run this shape and where that came from (`cache`, `measured`, `rules`).

    Asked with gradients on, as a training step asks; the tuner's own timings are not returned, so
    the grading cannot reuse them."""
    measured_before = TUNER.measured
    with use_expert_threads("auto"), torch.enable_grad():
        way = TUNER.way(T, D, F, E, K)
    if way is None:
        return rules_way(T, D, F, E, K), "rules"
    return way, "measured" if TUNER.measured > measured_before else "cache"


def grade(times: dict[str, dict[str, float]], rules: dict[str, str], tuned: dict[str, str]) -> dict:
    """Hits of each picker on independent timings, and the tuner's gain over the rules."""
    return {"rules_right": sum(within_margin(rules[k], t) for k, t in times.items()),
            "tuned_right": sum(within_margin(tuned[k], t) for k, t in times.items()),
            "ratio": geomean([t[rules[k]] / t[tuned[k]] for k, t in times.items()])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="two small shapes, few repeats (smoke test)")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    p.add_argument("--check", action="store_true", help="exit 1 when the tuner's choice misses on any shape")
    p.add_argument("--out", type=Path, default=None,
                   help="result JSON (default: benchmarks/results/expert_fusion.<native|avx2>.json; none with --quick)")
    args = p.parse_args()
    # Pin the thread count even at torch's default: setting it also turns MKL's dynamic thread
    # adjustment off (MKL_VERBOSE `Dyn:0`), under which a loaded machine slowed MKL's transposed-
    # operand GEMMs up to 20× (0.37 → 6.6–7.9 ms at 128×2048×256); every contender runs under it.
    torch.set_num_threads(args.threads or torch.get_num_threads())
    grid, repeats = (QUICK, 2) if args.quick else (GRID, args.repeats)
    machine = print_machine_line()
    print(f"fixed rules: fused above {FUSE_MIN_EXPERT_MACS:,} multiply-adds per expert GEMM, concurrent "
          f"below {CONCURRENT_MAX_EXPERT_MACS:,} (with more than one thread)")
    ways = ways_for(torch.get_num_threads())
    print(f"{'T, d, F, E, K':<26}{'expert MACs':>12}" + "".join(f"{w + ' ms':>20}" for w in ways) + "   rules / tuned (from)")
    times, rules, tuned, tuned_from = {}, {}, {}, {}
    for T, D, F, E, K in grid:
        key = f"T{T}_d{D}_F{F}_E{E}_K{K}"
        tuned[key], tuned_from[key] = tuned_way(T, D, F, E, K)
        with use_expert_threads("auto"):
            t = time_ways(PathClass(T, D, F, E, K, torch.get_num_threads()), rounds=repeats)
        rules[key] = rules_way(T, D, F, E, K)
        for picks in (rules, tuned):
            if picks[key] not in t:  # one thread: a concurrent pick runs serially
                picks[key] = "fused"
        times[key] = t
        print(f"{str((T, D, F, E, K)):<26}{T * K / E * D * F / 1e6:>11.1f}M" + "".join(f"{t[w] * 1e3:>20.2f}" for w in ways)
              + f"   {rules[key]} / {tuned[key]} ({tuned_from[key]})", flush=True)
    graded = grade(times, rules, tuned)
    result = {"ratio": graded["ratio"], "ms": {k: {w: round(v * 1e3, 3) for w, v in t.items()} for k, t in times.items()},
              "rules": rules, "tuned": tuned, "tuned_from": tuned_from, "rules_right": graded["rules_right"],
              "tuned_right": graded["tuned_right"], "shapes": len(grid), "threads": torch.get_num_threads(),
              "machine": machine, "quick": args.quick}
    save_cpu_result("expert_fusion", args.out, args.quick, result)
    print(json.dumps(result))
    if args.check and graded["tuned_right"] < len(grid):
        missed = [k for k, t in times.items() if not within_margin(tuned[k], t)]
        print(f"expert_fusion: the tuner's choice is not within {MARGIN:.0%} of the fastest way on "
              f"{', '.join(missed)}; `moelab doctor --retune` measures this machine again", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
