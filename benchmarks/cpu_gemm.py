"""fp32 CPU GEMM throughput: torch's `mm` (MKL), oneDNN's matmul, and `cpu_gemm.mm_nt` as it runs (autotuned).

The shapes are the GEMMs of one expert in the MoE layer benchmark (512 rows, d 512, width 128),
each in the orientation the fused experts use it (forward, input gradient, weight gradient:
transposed views included), plus one large square product. The three are timed interleaved,
median of `--repeats` rounds of `--calls` calls, on one thread by default (a GEMM's per-core
speed is the question; more threads only add their own scaling). `mm_nt` runs each shape on the
library the autotune picked for its class (`shared.kernels.gemm_autotune`), so its column should
match the faster of the other two; the machine line (CPU, ISA flags and caps, MKL/oneDNN code
paths) says what ran.

    .venv/bin/python benchmarks/cpu_gemm.py
    .venv/bin/python benchmarks/cpu_gemm.py --quick
    ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 .venv/bin/python benchmarks/cpu_gemm.py   # AVX2 emulated

Last line: JSON with `ratio` (geometric mean over the shapes of the autotuned `mm_nt`'s speed /
torch.mm's: ≥ 1 means never slower than plain PyTorch), `ratio_onednn` (oneDNN / torch.mm), and
GFLOP/s and the chosen library per shape.
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

from benchmarks.result_file import save_cpu_result  # noqa: E402
from shared.kernels.blas_probe import print_machine_line  # noqa: E402
from shared.kernels.cpu_gemm import library_of, mm_nt, onednn_available, use_cpu_gemm  # noqa: E402
from shared.kernels.gemm_autotune import GEMMS  # noqa: E402


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
    runs = {"torch.mm": lambda: torch.mm(a, b.t()), "onednn": lambda: GEMMS["onednn"](a, b), "mm_nt": lambda: mm_nt(a, b)}
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
    p.add_argument("--out", type=Path, default=None,
                   help="result JSON (default: benchmarks/results/cpu_gemm.<native|avx2>.json; none with --quick)")
    args = p.parse_args()
    # Pin the thread count even at torch's default: setting it also turns MKL's dynamic thread
    # adjustment off (MKL_VERBOSE `Dyn:0`), under which a loaded machine slowed MKL's transposed-
    # operand GEMMs up to 20× (0.37 → 6.6–7.9 ms at 128×2048×256); every contender runs under it.
    torch.set_num_threads(args.threads or torch.get_num_threads())
    if not onednn_available():
        raise SystemExit("this torch build has no oneDNN matmul: nothing to compare torch.mm with")
    machine = print_machine_line()
    dims, calls, repeats = ((256, 128, 64, 256), 3, 2) if args.quick else ((512, 512, 128, 2048), args.calls, args.repeats)
    result: dict = {"threads": torch.get_num_threads(), "machine": machine, "gflops": {}, "library": {}}
    speedups, onednn = [], []
    for name, (a, b) in cases(*dims).items():
        flops = 2 * a.shape[0] * a.shape[1] * b.shape[0]
        with use_cpu_gemm("auto"):
            library = library_of(a, b)  # the autotune's choice (measured now if new)
            t = time_pair(a, b, calls if not name.startswith("square") else max(1, calls // 10), repeats)
        gf = {k: flops / v / 1e9 for k, v in t.items()}
        speedups.append(t["torch.mm"] / t["mm_nt"])
        onednn.append(t["torch.mm"] / t["onednn"])
        result["gflops"][name] = {k: round(v, 1) for k, v in gf.items()}
        result["library"][name] = library
        print(f"{name:<16} torch.mm {gf['torch.mm']:7.1f}   oneDNN {gf['onednn']:7.1f}   mm_nt[{library}] "
              f"{gf['mm_nt']:7.1f} GFLOP/s   {speedups[-1]:.2f}x", flush=True)
    result["ratio"] = math.exp(statistics.fmean(math.log(s) for s in speedups))
    result["ratio_onednn"] = math.exp(statistics.fmean(math.log(s) for s in onednn))
    save_cpu_result("cpu_gemm", args.out, args.quick, result)
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
