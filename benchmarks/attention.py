"""Attention variants on CPU: forward+backward time and peak memory vs sequence length.

Every registered kind (gqa = full causal attention, the peer every ratio is against; mla; swa;
nsa; kda) runs as one attention layer, batch 1, small width (d_model 128, 4 heads of 32, 2 KV
heads), at several lengths T. Each kind runs in its own subprocess so its peak resident memory
(ru_maxrss above the RSS before the first step) is its own. Time is the median of `--repeats`
fwd+bwd steps after one warm-up. The growth exponent is the least-squares slope of log(time) vs
log(T) over all measured lengths: SWA and KDA should be ≈ 1 (linear), full attention → 2 as
the T² term dominates the projections. NSA runs its default `gather` path (linear apart from
the T × T/l compression scores). One intra-op thread by default: on a
shared 2-core box OpenMP spin-waiting makes multi-threaded timings meaningless.

    .venv/bin/python benchmarks/attention.py            # T = 512, 1024, 2048, 4096
    .venv/bin/python benchmarks/attention.py --quick    # T = 128, 256, 512, one repeat

It prints the CPU line first (model, ISA flags and caps, MKL/oneDNN code paths). Last line: JSON
with `swa_exponent`, `kda_exponent`, `full_exponent` (the machine line, and every kind's
`<kind>_exponent`, times and peak memory per T, and `ratio_<kind>_T<T>` = full-attention time /
that kind's time, > 1 means faster than full attention).
"""

from __future__ import annotations

import sys
from pathlib import Path

# benchmarks/ holds a tokenize.py that would shadow the standard library's `tokenize` (which torch
# imports); run with the repo root on the path instead of this folder.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

KINDS = ("gqa", "mla", "swa", "nsa", "kda")


def bench_config(kind: str, max_len: int):
    from shared.config.model import ModelConfig

    cfg = ModelConfig(d_model=128, n_heads=4, n_kv_heads=2, max_seq_len=max_len, vocab_size=256)
    cfg.attention.pattern = [kind]
    cfg.attention.mla = dict(q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32)
    cfg.attention.swa.window = 128
    cfg.attention.nsa = dict(block_size=32, n_selected=4, window=128)
    return cfg


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def worker(kind: str, lengths: list[int], repeats: int, threads: int) -> dict:
    """Runs in a fresh process: time and peak memory of one kind at each length (ascending)."""
    import torch

    from shared.model.attention import build_attention

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    module = build_attention(bench_config(kind, max(lengths)), 0)
    base_rss = _rss_mb()
    rows = {}
    for T in sorted(lengths):
        x = torch.randn(1, T, 128, requires_grad=True)

        def step(x=x):
            module.zero_grad(set_to_none=True)
            x.grad = None
            module(x).square().mean().backward()

        step()  # warm-up
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base_rss
        rows[T] = {"time_s": statistics.median(times), "peak_mb": max(peak_mb, 0.0)}
    n_params = sum(p.numel() for p in module.parameters())
    return {"rows": rows, "params": n_params}


def fit_exponent(lengths: list[int], times: list[float]) -> float:
    """Least-squares slope of log(time) against log(T)."""
    xs = [math.log(t) for t in lengths]
    ys = [math.log(s) for s in times]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="short smoke run: T = 128, 256, 512, one repeat")
    p.add_argument("--lengths", type=int, nargs="+", default=None, help="sequence lengths (>= 3 for a fit)")
    p.add_argument("--repeats", type=int, default=None, help="timed fwd+bwd steps per length (median)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    p.add_argument("--worker", choices=KINDS, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=None,
                   help="result JSON (default: benchmarks/results/attention.<native|avx2>.json; none with --quick)")
    args = p.parse_args()
    lengths = args.lengths or ([128, 256, 512] if args.quick else [512, 1024, 2048, 4096])
    repeats = args.repeats or (1 if args.quick else 3)
    if args.worker:
        print(json.dumps(worker(args.worker, lengths, repeats, args.threads)))
        return
    if len(lengths) < 3:
        p.error("give at least 3 lengths so the exponent fit means something")
    if "gqa" not in args.kinds:
        args.kinds.insert(0, "gqa")

    from benchmarks.result_file import save_cpu_result
    from shared.kernels.blas_probe import print_machine_line

    machine = print_machine_line()  # the CPU, its ISA flags and caps, and the BLAS code paths loaded
    results = {}
    for kind in args.kinds:
        cmd = [sys.executable, __file__, "--worker", kind, "--repeats", str(repeats), "--threads", str(args.threads),
               "--lengths", *map(str, lengths)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise SystemExit(f"benchmark worker for {kind!r} failed:\n{out.stderr[-3000:]}")
        results[kind] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{kind}: done", file=sys.stderr, flush=True)

    summary: dict[str, object] = {"lengths": ",".join(map(str, lengths)), "threads": args.threads, "machine": machine}
    print(f"{'kind':5} {'params':>8} " + " ".join(f"{'T=' + str(T) + ' ms':>12} {'MB':>7}" for T in lengths)
          + f" {'exponent':>9}")
    full = {int(T): r["time_s"] for T, r in results["gqa"]["rows"].items()}
    for kind, res in results.items():
        rows = {int(T): r for T, r in res["rows"].items()}
        exp = fit_exponent(lengths, [rows[T]["time_s"] for T in lengths])
        summary[f"{kind}_exponent"] = round(exp, 3)
        summary[f"{kind}_params"] = res["params"]
        cells = []
        for T in lengths:
            summary[f"{kind}_ms_T{T}"] = round(rows[T]["time_s"] * 1e3, 2)
            summary[f"{kind}_peak_mb_T{T}"] = round(rows[T]["peak_mb"], 1)
            summary[f"ratio_{kind}_T{T}"] = round(full[T] / rows[T]["time_s"], 3)
            cells.append(f"{rows[T]['time_s'] * 1e3:12.1f} {rows[T]['peak_mb']:7.1f}")
        print(f"{kind:5} {res['params']:8d} " + " ".join(cells) + f" {exp:9.2f}")
    print("ratio = full-attention (gqa) time / kind time at the same T (> 1: faster than full attention)")
    for kind in results:
        print(f"  {kind}: " + ", ".join(f"T={T}: {summary[f'ratio_{kind}_T{T}']:.2f}" for T in lengths))
    summary["full_exponent"] = summary["gqa_exponent"]
    summary.setdefault("swa_exponent", float("nan"))
    summary.setdefault("kda_exponent", float("nan"))
    summary["quick"] = args.quick
    save_cpu_result("attention", args.out, args.quick, summary)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
