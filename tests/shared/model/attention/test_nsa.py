"""NSA: with selection over every block and window >= T it reduces to gated full attention,
the compression and selection branches match naive per-query loops, and the gathered (fast)
path equals the reference in outputs and gradients."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from shared.model.attention import build_attention


def _nsa(make_cfg, T, block=8, n_selected=2, window=8):
    cfg = make_cfg("nsa")
    cfg.attention.nsa.block_size = block
    cfg.attention.nsa.n_selected = n_selected
    cfg.attention.nsa.window = window
    torch.manual_seed(0)
    m = build_attention(cfg, 0)
    m.impl = "reference"
    with torch.no_grad():  # non-trivial position embeddings and gates
        m.compress_k.pos_LD.normal_()
        m.w_gate.bias.normal_()
    return m, torch.randn(2, T, cfg.d_model)


def test_full_selection_and_full_window_reduce_to_gated_full_causal_attention(make_cfg):
    T = 37
    m, x = _nsa(make_cfg, T, block=8, n_selected=5, window=T)  # ceil(37/8) = 5 blocks: all selected
    br = m.branches(x)
    rep = m.n_heads // m.n_kv_heads
    for branch in ("slc", "win"):
        k, v = (br[f"{t}_{branch}"].repeat_interleave(rep, dim=1) for t in "kv")
        full = F.scaled_dot_product_attention(br["q"], k, v, is_causal=True)
        torch.testing.assert_close(br[f"o_{branch}"], full, rtol=1e-5, atol=1e-6)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    assert torch.equal(br["selected"], causal.expand_as(br["selected"]))
    # Whole layer: W_o(g_cmp o_cmp + (g_slc + g_win) * causal-attention); here with equal k/v for the
    # two full branches the output is checkable from one SDPA call.
    with torch.no_grad():
        w = m.wkv.weight.view(6, -1, m.wkv.in_features)
        w[4].copy_(w[2])
        w[5].copy_(w[3])
    br = m.branches(x)
    k, v = (br[f"{t}_slc"].repeat_interleave(rep, dim=1) for t in "kv")
    full = F.scaled_dot_product_attention(br["q"], k, v, is_causal=True)
    g = br["gates"].unsqueeze(-1)
    expected = g[:, :, 0] * br["o_cmp"] + (g[:, :, 1] + g[:, :, 2]) * full
    torch.testing.assert_close(m(x), m.wo(expected.transpose(1, 2).reshape(2, T, -1)), rtol=1e-5, atol=1e-6)


def test_compression_branch_matches_a_naive_per_query_loop(make_cfg):
    T, block = 30, 8
    m, x = _nsa(make_cfg, T, block=block)
    br = m.branches(x)
    rep = m.n_heads // m.n_kv_heads
    kc = m.compress_k(br["k_cmp"]).repeat_interleave(rep, dim=1)
    vc = m.compress_v(br["v_cmp"]).repeat_interleave(rep, dim=1)
    d = m.head_dim
    for t in range(T):
        n_vis = (t + 1) // block  # blocks whose last token is <= t
        if n_vis == 0:
            assert br["o_cmp"][:, :, t].abs().max() == 0
            continue
        s = (br["q"][:, :, t : t + 1] @ kc[:, :, :n_vis].transpose(-1, -2)) / math.sqrt(d)
        ref = s.softmax(-1) @ vc[:, :, :n_vis]
        torch.testing.assert_close(br["o_cmp"][:, :, t], ref[:, :, 0], rtol=1e-5, atol=1e-6)


def test_selection_picks_top_n_group_importance_plus_first_and_own_block(make_cfg):
    T, block, n_sel = 64, 8, 3
    m, x = _nsa(make_cfg, T, block=block, n_selected=n_sel)
    br = m.branches(x)
    _, probs = m.compression(br["q"], br["k_cmp"], br["v_cmp"])
    rep = m.n_heads // m.n_kv_heads
    for b in range(2):
        for kh in range(m.n_kv_heads):
            imp = probs[b, kh * rep : (kh + 1) * rep].sum(0)
            for t in range(T):
                own = t // block
                forced = {0, own}
                rest = [j for j in range(own) if j not in forced]
                rest.sort(key=lambda j: -imp[t, j].item())
                chosen = forced | set(rest[: max(0, n_sel - len(forced))])
                expected = torch.zeros(T, dtype=torch.bool)
                for j in chosen:
                    expected[j * block : min((j + 1) * block, t + 1)] = True
                assert torch.equal(br["selected"][b, kh, t], expected), (b, kh, t)


@pytest.mark.parametrize(("T", "block", "n_selected", "window"), [(37, 8, 5, 37), (64, 8, 2, 8), (50, 4, 3, 5), (20, 16, 1, 3)])
def test_gather_path_equals_reference_in_outputs_and_grads(T, block, n_selected, window, make_cfg):
    m, x = _nsa(make_cfg, T, block=block, n_selected=n_selected, window=window)
    w = torch.randn(2, T, m.wo.out_features)
    results = []
    for impl in ("reference", "gather"):
        m.impl = impl
        m.zero_grad()
        y = m(x)
        (y * w).sum().backward()
        results.append((y, [p.grad.clone() for p in m.parameters()]))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-5, atol=1e-5)
    for a, b in zip(results[1][1], results[0][1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
