"""The profiler summariser: ranges, kernel families, top kernels, GPU busy fraction, host syncs and
SDPA backends from a synthetic GPU trace, and from a real CPU trace of a tiny training step."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.gpu_profile import family, markdown, profile_steps, summarize


def _x(name, cat, ts, dur, tid=1):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 0, "tid": tid}


def _synthetic_two_steps() -> dict:
    events = []
    for t0 in (0, 10_000):
        events += [
            _x("forward", "gpu_user_annotation", t0, 4_000, tid=7),
            _x("backward", "gpu_user_annotation", t0 + 4_000, 5_000, tid=7),
            _x("optimizer", "gpu_user_annotation", t0 + 9_000, 600, tid=7),
            _x("forward", "user_annotation", t0, 3_000),  # host ranges are ignored when device ones exist
            _x("sm90_xmma_gemm_bf16bf16_bf16f32", "kernel", t0 + 100, 2_000, tid=7),
            _x("pytorch_flash::flash_fwd_kernel", "kernel", t0 + 2_200, 1_000, tid=7),
            _x("void at::native::vectorized_elementwise_kernel<4>", "kernel", t0 + 3_300, 500, tid=7),
            _x("sm90_xmma_gemm_bf16bf16_bf16f32", "kernel", t0 + 4_000, 4_000, tid=7),
            _x("multi_tensor_apply_kernel<FusedAdamW>", "kernel", t0 + 9_000, 600, tid=7),
            _x("aten::_scaled_dot_product_flash_attention", "cpu_op", t0 + 2_000, 50),
            _x("aten::_local_scalar_dense", "cpu_op", t0 + 2_100, 5),
            _x("cudaStreamSynchronize", "cuda_runtime", t0 + 2_100, 400),
            _x("cudaLaunchKernel", "cuda_runtime", t0 + 90, 5),
        ]
    events.append({"ph": "M", "name": "process_name", "pid": 0})  # metadata rows are skipped
    return {"traceEvents": events}


def test_synthetic_gpu_trace_gives_per_step_ranges_families_busy_syncs_and_sdpa_backends():
    s = summarize(_synthetic_two_steps(), steps=2)
    assert s["device"] == "gpu"
    assert s["ranges_ms"] == {"backward": 5.0, "forward": 4.0, "optimizer": 0.6}
    assert s["families_ms"]["gemm"] == pytest.approx(6.0)
    assert s["families_ms"]["attention"] == pytest.approx(1.0)
    assert s["families_ms"]["optimizer"] == pytest.approx(0.6)
    assert s["families_ms"]["elementwise"] == pytest.approx(0.5)
    assert s["kernel_ms_per_step"] == pytest.approx(8.1)
    top = s["top_kernels"][0]
    assert top["name"].startswith("sm90_xmma_gemm") and top["calls_per_step"] == 2 and top["share"] == pytest.approx(6 / 8.1)
    # kernels (no overlaps) busy 8.1 ms of each step; the span runs from the first kernel (100 us)
    # to the last one's end (19,600 us), gaps within and between steps included
    busy_us = 2 * 8_100
    assert s["gpu_busy_fraction"] == pytest.approx(busy_us / (19_600 - 100))
    assert s["host_syncs_per_step"] == 1 and s["scalar_reads_per_step"] == 1
    assert s["sdpa_calls_per_step"] == {"flash": 1.0}
    text = markdown(s)
    for needle in ("| forward | 4.000 |", "| gemm |", "GPU busy fraction", "| flash | 1.0 |", "host syncs"):
        assert needle in text


def test_kernel_families_by_name():
    assert family("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm>") == "gemm"
    assert family("fmha_cutlassF_bf16_aligned_64x64_rf_sm80") == "attention"
    assert family("cudnn_generated_fort_native_sdpa_sm90_knob_7") == "attention"
    assert family("_grouped_mm_kernel") == "grouped_gemm"
    assert family("void at::native::(anonymous)::fused_rms_norm_kernel") == "norm"
    assert family("something_unheard_of") == "other"


def test_steps_must_be_positive():
    with pytest.raises(ValueError, match="steps must be >= 1"):
        summarize({"traceEvents": []}, steps=0)


def test_a_real_cpu_trace_of_a_tiny_training_step(tmp_path):
    from shared.config import load_config
    from shared.model import MoETransformer

    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256"]).model
    torch.manual_seed(0)
    model = MoETransformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, cfg.vocab_size, (2, 33))

    def forward():
        _, aux = model(tokens[:, :-1], tokens[:, 1:])
        return aux["lm_loss"] + aux["aux_loss"]

    def optimizer_step():
        opt.step()
        opt.zero_grad()

    s = profile_steps(forward, lambda loss: loss.backward(), optimizer_step, steps=2, trace_path=tmp_path / "t.json",
                      model=model)
    assert s["device"] == "cpu" and s["gpu_busy_fraction"] is None
    assert {"forward", "backward", "optimizer", "forward/layer0/attn", "forward/layer1/ffn"} <= set(s["ranges_ms"])
    assert all(v > 0 for v in s["ranges_ms"].values())
    assert s["ranges_ms"]["forward/layer1/ffn"] < s["ranges_ms"]["forward"]
    assert s["families_ms"] and s["top_kernels"] and s["kernel_ms_per_step"] > 0
    assert json.loads(json.dumps(s)) == s  # JSON-ready
    # the model's attention on CPU at these widths: the blocked kernel or SDPA, whichever ran is counted
    assert all(v > 0 for v in s["sdpa_calls_per_step"].values())
    assert (tmp_path / "t.json").exists()


def test_forced_balanced_routing_gives_every_expert_the_same_load_and_undoes():
    from benchmarks.gpu_train_step import REPRESENTATIVE, balanced_indices, force_balanced_routing
    from shared.config import load_config
    from shared.model import MoETransformer

    idx = balanced_indices(12, 2, 8, torch.device("cpu"))
    assert torch.equal(torch.bincount(idx.reshape(-1), minlength=8), torch.full((8,), 3))
    assert all(len(set(row.tolist())) == 2 for row in idx)
    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256"]).model
    model = MoETransformer(cfg)
    tokens = torch.randint(0, 256, (2, 16))
    assert force_balanced_routing(model) == 1
    _, aux = model(tokens)
    load = aux["layers"][1]["tokens_per_expert"]
    assert int(load.max() - load.min()) == 0
    force_balanced_routing(model, on=False)
    _, aux = model(tokens)
    assert int(aux["layers"][1]["tokens_per_expert"].max() - aux["layers"][1]["tokens_per_expert"].min()) > 0
    assert REPRESENTATIVE["vocab"] == 32768 and REPRESENTATIVE["layers"] == 6


def test_the_representative_proxys_head_is_at_most_a_fifth_of_its_flops_and_it_is_1_to_3b():
    from benchmarks.gpu_train_step import PROXY, REPRESENTATIVE, recipe_plan_gib
    from benchmarks.train_step import Shape
    from shared.model import count_params, flops_per_token

    for shape, head_ok in ((REPRESENTATIVE, True), (PROXY, False)):
        s = Shape(**shape)
        _, cfg = recipe_plan_gib(s)
        counts = count_params(cfg.model)
        head = 6 * s.d_model * s.vocab / flops_per_token(cfg.model, s.seq, counts)
        assert (head <= 0.20) is head_ok, head
        assert 1e9 <= counts.total <= 3e9
