"""fp8 copies of the expert weights, quantised once per optimizer step and reused until the weights change.

Why: weights change only when the optimizer steps, yet a GEMM that quantises its operands per
call quantises each weight again for every micro-batch, and once more in the backward (Dgrad
needs it along the other dimension). With K micro-batches per step that is 2K quantisations of
every expert weight where 2 suffice.

What makes a stale copy impossible: the key of a cached copy is the weight's provenance read
from the autograd graph, down to the leaf parameters it is made of, with each leaf's identity,
storage address and version counter. PyTorch bumps a tensor's version on every in-place write
(`add_`, `copy_`, `mul_`, the optimizers' foreach updates), and a rebinding of `.data` changes
the storage address, so any change to a parameter changes the key; the old entry is dropped on
the next lookup. The experts' fused gate/up weight is a fresh `torch.cat` of two parameters on
every forward: its key is the cat's dimension and both parameters' keys, so it too is quantised
once per step. A weight whose provenance is not a parameter, a cast of one or a cat of those
(or any weight under `torch.no_grad`, which records no graph) is quantised per call, uncached.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Quantised = tuple[torch.Tensor, torch.Tensor]


def provenance(w: torch.Tensor) -> tuple | None:
    """A hashable key that changes whenever `w`'s values can have changed, or None (not cacheable)."""
    if w.grad_fn is None:
        return _leaf_key(w) if w.is_leaf and w.requires_grad else None
    return _node_key(w.grad_fn, w)


def _leaf_key(t: torch.Tensor) -> tuple:
    return ("leaf", id(t), t.data_ptr(), t._version, t.dtype, tuple(t.shape))


def _node_key(node, out: torch.Tensor | None) -> tuple | None:
    name = type(node).__name__
    if name == "AccumulateGrad":
        return _leaf_key(node.variable)
    children = [n for n, _ in node.next_functions]
    if name == "CatBackward0":
        keys = tuple(None if c is None else _node_key(c, None) for c in children)
        return None if any(k is None for k in keys) else ("cat", node._saved_dim, keys)
    if name == "ToCopyBackward0" and len(children) == 1 and children[0] is not None and out is not None:
        inner = _node_key(children[0], None)
        return None if inner is None else ("to", out.dtype, inner)
    return None


class WeightQuantCache:
    """Quantised layouts of weights, keyed by (layout name, provenance); one entry per name.

    `get(name, w, quantise)` returns `quantise(w)` computed at most once while `w`'s provenance is
    unchanged. `quantisations` counts the calls to `quantise` (tests read it; a step's figure is 2
    per weight: the forward and the Dgrad layouts).
    """

    def __init__(self) -> None:
        self._entries: dict[str, tuple[tuple, Quantised]] = {}
        self.quantisations = 0

    def get(self, name: str, w: torch.Tensor, quantise: Callable[[torch.Tensor], Quantised]) -> Quantised:
        key = provenance(w)
        entry = self._entries.get(name)
        if key is not None and entry is not None and entry[0] == key:
            return entry[1]
        self.quantisations += 1
        with torch.no_grad():
            value = quantise(w.detach())
        if key is None:
            self._entries.pop(name, None)
        else:
            self._entries[name] = (key, value)
        return value

    def resident_bytes(self) -> int:
        """Bytes held by the cached fp8 values and their scales."""
        return sum(t.numel() * t.element_size() for _, value in self._entries.values() for t in value)

    def clear(self) -> None:
        self._entries.clear()
