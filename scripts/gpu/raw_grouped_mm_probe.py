"""Does `torch._grouped_mm` leave a dirty weight gradient for an expert with no tokens, and does the
tiny bf16 training go non-finite without the zeroing `shared.kernels.grouped_mm` adds?

One of the checks of the first H200 NaN (docs/gpu/README.md): on the H200 both came back clean.
Usage (on a GPU, from the repository root): PYTHONPATH=. python scripts/gpu/raw_grouped_mm_probe.py
"""

import json
import os

import torch

import shared.kernels.grouped_mm as gm
from shared.config import load_config
from shared.model.transformer import MoETransformer

# a CPU run (MOELAB_GPU_SCRIPT_DEVICE=cpu) is the smoke test that keeps the script working between GPU sessions
DEVICE = os.environ.get("MOELAB_GPU_SCRIPT_DEVICE", "cuda")


def empty_group_wgrad(trials: int = 3) -> list[dict]:
    n_experts, n_out, n_in = 4, 128, 256
    found = []
    for _ in range(trials):
        junk = torch.full((n_experts, n_out, n_in), float("nan"), device=DEVICE, dtype=torch.bfloat16)
        del junk
        dy = torch.randn(96, n_out, device=DEVICE, dtype=torch.bfloat16)
        x = torch.randn(96, n_in, device=DEVICE, dtype=torch.bfloat16)
        offs = torch.tensor([40, 40, 96, 96], device=DEVICE, dtype=torch.int32)  # experts 1 and 3 empty
        dw = torch._grouped_mm(dy.t(), x, offs=offs)
        empty = torch.stack([dw[1], dw[3]])
        found.append({"empty_nonfinite": int((~torch.isfinite(empty)).sum()), "empty_nonzero": int((empty != 0).sum())})
    return found


def tiny_without_zeroing(steps: int = 20) -> dict:
    gm._gmm_wgrad = lambda dy_TO, x_TI, offs, counts_E: torch._grouped_mm(dy_TO.t(), x_TI.contiguous(), offs=offs)
    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", "model.d_model=128",
                                            "model.moe.expert_hidden=128", "model.moe.dispatch_backend=grouped_mm"])
    torch.manual_seed(0)
    model = MoETransformer(cfg.model).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = torch.randint(0, 256, (8, 65), device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(1))
    losses, first_bad = [], None
    for step in range(steps):
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            logits, aux = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, 256), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        (loss + aux["aux_loss"]).backward()
        bad = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
        if bad and first_bad is None:
            first_bad = {"step": step, "params": bad[:6]}
        opt.step()
        losses.append(loss.item())
    return {"losses": losses[:6], "first_nonfinite_grads": first_bad}


if __name__ == "__main__":
    print(json.dumps({"raw_empty_group_wgrad": empty_group_wgrad(), "tiny_bf16_without_zeroing": tiny_without_zeroing()}))
