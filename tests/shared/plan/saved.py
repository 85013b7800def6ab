"""Measure what autograd keeps for the backward: bytes of saved tensors per part of the model.

Saved-tensor hooks see every tensor an op stores for its backward; tensors sharing storage count
once. Parameters, buffers (RoPE tables) and tensors computed from parameters alone (autocast's
bf16 weight casts, the experts' concatenated gate|up weight) are excluded: the plan counts those
as weights and low-precision copies. A tensor is an activation when its autograd history reaches
the token embedding's lookup (or when it has none: indices, routing choices). The part of a tensor is the innermost of `layers.i.{attn_norm,attn,ffn_norm,ffn}`,
`norm` or `head` running when it was saved.
"""

from __future__ import annotations

from collections import defaultdict

import torch
import torch.nn.functional as F

from shared.kernels.cpu_gemm import use_cpu_gemm


def saved_bytes(model, tokens_BT: torch.Tensor, autocast: bool) -> dict[str, int]:
    """{part: saved bytes} for one forward and the loss of `model` on `tokens_BT` (next-token CE)."""
    owned = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, tuple[str, int]] = {}
    stack = ["head"]
    hooks = []
    for name, module in model.named_modules():
        parts = name.split(".")
        if (len(parts) == 3 and parts[0] == "layers") or name == "norm":
            hooks.append(module.register_forward_pre_hook(lambda m, a, n=name: stack.append(n)))
            hooks.append(module.register_forward_hook(lambda m, a, o: (stack.pop(), None)[1]))

    from_tokens: dict = {}

    def depends_on_tokens(fn) -> bool:
        if fn is None:
            return True
        todo, visited = [fn], []
        while todo:
            node = todo.pop()
            if node in from_tokens:
                if from_tokens[node]:
                    break
                continue
            visited.append(node)
            if type(node).__name__.startswith("EmbeddingBackward"):
                break
            todo.extend(n for n, _ in node.next_functions if n is not None)
        else:
            from_tokens.update(dict.fromkeys(visited, False))
            return False
        from_tokens.update(dict.fromkeys(visited, True))
        return True

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in owned and key not in seen and depends_on_tokens(t.grad_fn):
            seen[key] = (stack[-1], storage.nbytes())
        return t

    inputs, targets = tokens_BT[:, :-1], tokens_BT[:, 1:]
    try:
        with use_cpu_gemm("mkl"), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits, _ = model(inputs)
            F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
    finally:
        for h in hooks:
            h.remove()
    out: dict[str, int] = defaultdict(int)
    for part, nbytes in seen.values():
        out[part] += nbytes
    return dict(out)
