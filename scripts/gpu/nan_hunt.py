"""Find where the tiny bf16 run goes non-finite on CUDA after an fp8 run in the same process.

Usage: python scripts/gpu/nan_hunt.py DISPATCH fp8-first|alone [default|math|efficient|flash|cudnn|nocudnn]
Prints per step the loss and the first parameters with non-finite gradients, and the modules
whose backward first saw non-finite values (in backward order); the last argument restricts
the attention (SDPA) backends.
"""

import json
import os
import sys

import torch

from shared.config import load_config
from shared.model.transformer import MoETransformer

# a CPU run (MOELAB_GPU_SCRIPT_DEVICE=cpu) is the smoke test that keeps the script working between GPU sessions
DEVICE = os.environ.get("MOELAB_GPU_SCRIPT_DEVICE", "cuda")

dispatch, order = sys.argv[1], sys.argv[2]
sdpa = sys.argv[3] if len(sys.argv) > 3 else "default"
if sdpa == "nocudnn":
    torch.backends.cuda.enable_cudnn_sdp(False)
elif sdpa != "default":
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"math": SDPBackend.MATH, "efficient": SDPBackend.EFFICIENT_ATTENTION,
               "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[sdpa]
    sdpa_kernel(backend).__enter__()


def train(*precision: str, anomaly: bool = False) -> dict:
    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", *precision,
                                            f"model.moe.dispatch_backend={dispatch}", "model.d_model=128",
                                            "model.moe.expert_hidden=128"])
    torch.manual_seed(0)
    model = MoETransformer(cfg.model).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = torch.randint(0, 256, (8, 65), device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(1))
    losses, first_bad, where = [], None, None
    seen: list[str] = []

    def watch(name):
        def hook(module, grad_in, grad_out):
            for kind, grads in (("grad_output", grad_out), ("grad_input", grad_in)):
                if any(g is not None and not torch.isfinite(g).all() for g in grads) and len(seen) < 6:
                    seen.append(f"{name} ({type(module).__name__}) {kind}")
        return hook

    if anomaly:
        for name, module in model.named_modules():
            if name:
                module.register_full_backward_hook(watch(name))
    for step in range(6):
        with torch.autograd.set_detect_anomaly(anomaly and first_bad is None):
            with torch.autocast(DEVICE, dtype=torch.bfloat16):
                logits, aux = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, 256), tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            try:
                (loss + aux["aux_loss"]).backward()
            except RuntimeError as exc:
                where = str(exc).splitlines()[0][:300]
        bad = [(n, int((~torch.isfinite(p.grad)).sum())) for n, p in model.named_parameters()
               if p.grad is not None and not torch.isfinite(p.grad).all()]
        if bad and first_bad is None:
            first_bad = {"step": step, "params": bad[:10], "anomaly": where, "modules": list(seen),
                         "aux": {k: float(v) for k, v in aux.items() if torch.is_tensor(v) and v.numel() == 1}}
        opt.step()
        losses.append(loss.item())
    return {"losses": losses, "first_bad": first_bad}


out = {"dispatch": dispatch, "order": order, "sdpa": sdpa}
if order == "fp8-first":
    out["fp8"] = train("model.moe.precision.expert=fp8", "model.moe.precision.dense=fp8",
                       "model.moe.precision.backend=native")["losses"]
out["bf16"] = train(anomaly=True)
print(json.dumps(out))
