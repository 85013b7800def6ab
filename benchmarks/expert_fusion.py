"""Routed experts fused per expert vs unfused, over a grid of shapes: where `auto` should fuse.

The peer is our own unfused path (`dispatch_backend: loop`: whole-tensor permute, grouped GEMMs,
combine, torch's `mm`). For each shape it times the routed path alone (no router, no shared
expert), forward + backward in fp32 on CPU, the two interleaved round by round, and prints the
speed-up of `fused` (which also runs its GEMMs on oneDNN, `shared.kernels.cpu_gemm`) and what
`auto` would pick (fused when one expert's GEMM, mean rows × d × width, exceeds
`FUSE_MIN_EXPERT_MACS`). `auto_right` counts the shapes where auto picked the faster one.

    .venv/bin/python benchmarks/expert_fusion.py             # the grid in docs/moe.md
    .venv/bin/python benchmarks/expert_fusion.py --quick     # two small shapes (smoke test)

Last line: JSON with `ratio` (geometric mean of fused/unfused speed over the shapes auto fuses,
> 1 means fusing them pays), `speedups` per shape and `auto_right` / `shapes`.
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
from shared.kernels.cpu_gemm import cpu_gemm_library  # noqa: E402
from shared.kernels.dispatch import FUSE_MIN_EXPERT_MACS, runs_fused  # noqa: E402

# (tokens, d_model, expert width, experts, top_k): small recipes up to the moe_layer benchmark's shape and past it.
GRID = [
    (1024, 64, 64, 8, 2), (1024, 256, 128, 32, 4), (4096, 512, 256, 16, 2), (4096, 256, 64, 64, 6),
    (4096, 512, 128, 32, 4), (4096, 256, 128, 64, 8), (4096, 512, 128, 64, 8), (4096, 1024, 256, 64, 8),
    (8192, 512, 128, 64, 8),
]
QUICK = [(256, 64, 32, 8, 2), (512, 64, 32, 8, 2)]


def time_both(T: int, D: int, F: int, E: int, K: int, repeats: int) -> dict[str, float]:
    """Median seconds of the routed path, fwd + bwd, per backend (rounds interleave the two)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(T, D, generator=g, requires_grad=True)
    w1, w3 = ((torch.randn(E, F, D, generator=g) / D**0.5).requires_grad_() for _ in range(2))
    w2 = (torch.randn(E, D, F, generator=g) / F**0.5).requires_grad_()
    weights, idx = torch.randn(T, E, generator=g).sigmoid().topk(K, dim=-1)
    weights.requires_grad_()
    dy = torch.randn(T, D, generator=g)
    times: dict[str, list[float]] = {"loop": [], "fused": []}
    for i in range(repeats + 1):
        for backend, ts in times.items():
            for t in (x, weights, w1, w3, w2):
                t.grad = None
            t0 = time.perf_counter()
            moe_experts_forward(x, idx, weights, w1, w3, w2, backend=backend)[0].backward(dy)
            if i:
                ts.append(time.perf_counter() - t0)
    return {b: statistics.median(ts) for b, ts in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="two small shapes, few repeats (smoke test)")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    args = p.parse_args()
    torch.set_num_threads(args.threads) if args.threads else None
    grid, repeats = (QUICK, 2) if args.quick else (GRID, args.repeats)
    print(f"{torch.get_num_threads()} threads; auto fuses above {FUSE_MIN_EXPERT_MACS:,} multiply-adds per expert GEMM")
    print(f"{'T, d, F, E, K':<26}{'expert MACs':>12}{'unfused ms':>12}{'fused ms':>10}{'speed-up':>10}  auto")
    speedups, fused_by_auto, right = {}, [], 0
    for T, D, F, E, K in grid:
        t = time_both(T, D, F, E, K, repeats)
        speedup = t["loop"] / t["fused"]
        auto_fuses = runs_fused("auto", torch.empty(0, D), T * K, torch.empty(E, F, D, device="meta"), grouped_mm)
        right += auto_fuses == (speedup > 1)
        key = f"T{T}_d{D}_F{F}_E{E}_K{K}"
        speedups[key] = round(speedup, 3)
        if auto_fuses:
            fused_by_auto.append(speedup)
        print(f"{str((T, D, F, E, K)):<26}{T * K / E * D * F / 1e6:>11.1f}M{t['loop'] * 1e3:>12.2f}"
              f"{t['fused'] * 1e3:>10.2f}{speedup:>10.2f}  {'fused' if auto_fuses else 'loop'}", flush=True)
    ratio = math.exp(statistics.fmean(math.log(s) for s in fused_by_auto)) if fused_by_auto else None
    print(json.dumps({"ratio": ratio, "speedups": speedups, "auto_right": right, "shapes": len(grid),
                      "threads": torch.get_num_threads(), "cpu_gemm": cpu_gemm_library()}))


if __name__ == "__main__":
    main()
