"""Muon under standard parameterisation: measured ΔW·x against what the RMS-matched update predicts.

Why this exists: the coordinate check's SP arm with Muon grows far less than with AdamW, and the
question is whether that is the update rule or a measurement fault. Muon's step is
ΔW = −η·s·O with O ≈ U Vᵀ of the (momentum) gradient and s = 0.2·√max(A, B) (A = fan-out,
B = fan-in). For an input x in O's row space (one step on the probe batch, x the matrix's input
there at init: each probe token is one of the tokens the gradient was built from),
‖O x‖ ≈ ‖x‖ = √B · rms(x), so every output coordinate moves by about

    P = η · 0.2 · √max(A, B) · √(B / A) · rms(x),

which for a matrix whose fan-in and fan-out both grow with the width n is ∝ √n: under SP the
growth exponent of ΔW·x is ½ for a matrix whose input is normalised (rms(x) = 1 at init: attention
q/k/v, the first FFN and expert matrices; the experts' input also carries the bungee scalar),
and more only where the input itself grows. This
script trains one SP step at each width, per seed, and prints measured / P for those matrices
and the measured growth exponent. Adam's sign-like update instead moves a coordinate by
≈ η·Σ_j |x_j| ∝ n (exponent 1).

    .venv/bin/python scripts/muon_sp_prediction.py configs/tiny.yaml --widths 64,128,256,512,1024 --seeds 3
    .venv/bin/python scripts/muon_sp_prediction.py configs/tiny.yaml --seeds 3 optim.ns_steps=12   # a finer orthogonalisation
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# matrices whose input is a normalised residual stream: their ΔW·x growth is the update's alone
FIRST_MATRIX = re.compile(r"attn\.w[qkv]\.weight$|ffn\.(w1|w3)\.weight$|shared\.(w1|w3)\.weight$|experts\.w[13]_EFD$")


def predicted_rms(fan_out: int, fan_in: int, lr: float, rms_x: float = 1.0) -> float:
    """What one RMS-matched Muon step moves each output coordinate by, for an input in its row space.

    Written from the derivation, not from `shared.optim.muon.update_scale`: the prediction must not
    follow the optimizer's code, or a changed scale there would move both sides and pass unseen."""
    return lr * 0.2 * math.sqrt(max(fan_out, fan_in)) * math.sqrt(fan_in / fan_out) * rms_x


def input_rms_at_init(name: str, cfg) -> float:
    """rms(x) of a first matrix's input at init: 1 after the RMS norm, times the bungee scalar for the
    MoE layer's experts when the scalar sits on their input."""
    bungee = cfg.model.moe.bungee
    on_input = bungee.enabled and bungee.placement == "input"
    return float(bungee.init) if on_input and re.search(r"ffn\.(experts|shared)\.", name) else 1.0


def measure(cfg, widths: list[int], seeds: int) -> dict[str, dict[int, tuple[float, float]]]:
    """{first matrix: {width: (measured RMS(ΔW·x) after one SP Muon step, mean over seeds; predicted)}}."""
    import torch

    from services.trainer.data import prepare_shards, with_parquet_documents
    from services.trainer.hparam.coord_check import CHECK_LR, run_width
    from services.trainer.hparam.proxy import proxy_config
    from shared.model import MoETransformer

    cfg = with_parquet_documents(cfg)
    prepare_shards(cfg, 0)
    out: dict[str, dict[int, tuple[float, float]]] = {}
    for width in widths:
        with torch.device("meta"):
            scalings = MoETransformer(proxy_config(cfg, width=width, mup=False).model).mup_scalings
        sums: dict[str, float] = {}
        for seed in range(seeds):
            for r in run_width(cfg, width, False, 1, torch.device("cpu"), "muon_adamw", cfg.train.seed + seed):
                name = r.metric.removeprefix("dWx/")
                if r.step == 1 and r.metric.startswith("dWx/") and FIRST_MATRIX.search(name):
                    sums[name] = sums.get(name, 0.0) + r.rms / seeds
        for name, rms in sums.items():
            s = scalings[name]
            out.setdefault(name, {})[width] = (rms, predicted_rms(s.fan_out, s.fan_in, CHECK_LR, input_rms_at_init(name, cfg)))
        print(f"width {width}: {len(sums)} matrices", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--widths", default="64,128,256,512,1024")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("overrides", nargs="*", help="dotted config overrides, e.g. optim.ns_steps=12")
    args = ap.parse_args()

    from services.trainer.hparam.fit import fit_power_law
    from shared.config.loader import load_config

    widths = [int(w) for w in args.widths.split(",")]
    results = measure(load_config(args.config, ["tracker.mode=disabled", *args.overrides]), widths, args.seeds)
    print("\n| matrix | " + " | ".join(f"measured/P w={w}" for w in widths) + " | growth exponent |")
    print("|---|" + "---:|" * (len(widths) + 1))
    exponents = []
    for name in sorted(results):
        ws = sorted(results[name])
        ratios = " | ".join(f"{results[name][w][0] / results[name][w][1]:.2f}" for w in ws)
        slope = fit_power_law(ws, [results[name][w][0] for w in ws]).b
        exponents.append(slope)
        print(f"| {name} | {ratios} | {slope:+.2f} |")
    print(f"\n{len(exponents)} first matrices: growth exponent min {min(exponents):+.2f}, mean "
          f"{sum(exponents) / len(exponents):+.2f}, max {max(exponents):+.2f} (the update alone predicts +0.50)")


if __name__ == "__main__":
    main()
