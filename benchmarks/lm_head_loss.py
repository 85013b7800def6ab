"""The LM head and its cross-entropy, forward + backward: moelab's fused blocks vs the plain path.

The peer is what every PyTorch model runs (HF's `DeepseekV3ForCausalLM` and torchtitan
included): `F.cross_entropy(F.linear(h, W), y)`, which writes the N×V logits and, in the
backward, their gradient. Ours is `shared.kernels.linear_cross_entropy` (row blocks; loss and
both gradients in one pass, no N×V tensor). Both are timed interleaved on the same inputs, median
of `--rounds`; the loss and gradients are checked to agree before timing.

    .venv/bin/python benchmarks/lm_head_loss.py
    ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 .venv/bin/python benchmarks/lm_head_loss.py  # AVX2 emulated

Shapes: the train-step benchmark's head (2,048 tokens, d 256, vocabulary 4,096) and a larger one
(4,096 tokens, d 512, vocabulary 32,000). Last line: JSON with `ratio` (geometric mean of
plain time / ours over the shapes: > 1 is ours faster) and per shape the times and the ratio;
also written to `benchmarks/results/lm_head_loss.<native|avx2>.json` (not with `--quick`).
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
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.result_file import save_cpu_result  # noqa: E402
from shared.kernels.blas_probe import print_machine_line  # noqa: E402
from shared.kernels.linear_cross_entropy import linear_cross_entropy  # noqa: E402

SHAPES = {"train-step head": (2048, 256, 4096), "larger": (4096, 512, 32000)}
QUICK_SHAPES = {"small": (256, 64, 512)}


def plain(h, w, y):
    return F.cross_entropy(F.linear(h, w), y)


def inputs(n: int, d: int, v: int):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(n, d, generator=g).requires_grad_()
    w = (torch.randn(v, d, generator=g) / d**0.5).requires_grad_()
    return h, w, torch.randint(0, v, (n,), generator=g)


def fwd_bwd(loss_fn, h, w, y):
    h.grad = w.grad = None
    loss = loss_fn(h, w, y)
    loss.backward()
    return loss.detach(), h.grad, w.grad


def time_shape(n: int, d: int, v: int, rounds: int) -> dict:
    h, w, y = inputs(n, d, v)
    ref, ours = fwd_bwd(plain, h, w, y), fwd_bwd(linear_cross_entropy, h, w, y)
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    times: dict[str, list[float]] = {"ours": [], "plain": []}
    for r in range(rounds + 1):
        for name, fn in (("ours", linear_cross_entropy), ("plain", plain))[:: 1 if r % 2 else -1]:
            t0 = time.perf_counter()
            fwd_bwd(fn, h, w, y)
            if r:  # round 0 warms up
                times[name].append(time.perf_counter() - t0)
    ours_s, plain_s = statistics.median(times["ours"]), statistics.median(times["plain"])
    return {"tokens": n, "d_model": d, "vocab": v, "ours_ms": round(ours_s * 1e3, 3),
            "plain_ms": round(plain_s * 1e3, 3), "ratio": round(plain_s / ours_s, 4)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="one small shape, 3 rounds; nothing saved")
    p.add_argument("--out", type=Path, default=None,
                   help="result JSON (default: benchmarks/results/lm_head_loss.<native|avx2>.json)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    machine = print_machine_line()
    shapes, rounds = (QUICK_SHAPES, 3) if args.quick else (SHAPES, args.rounds)
    load0 = os.getloadavg()[0]
    rows = {}
    for name, (n, d, v) in shapes.items():
        rows[name] = time_shape(n, d, v, rounds)
        r = rows[name]
        print(f"{name:16s} {n}x{d} -> {v}: ours {r['ours_ms']:.2f} ms, plain {r['plain_ms']:.2f} ms, ratio {r['ratio']:.3f}",
              flush=True)
    result = {"ratio": round(math.exp(statistics.fmean(math.log(r["ratio"]) for r in rows.values())), 4),
              "shapes": rows, "rounds": rounds, "threads": args.threads, "machine": machine, "quick": args.quick,
              "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)],
              "command": "benchmarks/lm_head_loss.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    save_cpu_result("lm_head_loss", args.out, args.quick, result)
    print(json.dumps(result, ensure_ascii=False))
    return result


if __name__ == "__main__":
    main()
