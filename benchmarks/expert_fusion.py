"""Routed experts fused per expert vs unfused, and concurrent vs serial, over a grid of shapes.

The peer is our own unfused path (`dispatch_backend: loop`: whole-tensor permute, grouped GEMMs,
combine, torch's `mm`). For each shape it times the routed path alone (no router, no shared
expert), forward + backward in fp32 on CPU, three ways interleaved round by round: unfused,
`fused` as `auto` runs it (its GEMMs on the autotuned library, `shared.kernels.cpu_gemm`; its
experts in concurrent single-threaded groups when `shared.kernels.expert_threads` says so) and
`fused` with the experts one after another on torch's threads. It prints the speed-up of fusing,
that of the concurrent groups, and what `auto` picks for each (fused when one expert's GEMM,
mean rows × d × width, exceeds `FUSE_MIN_EXPERT_MACS`; concurrent below
`CONCURRENT_MAX_EXPERT_MACS`). `auto_right` counts the shapes where auto fused iff fusing was
faster, `concurrency_right` those where it ran concurrently iff that was faster.

    .venv/bin/python benchmarks/expert_fusion.py             # the grid in docs/moe.md
    .venv/bin/python benchmarks/expert_fusion.py --quick     # two small shapes (smoke test)

Last line: JSON with `ratio` (geometric mean of fused/unfused speed over the shapes auto fuses,
> 1 means fusing them pays), `ratio_concurrent` (geometric mean of concurrent/serial over the
shapes where auto runs concurrently), `speedups` and `concurrency_speedups` per shape, and the
`auto_right` / `concurrency_right` counts out of `shapes`.
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
import time  # noqa: E402

import torch  # noqa: E402

from shared.kernels import grouped_mm, moe_experts_forward  # noqa: E402
from shared.kernels.blas_probe import print_machine_line  # noqa: E402
from shared.kernels.dispatch import FUSE_MIN_EXPERT_MACS, runs_fused  # noqa: E402
from shared.kernels.expert_threads import CONCURRENT_MAX_EXPERT_MACS, expert_groups, use_expert_threads  # noqa: E402

# (tokens, d_model, expert width, experts, top_k): small recipes up to the moe_layer benchmark's shape and past it.
GRID = [
    (1024, 64, 64, 8, 2), (1024, 256, 128, 32, 4), (4096, 512, 256, 16, 2), (4096, 256, 64, 64, 6),
    (4096, 512, 128, 32, 4), (4096, 256, 128, 64, 8), (4096, 512, 128, 64, 8), (4096, 1024, 256, 64, 8),
    (8192, 512, 128, 64, 8),
]
QUICK = [(256, 64, 32, 8, 2), (512, 64, 32, 8, 2)]


def time_paths(T: int, D: int, F: int, E: int, K: int, repeats: int) -> dict[str, float]:
    """Median seconds of the routed path, fwd + bwd, per way of running it (rounds interleave them)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(T, D, generator=g, requires_grad=True)
    w1, w3 = ((torch.randn(E, F, D, generator=g) / D**0.5).requires_grad_() for _ in range(2))
    w2 = (torch.randn(E, D, F, generator=g) / F**0.5).requires_grad_()
    weights, idx = torch.randn(T, E, generator=g).sigmoid().topk(K, dim=-1)
    weights.requires_grad_()
    dy = torch.randn(T, D, generator=g)
    ways = {"loop": ("loop", "auto"), "fused": ("fused", "auto"), "fused_serial": ("fused", "off")}
    times: dict[str, list[float]] = {name: [] for name in ways}
    for i in range(repeats + 1):
        for name, ts in times.items():
            backend, threads = ways[name]
            for t in (x, weights, w1, w3, w2):
                t.grad = None
            t0 = time.perf_counter()
            with use_expert_threads(threads):
                moe_experts_forward(x, idx, weights, w1, w3, w2, backend=backend)[0].backward(dy)
            if i:
                ts.append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def geomean(values: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="two small shapes, few repeats (smoke test)")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    args = p.parse_args()
    # Pin the thread count even at torch's default: setting it also turns MKL's dynamic thread
    # adjustment off (MKL_VERBOSE `Dyn:0`), under which a loaded machine slowed MKL's transposed-
    # operand GEMMs up to 20× (0.37 → 6.6–7.9 ms at 128×2048×256); every contender runs under it.
    torch.set_num_threads(args.threads or torch.get_num_threads())
    grid, repeats = (QUICK, 2) if args.quick else (GRID, args.repeats)
    machine = print_machine_line()
    print(f"auto fuses above {FUSE_MIN_EXPERT_MACS:,} multiply-adds per expert GEMM and runs experts "
          f"concurrently below {CONCURRENT_MAX_EXPERT_MACS:,} (with more than one thread)")
    print(f"{'T, d, F, E, K':<26}{'expert MACs':>12}{'unfused ms':>12}{'fused ms':>10}{'serial ms':>11}"
          f"{'fusing':>8}{'groups':>8}  auto")
    speedups, concurrency, fused_by_auto, concurrent_by_auto = {}, {}, [], []
    right = concurrency_right = 0
    for T, D, F, E, K in grid:
        t = time_paths(T, D, F, E, K, repeats)
        speedup, groups_speedup = t["loop"] / t["fused"], t["fused_serial"] / t["fused"]
        auto_fuses = runs_fused("auto", torch.empty(0, D), T * K, torch.empty(E, F, D, device="meta"), grouped_mm)
        expert_macs = T * K / E * D * F
        auto_concurrent = expert_groups(expert_macs, E) > 1
        right += auto_fuses == (speedup > 1)
        concurrency_right += auto_concurrent == (groups_speedup > 1)
        key = f"T{T}_d{D}_F{F}_E{E}_K{K}"
        speedups[key], concurrency[key] = round(speedup, 3), round(groups_speedup, 3)
        if auto_fuses:
            fused_by_auto.append(speedup)
        if auto_concurrent:
            concurrent_by_auto.append(groups_speedup)
        print(f"{str((T, D, F, E, K)):<26}{expert_macs / 1e6:>11.1f}M{t['loop'] * 1e3:>12.2f}{t['fused'] * 1e3:>10.2f}"
              f"{t['fused_serial'] * 1e3:>11.2f}{speedup:>8.2f}{groups_speedup:>8.2f}  "
              f"{'fused' if auto_fuses else 'loop'}{', concurrent' if auto_concurrent else ''}", flush=True)
    print(json.dumps({"ratio": geomean(fused_by_auto), "ratio_concurrent": geomean(concurrent_by_auto),
                      "speedups": speedups, "concurrency_speedups": concurrency, "auto_right": right,
                      "concurrency_right": concurrency_right, "shapes": len(grid),
                      "threads": torch.get_num_threads(), "machine": machine}))


if __name__ == "__main__":
    main()
