"""Ragged expert groups for `torch._scaled_grouped_mm`: aligned offsets, and the kernel's CPU reference.

Why ragged: the first native path padded every expert to the longest one (a 3-D batch) and fell
back to one GEMM per expert above 2× padding, after a `counts.tolist()` host sync. The grouped
kernel's offsets form takes the experts' rows one after another in one 2-D operand, each group
ending at `offs[g]`; fp8 requires every group to start on a 16-row boundary (16 bytes of fp8 for
the Wgrad product, whose reduction runs over the rows). `aligned_layout` pads each group only to
the next multiple of 16 — at most 15 zero rows per expert — entirely on the device: the padded
buffer has a static size (rows + 15 · experts, rounded up), so nothing waits for the counts.

`scaled_grouped_mm` calls the CUDA kernel for CUDA (and meta) tensors. Elsewhere it runs
`reference_scaled_grouped_mm`, which computes what the kernel computes — the same fp8 values and
scales, products accumulated in fp32 — and marks what the kernel leaves unwritten (rows past the
last group, the blocks of empty groups) with NaN, so a caller that read them fails its tests on
the CPU rather than on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ALIGN_ROWS = 16


@dataclass(frozen=True)
class AlignedLayout:
    """Where each row of a ragged (rows, C) operand goes in the 16-aligned buffer, and the groups.

    `dest[r]`: the buffer row of input row r (rows past sum(counts), dropped by capacity, go to the
    tail, past the last group, which the kernel never reads); `offs` (int32, one per group): where
    each aligned group ends; `group_of_row[p]`: the group of buffer row p (n_groups for the tail);
    `valid[r]`: whether input row r belongs to a group; `empty[g]`: whether group g has no rows.
    """

    dest: torch.Tensor
    offs: torch.Tensor
    group_of_row: torch.Tensor
    valid: torch.Tensor
    empty: torch.Tensor
    padded_rows: int

    def scatter(self, t: torch.Tensor) -> torch.Tensor:
        """(rows, C) -> (padded_rows, C): rows in their aligned places, zeros elsewhere."""
        return t.new_zeros(self.padded_rows, t.shape[1]).index_copy(0, self.dest, t)

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """(padded_rows, C) -> (rows, C): each input row's result, zero for rows of no group."""
        return t.index_select(0, self.dest).masked_fill(~self.valid[:, None], 0)


def aligned_layout(counts: torch.Tensor, n_rows: int, align: int = ALIGN_ROWS) -> AlignedLayout:
    """The 16-aligned layout of `n_rows` rows sorted by group, `counts[g]` rows in group g."""
    counts = counts.to(torch.int64)
    n_groups = counts.shape[0]
    dev = counts.device
    padded = -(-(n_rows + (align - 1) * n_groups) // align) * align
    ends = torch.cumsum(counts, 0)
    aligned = (counts + align - 1) // align * align
    aligned_ends = torch.cumsum(aligned, 0)
    aligned_starts = aligned_ends - aligned
    rows = torch.arange(n_rows, device=dev)
    group = torch.searchsorted(ends, rows, right=True)  # n_groups for rows past the last group
    total = ends[-1] if n_groups else torch.zeros((), dtype=torch.int64, device=dev)
    tail = (aligned_ends[-1] if n_groups else total) + rows - total
    starts = ends - counts
    inside = group < n_groups
    g = group.clamp(max=max(n_groups - 1, 0))
    dest = torch.where(inside, aligned_starts[g] + rows - starts[g], tail)
    positions = torch.arange(padded, device=dev)
    group_of_row = torch.searchsorted(aligned_ends, positions, right=True)
    return AlignedLayout(dest, aligned_ends.to(torch.int32), group_of_row, inside, counts == 0, padded)


def scaled_grouped_mm(
    a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, offs: torch.Tensor
) -> torch.Tensor:
    """`torch._scaled_grouped_mm` (bf16 out) on CUDA and meta tensors; the fp32 reference elsewhere."""
    if a.device.type in ("cuda", "meta"):
        return torch._scaled_grouped_mm(a, b, scale_a, scale_b, offs=offs, out_dtype=torch.bfloat16)
    return reference_scaled_grouped_mm(a, b, scale_a, scale_b, offs)


def reference_scaled_grouped_mm(
    a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, offs: torch.Tensor
) -> torch.Tensor:
    """What `torch._scaled_grouped_mm` computes, in fp32, for its two offsets forms:

    - 2-D × 3-D: a (M, K), b (G, K, N), scale_a (M,), scale_b (G, N) -> (M, N), rows of group g
      (offs[g-1]..offs[g]) times b[g]; rows past offs[-1] are NaN (the kernel does not write them);
    - 2-D × 2-D: a (N, M), b (M, K), scale_a (G·N,), scale_b (G·K,) -> (G, N, K), group g the
      product over its columns of a / rows of b; an empty group's block is NaN (not written).
    """
    with torch.autocast(a.device.type, enabled=False):  # the kernel accumulates in fp32 under autocast too
        return _reference(a, b, scale_a, scale_b, offs)


def _reference(a, b, scale_a, scale_b, offs):
    ends = [int(e) for e in offs.tolist()]
    starts = [0, *ends[:-1]]
    af, bf = a.float(), b.float()
    if b.dim() == 3:
        out = torch.full((a.shape[0], b.shape[2]), float("nan"))
        for g, (s, e) in enumerate(zip(starts, ends, strict=True)):
            out[s:e] = (af[s:e] * scale_a[s:e, None]) @ (bf[g] * scale_b[g][None, :])
        return out
    n, k = a.shape[0], b.shape[1]
    out = torch.full((len(ends), n, k), float("nan"))
    for g, (s, e) in enumerate(zip(starts, ends, strict=True)):
        if e > s:
            out[g] = (af[:, s:e] * scale_a[g * n : (g + 1) * n, None]) @ (bf[s:e] * scale_b[g * k : (g + 1) * k][None, :])
    return out
