"""fp32 CPU GEMM throughput: `shared.kernels.cpu_gemm.mm_nt` (oneDNN) vs torch's `mm` (MKL).

The shapes are the GEMMs of one expert in the MoE layer benchmark (512 rows, d 512, width 128),
each in the orientation the fused experts use it (forward, input gradient, weight gradient:
transposed views included), plus one large square product. Each is timed interleaved with the
peer, median of `--repeats` rounds of `--calls` calls, on one thread by default (a GEMM's
per-core speed is the question; more threads only add their own scaling).

    .venv/bin/python benchmarks/cpu_gemm.py
    .venv/bin/python benchmarks/cpu_gemm.py --quick

Last line: JSON with `ratio` (geometric mean of mm_nt's speed / torch.mm's over the shapes) and
GFLOP/s per shape for both.
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

from shared.kernels.cpu_gemm import cpu_gemm_library, mm_nt  # noqa: E402


def cases(rows: int, d: int, f: int, square: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """name -> (a, b) with the product a @ b.T, in the layouts the fused experts pass."""
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    x, w1, w2, dy, h = r(rows, d), r(f, d), r(d, f), r(rows, d), r(rows, f)
    s = r(square, square)
    return {
        "fwd x·w1ᵀ": (x, w1),
        "fwd h·w2ᵀ": (h, w2),
        "dgrad dy·w2": (dy, w2.t()),
        "wgrad dyᵀ·h": (dy.t(), h.t()),
        "wgrad hᵀ·x": (h.t(), x.t()),
        f"square {square}": (s, s),
    }


def time_pair(a: torch.Tensor, b: torch.Tensor, calls: int, repeats: int) -> dict[str, float]:
    runs = {"torch.mm": lambda: torch.mm(a, b.t()), "mm_nt": lambda: mm_nt(a, b)}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for i in range(repeats + 1):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            if i:
                times[name].append((time.perf_counter() - t0) / calls)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small shapes, few repeats (smoke test)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0 = torch's default)")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--calls", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(args.threads) if args.threads else None
    dims, calls, repeats = ((256, 128, 64, 256), 3, 2) if args.quick else ((512, 512, 128, 2048), args.calls, args.repeats)
    print(f"{torch.get_num_threads()} thread(s); mm_nt uses {cpu_gemm_library()}", flush=True)
    result: dict = {"threads": torch.get_num_threads(), "library": cpu_gemm_library(), "gflops": {}}
    speedups = []
    for name, (a, b) in cases(*dims).items():
        flops = 2 * a.shape[0] * a.shape[1] * b.shape[0]
        t = time_pair(a, b, calls if not name.startswith("square") else max(1, calls // 10), repeats)
        gf = {k: flops / v / 1e9 for k, v in t.items()}
        speedups.append(t["torch.mm"] / t["mm_nt"])
        result["gflops"][name] = {k: round(v, 1) for k, v in gf.items()}
        print(f"{name:<16} torch.mm {gf['torch.mm']:7.1f} GFLOP/s   mm_nt {gf['mm_nt']:7.1f} GFLOP/s   "
              f"{speedups[-1]:.2f}x", flush=True)
    result["ratio"] = math.exp(statistics.fmean(math.log(s) for s in speedups))
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
