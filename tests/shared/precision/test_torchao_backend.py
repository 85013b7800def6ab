"""`precision.backend: torchao`: refused clearly where torchao, its recipe or a GPU is missing; on a
machine that has them, our rows reach torchao's fp8 MoE GEMM in the layout it documents.

torchao is not installed here (CI installs no optional GPU packages), so its function is stood in
by one that checks the input contract of torchao 0.18.0's `_to_fp8_rowwise_then_scaled_grouped_mm`
(its assertions: A row-major with K % 16 == 0, B_t (E, K, N) column-major with K, N % 16 == 0,
int32 group end offsets, groups of multiples of 16 rows, no token-group padding asked for) and
multiplies in fp32.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from shared.config import ConfigError, load_config
from shared.config.precision import PrecisionConfig
from shared.config.validation import check_config
from shared.model.transformer import MoETransformer
from shared.precision import torchao_backend
from shared.precision.torchao_backend import torchao_grouped_linear, torchao_linear

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU machine's behaviour")


def _cfg(*overrides):
    return load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", "model.moe.precision.expert=fp8",
                                             "model.moe.precision.fp8_granularity=row", *overrides])


def _standin_grouped_mm(calls):
    def fn(a, b_t, offs, out_dtype=torch.bfloat16, float8_dtype=torch.float8_e4m3fn, pad_token_groups_for_grouped_mm=True):
        assert not pad_token_groups_for_grouped_mm  # 0.18.0 asserts this
        assert a.dim() == 2 and a.stride(-1) == 1 and a.shape[-1] % 16 == 0
        assert b_t.dim() == 3 and b_t.stride(-2) == 1 and b_t.shape[-2] % 16 == 0 and b_t.shape[-1] % 16 == 0
        assert offs.dtype == torch.int32 and offs.shape == (b_t.shape[0],)
        ends = offs.tolist()
        sizes = [e - s for s, e in zip([0, *ends[:-1]], ends, strict=True)]
        assert all(s % 16 == 0 for s in sizes), sizes
        calls.append(sizes)
        out = torch.full((a.shape[0], b_t.shape[-1]), float("nan"))  # rows of no group: never written
        parts = [a[s:e] @ b_t[g] for g, (s, e) in enumerate(zip([0, *ends[:-1]], ends, strict=True))]
        out[: ends[-1]] = torch.cat(parts)
        return out

    return fn


@pytest.fixture
def standin_torchao(monkeypatch):
    calls: list = []
    pkg = types.ModuleType("torchao")
    proto = types.ModuleType("torchao.prototype")
    moe = types.ModuleType("torchao.prototype.moe_training")
    moe._to_fp8_rowwise_then_scaled_grouped_mm = _standin_grouped_mm(calls)
    for name, mod in (("torchao", pkg), ("torchao.prototype", proto), ("torchao.prototype.moe_training", moe)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(torchao_backend, "_installed", lambda: True)
    return calls


def test_config_refuses_recipes_torchao_has_not():
    for bad, said in (("model.moe.precision.fp8_granularity=block", "fp8_granularity=block"),
                      ("model.moe.precision.fp8_grad_format=e5m2", "e5m2"),
                      ("model.moe.precision.expert=nvfp4", "nvfp4 has no torchao path")):
        with pytest.raises(ConfigError, match=said):
            _cfg("model.moe.precision.backend=torchao", bad)
    assert PrecisionConfig(expert="fp8", fp8_granularity="row", backend="torchao").torchao_unsupported_reason("fp8") is None


def test_config_check_says_torchao_is_missing(monkeypatch):
    monkeypatch.setattr(torchao_backend, "_installed", lambda: False)
    findings = check_config(_cfg("model.moe.precision.backend=torchao"))
    (f,) = [f for f in findings if f.field == "model.moe.precision.backend"]
    assert f.error and "torchao is not installed" in f.message
    assert not [f for f in check_config(_cfg()) if f.field == "model.moe.precision.backend"]


def test_model_build_refuses_torchao_when_missing_and_when_there_is_no_gpu(monkeypatch, standin_torchao):
    cfg = _cfg("model.moe.precision.backend=torchao")
    with torch.device("meta"):  # shape only (plan, precision-report): nothing required
        assert MoETransformer(cfg.model).precision_backends["expert"]["backend"] == "torchao"
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match=r"backend=torchao, but no CUDA device is visible"):
            MoETransformer(cfg.model)
        (f,) = [f for f in check_config(cfg) if f.field == "model.moe.precision.backend"]
        assert not f.error and "no CUDA device" in f.message  # checked elsewhere than it trains: a warning
    monkeypatch.setattr(torchao_backend, "_installed", lambda: False)
    with pytest.raises(RuntimeError, match=r"backend=torchao, but torchao is not installed"):
        MoETransformer(cfg.model)


def test_rows_reach_torchao_in_16_aligned_groups_and_come_back_in_place(standin_torchao):
    counts = [5, 0, 21, 3]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(sum(counts) + 4, 32, generator=gen, requires_grad=True)
    w = torch.randn(4, 48, 32, generator=gen, requires_grad=True)
    y = torchao_grouped_linear(x, w, counts)
    assert standin_torchao == [[16, 0, 32, 16]]
    start = 0
    for e, c in enumerate(counts):
        assert torch.allclose(y[start : start + c], x[start : start + c] @ w[e].t(), atol=1e-5)
        start += c
    assert not y[start:].any() and torch.isfinite(y).all()  # dropped rows: zeros, never the unwritten tail
    y.sum().backward()
    assert not w.grad[1].any() and w.grad[2].abs().sum() > 0  # an empty expert's gradient is zero
    lin = torchao_linear(x[:7].detach().reshape(7, 32), w[0].detach())
    assert torch.allclose(lin, x[:7].detach() @ w[0].detach().t(), atol=1e-5)


def test_a_model_on_backend_torchao_runs_its_expert_gemms_there(monkeypatch, standin_torchao):
    from shared.precision import experts as experts_mod

    monkeypatch.setattr(experts_mod, "torchao_status", lambda cfg, mode: None)  # as on a GPU with torchao
    cfg = _cfg("model.moe.precision.backend=torchao", "model.moe.expert_hidden=32")
    model = MoETransformer(cfg.model)
    assert model.precision_backends["expert"]["backend"] == "torchao"
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    logits, aux = model(tokens)
    (logits.float().square().mean() + aux["aux_loss"]).backward()
    n_moe = sum(1 for m in model.modules() if hasattr(m, "gmm"))
    # per MoE layer: the routed experts' two grouped GEMMs and the shared expert's three linears
    assert n_moe and len(standin_torchao) >= 2 * n_moe
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
