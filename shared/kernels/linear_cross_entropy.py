"""LM head and cross-entropy in one pass over row blocks: the loss and both gradients in the forward.

The plain path (`F.cross_entropy(h @ Wᵀ, y)`) writes the N×V logits, reads them for log-softmax,
writes the N×V log-probabilities, and in the backward allocates and zero-fills an N×V gradient,
scatters -1/N into it and runs log-softmax's backward over it: five or six streams of an N×V
tensor through main memory around GEMMs that read only N×D and V×D. At the CPU benchmark shape
(2,048 tokens, vocabulary 4,096, d 256) that elementwise work cost more than the head's three GEMMs.

Here the rows are taken `chunk_rows` at a time (a block of logits that stays in cache): its logits,
their log-sum-exp, the loss terms, then the softmax turned in place into dL/dlogits
(softmax − one-hot; the 1/N on the GEMMs), and at once the block's input gradient (dlogits·W) and its share of the
weight gradient (dlogitsᵀ·h, accumulated). The backward only scales the two stored gradients by
the incoming scalar. No N×V tensor ever exists. The same idea is in Liger-Kernel's fused linear
cross-entropy and Apple's Cut Cross-Entropy; this is a CPU/any-device version in plain ATen ops.

Arithmetic: fp32 inputs outside autocast run fp32 throughout, max-subtracted exponentials as
log-softmax computes them (ATen's softmax kernel); loss and gradients match the plain path to
float rounding (tests/shared/kernels). bf16/fp16 inputs, or fp32 ones under autocast, run the
low-precision form (`_low_precision_blocks`): what the plain path computes there (the head's GEMMs
in the compute dtype, softmax and loss in fp32 of those logits, dL/dlogits cast back to the
compute dtype for the two gradient GEMMs), a block of rows at a time, so the N×V fp32 logits
(8.6 GB at 16,384 tokens and a 131k vocabulary) never exist. The weight gradient is accumulated
block by block in the compute dtype by the GEMM itself (beta 1: fp32 accumulation inside each
GEMM, one rounding per block), the blocks sized so there are few (`LOW_PRECISION_BLOCK_BYTES`).
Under torch.compile the plain path runs (the compiler fuses it).
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F
from torch import Tensor

# Rows per block: 512 × vocabulary 4,096 × 4 bytes = 8 MiB of logits, the size at which the block's
# elementwise passes still ran at cache speed on the 2-core benchmark machine (256 and 512 rows
# were equal, the whole 2,048 at once 40% slower).
CHUNK_ROWS = 512


# fp32 logits per block of the low-precision form: 1 GiB is 2,048 rows at vocabulary 131,072, so a
# 16,384-token step makes eight blocks (eight read-modify-writes of the weight gradient) and never
# more than a GiB of logits.
LOW_PRECISION_BLOCK_BYTES = 1 << 30
_LOW_PRECISION = (torch.bfloat16, torch.float16)


def _fused_applies(h_ND: Tensor, w_VD: Tensor) -> bool:
    dev = h_ND.device.type
    return (h_ND.dtype == torch.float32 and w_VD.dtype == torch.float32 and h_ND.device == w_VD.device
            and not torch.is_autocast_enabled(dev) and not torch.compiler.is_compiling())


def _low_precision_dtype(h_ND: Tensor, w_VD: Tensor) -> torch.dtype | None:
    """The head's compute dtype when it is bf16/fp16 (inputs in it, or autocast to it); else None."""
    if torch.compiler.is_compiling() or h_ND.device != w_VD.device:
        return None
    dev = h_ND.device.type
    if torch.is_autocast_enabled(dev):
        dtype = torch.get_autocast_dtype(dev)
        return dtype if dtype in _LOW_PRECISION else None
    return h_ND.dtype if h_ND.dtype == w_VD.dtype and h_ND.dtype in _LOW_PRECISION else None


def low_precision_block_rows(vocab: int) -> int:
    """Rows per block of the low-precision form: `LOW_PRECISION_BLOCK_BYTES` of fp32 logits, at least 64."""
    return max(64, LOW_PRECISION_BLOCK_BYTES // (4 * max(vocab, 1)))


def _low_precision_blocks(h_ND: Tensor, w_VD: Tensor, y_N: Tensor, dtype: torch.dtype, rows: int, need_h: bool,
                          need_w: bool) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Mean loss and the gradients asked for (in h's and W's dtypes), a block of `rows` at a time,
    the GEMMs in `dtype` and the softmax in fp32."""
    n = h_ND.shape[0]
    h_c, w_c = h_ND.to(dtype), w_VD.to(dtype)
    dh_ND = torch.empty(h_ND.shape, dtype=dtype, device=h_ND.device) if need_h else None
    dw_VD = torch.zeros(w_VD.shape, dtype=dtype, device=w_VD.device) if need_w else None
    total = torch.zeros((), dtype=torch.float32, device=h_ND.device)
    with torch.autocast(h_ND.device.type, enabled=False):
        for start in range(0, n, rows):
            h_CD, y_C = h_c[start:start + rows], y_N[start:start + rows]
            z_CV = torch.mm(h_CD, w_c.t())
            p_CV = torch.softmax(z_CV, 1, dtype=torch.float32)
            p_target = p_CV.gather(1, y_C.unsqueeze(1)).squeeze(1)
            loss = p_target.log().neg_()
            tiny = (p_target < _TINY_TARGET_P).nonzero().squeeze(1)
            if tiny.numel():
                z_tiny = z_CV[tiny].float()
                loss[tiny] = torch.logsumexp(z_tiny, 1) - z_tiny.gather(1, y_C[tiny].unsqueeze(1)).squeeze(1)
            total += loss.sum()
            if need_h or need_w:
                p_CV[torch.arange(p_CV.shape[0], device=p_CV.device), y_C] -= 1.0
                g_CV = p_CV.to(dtype)
                del p_CV
                if need_h:
                    dh_ND[start:start + rows].addmm_(g_CV, w_c, beta=0.0, alpha=1.0 / n)
                if need_w:
                    dw_VD.addmm_(g_CV.t(), h_CD, alpha=1.0 / n)
    dh = None if dh_ND is None else dh_ND.to(h_ND.dtype)
    dw = None if dw_VD is None else dw_VD.to(w_VD.dtype)
    return total / n, dh, dw


# Below this probability of the target, -log p loses the loss (p underflows to zero at a target
# logit ~87 nats under the row's log-sum-exp); such rows get their loss from recomputed logits.
_TINY_TARGET_P = 1e-30


def _block_loss_and_softmax(z_CV: Tensor, y_C: Tensor, h_CD: Tensor, w_VD: Tensor) -> Tensor:
    """Per-row loss terms (log-sum-exp − target logit); z_CV becomes the row softmax in place.

    ATen's softmax kernel works a row at a time (a 16 KiB row sits in L1), so max, exponentials,
    sum and scaling are one trip through memory instead of the four passes over the whole block
    that `amax`, `sub_().exp_()`, `sum` and `div_` take. The loss is then −log of the target's
    probability; for the rare row where that probability underflows the loss is recomputed from
    the row's logits."""
    torch.ops.aten._softmax.out(z_CV, 1, False, out=z_CV)
    p_target = z_CV.gather(1, y_C.unsqueeze(1)).squeeze(1)
    loss = p_target.log().neg_()
    tiny = (p_target < _TINY_TARGET_P).nonzero().squeeze(1)
    if tiny.numel():
        z_tiny = h_CD[tiny] @ w_VD.t()
        loss[tiny] = torch.logsumexp(z_tiny, 1) - z_tiny.gather(1, y_C[tiny].unsqueeze(1)).squeeze(1)
    return loss


_workspace = threading.local()


def _logits_block(rows: int, like_h: Tensor, vocab: int) -> Tensor:
    """The (rows, V) logits block, kept between calls (one per thread, the last shape asked for).

    Why: a fresh 8 MiB block every step is fresh pages from the OS once the allocator has handed
    the last one back, and on the 2-core benchmark VM first-touching them cost 12–16 ms of a
    ~320 ms step (the first block's GEMM ran at a third of its speed). The block never leaves
    this module: its contents are dead once the block's gradients are taken."""
    buf = getattr(_workspace, "logits", None)
    if buf is None or buf.shape != (rows, vocab) or buf.dtype != like_h.dtype or buf.device != like_h.device:
        buf = _workspace.logits = like_h.new_empty(rows, vocab)
    return buf


def _blocks(h_ND: Tensor, w_VD: Tensor, y_N: Tensor, chunk_rows: int, need_h: bool, need_w: bool
            ) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """The mean loss, and the gradients asked for, one block of rows at a time.

    dL/dz = (softmax − one-hot) / N: the 1/N rides on the GEMMs' alpha instead of a pass over the
    block."""
    n = h_ND.shape[0]
    dh_ND = torch.empty_like(h_ND) if need_h else None
    dw_VD = torch.zeros_like(w_VD) if need_w else None
    total = h_ND.new_zeros(())
    z_buf = _logits_block(min(chunk_rows, n), h_ND, w_VD.shape[0])
    rows = torch.arange(z_buf.shape[0], device=h_ND.device)
    for start in range(0, n, chunk_rows):
        h_CD, y_C = h_ND[start:start + chunk_rows], y_N[start:start + chunk_rows]
        z_CV = z_buf[: h_CD.shape[0]]
        torch.mm(h_CD, w_VD.t(), out=z_CV)
        total += _block_loss_and_softmax(z_CV, y_C, h_CD, w_VD).sum()
        if need_h or need_w:
            z_CV[rows[: h_CD.shape[0]], y_C] -= 1.0
            if need_h:  # beta 0: the empty block's contents are not read
                dh_ND[start:start + chunk_rows].addmm_(z_CV, w_VD, beta=0.0, alpha=1.0 / n)
            if need_w:
                dw_VD.addmm_(z_CV.t(), h_CD, alpha=1.0 / n)
    return total / n, dh_ND, dw_VD


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h_ND: Tensor, w_VD: Tensor, y_N: Tensor, chunk_rows: int, low_dtype: torch.dtype | None = None
                ) -> Tensor:
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if low_dtype is None:
            loss, dh_ND, dw_VD = _blocks(h_ND, w_VD, y_N, chunk_rows, need_h, need_w)
        else:
            loss, dh_ND, dw_VD = _low_precision_blocks(h_ND, w_VD, y_N, low_dtype, chunk_rows, need_h, need_w)
        ctx.save_for_backward(dh_ND, dw_VD)
        return loss

    @staticmethod
    def backward(ctx, grad_loss: Tensor):
        dh_ND, dw_VD = ctx.saved_tensors
        # Gradients are the stored ones times the incoming scalar (1 for a lone loss); they are
        # this function's own buffers, so scaling in place costs no copy.
        scale = None if bool(grad_loss == 1) else grad_loss
        if scale is not None:
            dh_ND = None if dh_ND is None else dh_ND.mul_(scale)
            dw_VD = None if dw_VD is None else dw_VD.mul_(scale)
        return dh_ND, dw_VD, None, None, None


def linear_cross_entropy(h_ND: Tensor, w_VD: Tensor, targets_N: Tensor, chunk_rows: int | None = None) -> Tensor:
    """mean_i CE(h_i·Wᵀ, y_i), differentiable in h and W, without materialising the N×V logits.

    h_ND: (N, D) hidden states; w_VD: (V, D) head weight (nn.Linear layout); targets_N: (N,)
    class indices in [0, V). fp32 runs the fp32 form (`chunk_rows` default `CHUNK_ROWS`), bf16/fp16
    or autocast to them the low-precision form (default `low_precision_block_rows`); anything else,
    and torch.compile (where the compiler fuses it itself), `F.cross_entropy(F.linear(h, W).float(), y)`.
    """
    if h_ND.dim() != 2 or w_VD.dim() != 2 or h_ND.shape[1] != w_VD.shape[1] or targets_N.shape != h_ND.shape[:1]:
        raise ValueError(f"linear_cross_entropy expects h (N, D), W (V, D), targets (N,); got "
                         f"{tuple(h_ND.shape)}, {tuple(w_VD.shape)}, {tuple(targets_N.shape)}")
    low_dtype = None if _fused_applies(h_ND, w_VD) else _low_precision_dtype(h_ND, w_VD)
    if low_dtype is None and not _fused_applies(h_ND, w_VD):
        return F.cross_entropy(F.linear(h_ND, w_VD).float(), targets_N)
    if chunk_rows is None:
        chunk_rows = CHUNK_ROWS if low_dtype is None else low_precision_block_rows(w_VD.shape[0])
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    # checked where it costs no device sync (on CUDA an out-of-range target is a device-side assert)
    if targets_N.numel() and targets_N.device.type == "cpu" and (int(targets_N.min()) < 0 or int(targets_N.max()) >= w_VD.shape[0]):
        raise IndexError(f"targets must lie in [0, {w_VD.shape[0]}); got [{int(targets_N.min())}, {int(targets_N.max())}]")
    if not (torch.is_grad_enabled() and (h_ND.requires_grad or w_VD.requires_grad)):
        if low_dtype is not None:
            return _low_precision_blocks(h_ND, w_VD, targets_N, low_dtype, chunk_rows, need_h=False, need_w=False)[0]
        return _blocks(h_ND, w_VD, targets_N, chunk_rows, need_h=False, need_w=False)[0]
    return _LinearCrossEntropy.apply(h_ND, w_VD, targets_N, chunk_rows, low_dtype)
