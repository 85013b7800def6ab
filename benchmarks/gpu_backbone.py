"""The scorer's backbone on a GPU in bf16 vs fp32: documents/s and how far bf16 moves the features.

The production backbone is gpt-oss-20b (24 layers, width 2880; docs/scorer.md); no package ships its
weights and the GPU machines cannot download them, so this builds a randomly initialised
`GptOssModel` of the same layer shape (width 2880, 64 heads of 64 with 8 KV heads, 32 experts of
2880 top-4, alternating sliding/full attention) with 4 layers, directly on the GPU, and runs it
through the scorer's own `LayerwiseBackbone` (embed → layers → features) as the scoring actors do.
The same weights run in bf16 and fp32, interleaved; reported: documents/s of each, and the
relative error and cosine similarity of bf16's mean-pooled last-layer features (what the Probe
reads) against fp32's. Speed and precision of random weights stand in for the real model's: the
arithmetic is the same, the learned values are not.

    python benchmarks/gpu_backbone.py --out benchmarks/results/gpu_backbone.json   # on a GPU
    python benchmarks/gpu_backbone.py --device cpu --quick                         # CPU smoke run

Last line: JSON with docs_per_s, `ratio` (bf16 / fp32 documents/s), feature_rel_error, pooled_cosine.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]  # benchmarks/tokenize.py shadows stdlib
sys.path.insert(0, str(_HERE.parent))

import argparse  # noqa: E402

import torch  # noqa: E402

from benchmarks.gpu_common import device_facts, median, pick_device, time_interleaved, write_result  # noqa: E402

SHAPE = dict(vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=4, num_attention_heads=64,
             num_key_value_heads=8, head_dim=64, num_local_experts=32, num_experts_per_tok=4, sliding_window=128,
             max_position_embeddings=4096)
QUICK = dict(vocab_size=512, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=8,
             max_position_embeddings=128)


def build(shape: dict, device: torch.device, dtype: torch.dtype):
    from transformers import GptOssConfig, GptOssModel

    from services.scorer.backbone import LayerwiseBackbone

    layers = shape["num_hidden_layers"]
    cfg = GptOssConfig(**shape, layer_types=["sliding_attention", "full_attention"] * (layers // 2))
    torch.manual_seed(0)
    with device:
        model = GptOssModel(cfg).to(dtype)
    return LayerwiseBackbone(model)


def pooled_features(bb, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean-pooled (over real tokens) features of the last layer, fp32."""
    state = bb.run(bb.embed(ids, mask), bb.n_layers)
    h = bb.features(state).float()
    m = mask[..., None].float()
    return (h * m).sum(1) / m.sum(1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--quick", action="store_true", help="tiny shapes (a smoke run)")
    p.add_argument("--docs", type=int, default=32, help="documents per batch")
    p.add_argument("--tokens", type=int, default=512, help="tokens per document (the scorer's max_tokens)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default=None, help="also write the JSON here (e.g. benchmarks/results/gpu_backbone.json)")
    args = p.parse_args()
    device = pick_device(args.device)
    shape, docs, tokens, rounds = (QUICK, 4, 32, 2) if args.quick else (SHAPE, args.docs, args.tokens, args.rounds)
    bf16 = build(shape, device, torch.bfloat16)
    fp32 = build(shape, device, torch.float32)  # the same seed: the same weights, before rounding to bf16
    with torch.no_grad():
        for p_lo, p_hi in zip(bf16.model.parameters(), fp32.model.parameters(), strict=True):
            p_hi.copy_(p_lo.float())  # fp32 sees exactly bf16's weights: only the arithmetic differs
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, shape["vocab_size"], (docs, tokens), generator=gen).to(device)
    lengths = torch.randint(tokens // 4, tokens + 1, (docs,), generator=gen)
    mask = (torch.arange(tokens)[None] < lengths[:, None]).long().to(device)
    with torch.no_grad():
        times = time_interleaved({"bf16": lambda r: pooled_features(bf16, ids, mask),
                                  "fp32": lambda r: pooled_features(fp32, ids, mask)}, rounds, device, warmup=1)
        lo, hi = pooled_features(bf16, ids, mask), pooled_features(fp32, ids, mask)
    dps = {n: docs / median(t) for n, t in times.items()}
    result = {
        "benchmark": "gpu_backbone", **device_facts(device), "shape": shape, "docs": docs, "tokens": tokens,
        "docs_per_s": dps, "ratio": dps["bf16"] / dps["fp32"],
        "feature_rel_error": float((lo - hi).norm() / hi.norm()),
        "pooled_cosine": float(torch.nn.functional.cosine_similarity(lo, hi, dim=-1).mean()),
    }
    print(f"bf16 {dps['bf16']:,.1f} docs/s, fp32 {dps['fp32']:,.1f} docs/s; features rel. error "
          f"{result['feature_rel_error']:.2e}, cosine {result['pooled_cosine']:.5f}", flush=True)
    write_result(result, args.out)


if __name__ == "__main__":
    main()
