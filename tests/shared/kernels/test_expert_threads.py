"""Routed experts run concurrently in groups: same function as the serial order, deterministic."""

from __future__ import annotations

import threading

import pytest
import torch

from shared.kernels import expert_threads, moe_experts_forward
from shared.kernels.expert_threads import expert_groups, run_concurrently, split_by_rows
from shared.kernels.reference import naive_moe_experts


def test_groups_are_contiguous_cover_every_expert_and_balance_rows():
    counts = [5, 0, 300, 20, 20, 260, 0, 10]
    for groups in (1, 2, 3, 8, 12):
        ranges = split_by_rows(counts, groups)
        assert len(ranges) == groups
        assert [e for r in ranges for e in r] == list(range(len(counts)))
    two = split_by_rows(counts, 2)
    rows = [sum(counts[e] for e in r) for r in two]
    assert max(rows) - min(rows) <= max(counts)
    assert split_by_rows(counts, 2) == two  # same counts, same cut


def test_setting_picks_the_group_count(monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setenv("MOELAB_EXPERT_THREADS", "auto")
    assert expert_groups(1e6, 16) == 2 and expert_groups(1e6, 3) == 1  # too few experts to share out
    assert expert_groups(expert_threads.CONCURRENT_MAX_EXPERT_MACS, 16) == 1
    monkeypatch.setenv("MOELAB_EXPERT_THREADS", "off")
    assert expert_groups(1e6, 16) == 1
    monkeypatch.setenv("MOELAB_EXPERT_THREADS", "3")
    assert expert_groups(1e9, 16) == 3 and expert_groups(1e9, 2) == 2
    monkeypatch.setenv("MOELAB_EXPERT_THREADS", "many")
    with pytest.raises(ValueError, match="MOELAB_EXPERT_THREADS='many'"):
        expert_groups(1e6, 16)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    monkeypatch.setenv("MOELAB_EXPERT_THREADS", "auto")
    assert expert_groups(1e6, 16) == 1


def test_jobs_run_single_threaded_and_threads_are_restored_even_on_error():
    threads = torch.get_num_threads()
    seen: list[int] = []
    run_concurrently([lambda: seen.append(torch.get_num_threads()), lambda: seen.append(torch.get_num_threads())])
    assert seen == [1, 1] and torch.get_num_threads() == threads

    def boom():
        raise RuntimeError("expert job failed")

    with pytest.raises(RuntimeError, match="expert job failed"):
        run_concurrently([lambda: None, boom])
    assert torch.get_num_threads() == threads


def test_building_the_pool_leaves_the_process_default_for_new_threads():
    threads = torch.get_num_threads()
    run_concurrently([lambda: None] * 3)  # a pool larger than any before: built now
    seen: list[int] = []
    fresh = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    fresh.start()
    fresh.join()
    assert seen == [threads]


def _problem(T=384, D=64, F=32, E=12, K=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, D, generator=g, requires_grad=True)
    w1, w3 = ((torch.randn(E, F, D, generator=g) / D**0.5).requires_grad_() for _ in range(2))
    w2 = (torch.randn(E, D, F, generator=g) / F**0.5).requires_grad_()
    w, idx = torch.randn(T, E, generator=g).sigmoid().topk(K, dim=-1)
    idx = torch.where(idx == 5, 6, idx)  # expert 5 idle: its weight gradients must be zeros
    return x, idx, w.requires_grad_(), w1, w3, w2


def _run(monkeypatch, setting, *problem):
    monkeypatch.setenv("MOELAB_EXPERT_THREADS", setting)
    x, idx, w, w1, w3, w2 = problem
    out, _ = moe_experts_forward(x, idx, w, w1, w3, w2, backend="fused")
    dy = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    return [out, *torch.autograd.grad(out, (x, w, w1, w3, w2), dy)]


def test_concurrent_groups_match_the_serial_order_and_the_reference(monkeypatch):
    problem = _problem()
    serial = _run(monkeypatch, "off", *problem)
    for groups in ("2", "3"):
        concurrent = _run(monkeypatch, groups, *problem)
        for a, b in zip(concurrent, serial, strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    x, idx, w, w1, w3, w2 = problem
    torch.testing.assert_close(serial[0], naive_moe_experts(x, idx, w, w1, w3, w2), atol=1e-5, rtol=1e-4)
    assert torch.equal(concurrent[3][5], torch.zeros_like(concurrent[3][5]))


def test_concurrent_groups_are_bitwise_reproducible(monkeypatch):
    problem = _problem(seed=3)
    first, second = _run(monkeypatch, "2", *problem), _run(monkeypatch, "2", *problem)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
