"""Memory a precision recipe really holds, measured from the tensors, beside `memory.py`'s prediction.

Why: low precision is supposed to save memory, and nothing measured it. Two figures, both read off
actual tensors:

- resident (between steps): the expert weights' master copies, plus the fp8 layouts a
  `WeightQuantCache` keeps from one optimizer step to the next;
- held for the backward (per micro-batch): every tensor autograd keeps from the forward — those
  saved through `save_for_backward` (seen by a saved-tensor hook) and those a custom autograd
  function keeps on its context (found by walking the graph: the fp8 copies the padded native
  path reuses, for instance) — each storage counted once, parameters' storages excluded (they
  are resident anyway).

On a GPU the allocator's own peak (`torch.cuda.max_memory_allocated` over one forward and
backward) is measured beside them; on a CPU these counts are the measurement.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from shared.precision.weight_cache import WeightQuantCache


def _storage(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


def expert_modules(model: nn.Module) -> list[nn.Module]:
    """The routed-expert modules (those with the `gmm` grouped-GEMM seam)."""
    return [m for m in model.modules() if hasattr(m, "gmm")]


def resident_expert_bytes(model: nn.Module) -> dict[str, int]:
    """Bytes of the routed experts' master weights and of their cached fp8 layouts."""
    experts = expert_modules(model)
    master = {_storage(p) for m in experts for p in m.parameters(recurse=False)}
    caches = [getattr(m.gmm, "weight_cache", None) for m in experts]
    unique = {id(c): c for c in caches if isinstance(c, WeightQuantCache)}
    return {"master": sum(n for _, n in master), "fp8_cache": sum(c.resident_bytes() for c in unique.values())}


def _tensors_in(value, depth: int = 0):
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 3 and isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors_in(v, depth + 1)
    elif depth < 3 and dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _tensors_in(getattr(value, f.name), depth + 1)


def _graph_nodes(roots):
    seen, stack = set(), [r for r in roots if r is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(n for n, _ in getattr(node, "next_functions", ()) if n is not None)


def held_for_backward(fn: Callable[[], torch.Tensor | tuple], exclude: list[torch.Tensor] = ()) -> tuple[object, int]:
    """Run `fn` (a forward); return its output and the bytes autograd keeps from it for the backward."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr, n = _storage(t)
        storages[ptr] = n
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    outs = out if isinstance(out, (tuple, list)) else (out,)
    for node in _graph_nodes([o.grad_fn for o in outs if isinstance(o, torch.Tensor)]):
        for value in getattr(node, "__dict__", {}).values():
            for t in _tensors_in(value):
                ptr, n = _storage(t)
                storages[ptr] = n
    for t in exclude:
        storages.pop(_storage(t)[0], None)
    return out, sum(storages.values())


def cuda_peak_bytes(device: torch.device, fn: Callable[[], object]) -> int | None:
    """How far allocated CUDA memory rose above its level before `fn`, at its peak (None off CUDA)."""
    if device.type != "cuda":
        fn()
        return None
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before
