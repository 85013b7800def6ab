"""The GPU benchmarks' memory figure is one contender's own footprint, not the process's total."""

from __future__ import annotations

import pytest
import torch

from benchmarks.gpu_common import first_runs, module_gib


def test_off_cuda_there_is_no_memory_figure_and_a_failing_contender_is_reported():
    def boom():
        raise RuntimeError("kernel not found")

    memory, errors = first_runs({"ok": lambda: None, "bad": boom}, torch.device("cpu"), resident={"ok": 1.0})
    assert memory == {"ok": None} and errors == {"bad": "RuntimeError: kernel not found"}
    assert module_gib(torch.nn.Linear(1024, 256, bias=False)) == 1024 * 256 * 4 / 2**30


@pytest.mark.gpu
def test_a_contender_counts_its_own_weights_and_what_its_step_adds_not_the_others():
    device = torch.device("cuda")
    mine, other = torch.nn.Linear(4096, 4096).cuda(), torch.nn.Linear(8192, 8192).cuda()  # other: 4× mine, resident
    step_bytes = 64 * 2**20

    def step():
        scratch = torch.empty(step_bytes, dtype=torch.uint8, device=device)
        return scratch.sum()

    memory, errors = first_runs({"mine": step}, device, resident={"mine": module_gib(mine)})
    assert not errors and other.weight.is_cuda
    want = module_gib(mine) + step_bytes / 2**30
    assert want <= memory["mine"] < want + 0.05, (memory, want)
