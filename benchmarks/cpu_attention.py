"""Causal attention on CPU, forward + backward: moelab's blocked-scores kernel vs SDPA's flash kernel.

The peer is `F.scaled_dot_product_attention(q, k, v, is_causal=True)` as every PyTorch model
calls it (HF's and torchtitan's DeepSeek-V3 included); values narrower than the queries (MLA) are
zero-padded for it, since its flash kernel needs equal widths and otherwise falls back to the
math path (timed too, as `math`). Ours is `shared.kernels.causal_attention` forced onto its
blocked path (`MOELAB_CPU_ATTENTION=blocked`). All run interleaved on the same inputs, median of
`--rounds`; values and gradients are checked to agree before timing.

    .venv/bin/python benchmarks/cpu_attention.py
    ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 .venv/bin/python benchmarks/cpu_attention.py  # AVX2 emulated

Shapes: 2,048 tokens a batch (B·T), 4 heads; MLA's widths at the train-step benchmark (q/k 48,
v 32) at T 128–1024, and equal widths (GQA-like, 32) at T 256 to show where `auto` keeps SDPA.
Last line: JSON with `ratio` (flash time / ours at the train-step shape, MLA T 256: > 1 is ours
faster) and per shape the times and ratios; also written to
`benchmarks/results/cpu_attention.<native|avx2>.json` (not with `--quick`).
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]  # benchmarks/tokenize.py shadows stdlib
sys.path.insert(0, str(_HERE.parent))

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.result_file import save_cpu_result  # noqa: E402
from shared.kernels import causal_attention as ca  # noqa: E402
from shared.kernels.blas_probe import print_machine_line  # noqa: E402

TOKENS, HEADS = 2048, 4
# name: (T, q/k width, v width)
SHAPES = {"mla T128": (128, 48, 32), "mla T256": (256, 48, 32), "mla T512": (512, 48, 32),
          "mla T1024": (1024, 48, 32), "equal T256": (256, 32, 32)}
QUICK_SHAPES = {"mla T64": (64, 12, 8)}
HEADLINE = "mla T256"


def flash(q, k, v):
    dv = v.shape[-1]
    v = F.pad(v, (0, q.shape[-1] - dv)) if dv < q.shape[-1] else v
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)[..., :dv]


def math_path(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def ours(q, k, v):
    return ca.causal_attention(q, k, v)


def fwd_bwd(fn, q, k, v, grad):
    q.grad = k.grad = v.grad = None
    out = fn(q, k, v)
    out.backward(grad)
    return out.detach(), q.grad, k.grad, v.grad


def time_shape(T: int, dk: int, dv: int, rounds: int, tokens: int) -> dict:
    g = torch.Generator().manual_seed(0)
    B = max(1, tokens // T)
    q, k = (torch.randn(B, HEADS, T, dk, generator=g).requires_grad_() for _ in range(2))
    v = torch.randn(B, HEADS, T, dv, generator=g).requires_grad_()
    grad = torch.randn(B, HEADS, T, dv, generator=g)
    contenders = {"ours": ours, "flash": flash} | ({"math": math_path} if dv != dk else {})
    ref = fwd_bwd(flash, q, k, v, grad)
    for a, b in zip(fwd_bwd(ours, q, k, v, grad), ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    times: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(rounds + 1):
        for name in names[r % len(names):] + names[: r % len(names)]:
            t0 = time.perf_counter()
            fwd_bwd(contenders[name], q, k, v, grad)
            if r:  # round 0 warms up
                times[name].append(time.perf_counter() - t0)
    ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    row = {"batch": B, "T": T, "qk_width": dk, "v_width": dv, **{f"{n}_ms": round(t, 3) for n, t in ms.items()},
           "ratio": round(ms["flash"] / ms["ours"], 4),
           "auto_takes_blocked": ca.BLOCKED_MAX_T >= T and dv < dk}
    if "math" in ms:
        row["ratio_math"] = round(ms["math"] / ms["ours"], 4)
    return row


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="one small shape, 3 rounds; nothing saved")
    p.add_argument("--out", type=Path, default=None,
                   help="result JSON (default: benchmarks/results/cpu_attention.<native|avx2>.json)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ[ca.SETTING_ENV] = "blocked"  # ours is timed on its own path at every shape
    machine = print_machine_line()
    shapes, rounds, tokens = (QUICK_SHAPES, 3, 128) if args.quick else (SHAPES, args.rounds, TOKENS)
    load0 = os.getloadavg()[0]
    rows = {}
    for name, (T, dk, dv) in shapes.items():
        rows[name] = r = time_shape(T, dk, dv, rounds, tokens)
        extra = f", math {r['math_ms']:.2f} ms" if "math_ms" in r else ""
        print(f"{name:11s} B{r['batch']} x {HEADS} heads, q/k {dk}, v {dv}: ours {r['ours_ms']:.2f} ms, "
              f"flash {r['flash_ms']:.2f} ms{extra}; ratio {r['ratio']:.3f} (auto takes "
              f"{'ours' if r['auto_takes_blocked'] else 'SDPA'})", flush=True)
    headline = rows.get(HEADLINE) or next(iter(rows.values()))
    result = {"ratio": headline["ratio"], "headline_shape": HEADLINE if HEADLINE in rows else next(iter(rows)),
              "shapes": rows, "rounds": rounds, "threads": args.threads, "machine": machine, "quick": args.quick,
              "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)],
              "command": "benchmarks/cpu_attention.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    save_cpu_result("cpu_attention", args.out, args.quick, result)
    print(json.dumps(result, ensure_ascii=False))
    return result


if __name__ == "__main__":
    main()
