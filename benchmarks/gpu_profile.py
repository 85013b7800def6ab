"""Where a training step's time goes: a `torch.profiler` trace summarised as tables.

Why a summariser of our own: `prof.key_averages().table()` lists operators, not the questions a
step's attribution asks — how long each forward range, the backward and the optimizer took on the
device, which kernel families the time went to, how busy the GPU was between the first and last
kernel, how many times the host waited for the device, and which SDPA kernel each attention call
got (flash, memory-efficient, cuDNN, math). It reads the Chrome trace that
`prof.export_chrome_trace` writes (so a trace saved by any run can be summarised later) and
prints Markdown tables and one JSON line.

Ranges come from `record_function` annotations: `profile_steps` marks `forward`, `backward`,
`optimizer` and, through module hooks, `forward/layer<i>/attn` and `forward/layer<i>/ffn`. On a GPU
a range's time is that of its `gpu_user_annotation` (the device-side span of the range); without
one (CPU) the host range's own duration.

    python benchmarks/gpu_profile.py TRACE.json --steps 3 --out summary.md   # tables; last line JSON
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

# Kernel families, first match wins (names of cuBLAS/CUTLASS/Triton/ATen kernels on Hopper, and
# the ATen operators that a CPU trace shows instead of kernels).
FAMILIES: tuple[tuple[str, str], ...] = (
    ("attention", r"flash|fmha|attention|sdpa|_efficient_attention|cudnn.*(mha|sdp)"),
    ("grouped_gemm", r"grouped_mm|grouped_gemm|_grouped_mm|triton_gmm"),
    ("gemm", r"gemm|cutlass|xmma|nvjet|cublas|sm90_|matmul|aten::(mm|addmm|bmm|baddbmm|linear)\b"),
    ("optimizer", r"adam|multi_tensor_apply|_foreach_|fused_adamw"),
    ("norm", r"rms_?norm|layer_?norm"),
    ("softmax_loss", r"softmax|cross_entropy|nll_loss|logsumexp"),
    ("index_scatter_sort", r"index|scatter|gather|sort|radix|cumsum|topk|embedding"),
    ("copy_cast", r"copy|cast|memcpy|memset|_to_copy|fill"),
    ("reduction", r"reduce|sum|mean|amax|norm"),
    ("elementwise", r"elementwise|vectorized|unrolled|triton_|silu|mul|add|sigmoid|exp|aten::"),
)

# SDPA operators by backend, as the CPU side of a trace names them.
SDPA_OPS = {
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten::_scaled_dot_product_efficient_attention": "memory-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cuDNN",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
}
# Host waits: CUDA runtime synchronisations, and the host reading a device scalar (`.item()`,
# `.tolist()`, `int(t)`), which on CPU shows as the operator alone.
SYNC_RUNTIME = re.compile(r"cuda(Stream|Device|Event)Synchronize")
SCALAR_READ_OPS = ("aten::_local_scalar_dense",)
RANGE_PREFIXES = ("forward", "backward", "optimizer")


def family(name: str) -> str:
    for fam, pattern in FAMILIES:
        if re.search(pattern, name, re.IGNORECASE):
            return fam
    return "other"


def _events(trace: dict) -> list[dict]:
    return [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]


def _union_us(intervals: Iterable[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def summarize(trace: dict, steps: int = 1, top: int = 15) -> dict:
    """The attribution tables of a Chrome trace of `steps` training steps (figures per step, in ms)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    events = _events(trace)
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    on_gpu = bool(kernels)
    # without device kernels (a CPU trace) the work items are the leaf-most ATen operators
    work = kernels or [e for e in events if e.get("cat") == "cpu_op" and str(e.get("name", "")).startswith("aten::")]
    ranges: dict[str, float] = defaultdict(float)
    range_cat = "gpu_user_annotation" if any(e.get("cat") == "gpu_user_annotation" for e in events) else "user_annotation"
    for e in events:
        if e.get("cat") == range_cat and str(e["name"]).startswith(RANGE_PREFIXES):
            ranges[e["name"]] += e["dur"] / 1e3 / steps
    per_kernel: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in work:
        per_kernel[e["name"]][0] += 1
        per_kernel[e["name"]][1] += e["dur"] / 1e3
    if not on_gpu:  # nested operators would count twice: keep each op's self time where the trace has it
        per_kernel = _cpu_self_times(work)
    total_ms = sum(ms for _, ms in per_kernel.values()) or 1e-12
    families: dict[str, float] = defaultdict(float)
    for name, (_, ms) in per_kernel.items():
        families[family(name)] += ms / steps
    top_rows = sorted(per_kernel.items(), key=lambda kv: -kv[1][1])[:top]
    busy = None
    if on_gpu:
        spans = [(e["ts"], e["ts"] + e["dur"]) for e in kernels]
        wall = max(e for _, e in spans) - min(s for s, _ in spans)
        busy = _union_us(spans) / wall if wall > 0 else None
    syncs = sum(1 for e in events if e.get("cat") == "cuda_runtime" and SYNC_RUNTIME.search(str(e["name"])))
    scalar_reads = sum(1 for e in events if e.get("cat") == "cpu_op" and e.get("name") in SCALAR_READ_OPS)
    sdpa: dict[str, int] = defaultdict(int)
    for e in events:
        if e.get("cat") == "cpu_op" and e.get("name") in SDPA_OPS:
            sdpa[SDPA_OPS[e["name"]]] += 1
    return {
        "device": "gpu" if on_gpu else "cpu", "steps": steps,
        "ranges_ms": dict(sorted(ranges.items())),
        "families_ms": dict(sorted(families.items(), key=lambda kv: -kv[1])),
        "top_kernels": [{"name": n, "calls_per_step": c / steps, "ms_per_step": ms / steps,
                         "share": ms / total_ms, "family": family(n)} for n, (c, ms) in top_rows],
        "kernel_ms_per_step": total_ms / steps,
        "gpu_busy_fraction": busy,
        "host_syncs_per_step": syncs / steps,
        "scalar_reads_per_step": scalar_reads / steps,
        "sdpa_calls_per_step": {k: v / steps for k, v in sorted(sdpa.items())},
    }


def _cpu_self_times(ops: list[dict]) -> dict[str, list[float]]:
    """Per operator name: [calls, self ms], self = its duration less that of the operators nested
    directly in it on the same thread (a CPU trace nests `aten::linear` over `aten::addmm` ...)."""
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    by_thread: dict[tuple, list[dict]] = defaultdict(list)
    for e in ops:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[list] = []  # [event, self time left]
        entries: list[list] = []
        for e in evs:
            while stack and e["ts"] >= stack[-1][0]["ts"] + stack[-1][0]["dur"]:
                stack.pop()
            if stack:
                stack[-1][1] -= e["dur"]
            entry = [e, float(e["dur"])]
            stack.append(entry)
            entries.append(entry)
        for e, self_us in entries:
            out[e["name"]][0] += 1
            out[e["name"]][1] += max(self_us, 0.0) / 1e3
    return out


def markdown(summary: dict) -> str:
    """The summary as Markdown tables."""
    lines = [f"Device: {summary['device']}; {summary['steps']} step(s); figures per step.", ""]
    lines += ["| range | ms |", "|---|---:|"]
    lines += [f"| {k} | {v:.3f} |" for k, v in summary["ranges_ms"].items()] or ["| (no ranges in the trace) | |"]
    lines += ["", "| kernel family | ms | share |", "|---|---:|---:|"]
    total = summary["kernel_ms_per_step"] or 1e-12
    lines += [f"| {k} | {v:.3f} | {v / total:.1%} |" for k, v in summary["families_ms"].items()]
    lines += ["", "| top kernels | family | calls | ms | share |", "|---|---|---:|---:|---:|"]
    for row in summary["top_kernels"]:
        name = row["name"] if len(row["name"]) <= 90 else row["name"][:87] + "..."
        lines.append(f"| `{name}` | {row['family']} | {row['calls_per_step']:.1f} | {row['ms_per_step']:.3f} | "
                     f"{row['share']:.1%} |")
    busy = summary["gpu_busy_fraction"]
    lines += ["", "| measure | value |", "|---|---:|",
              f"| kernel time (ms) | {summary['kernel_ms_per_step']:.3f} |",
              f"| GPU busy fraction | {'n/a (no device kernels)' if busy is None else f'{busy:.1%}'} |",
              f"| host syncs (CUDA runtime waits) | {summary['host_syncs_per_step']:.1f} |",
              f"| host reads of a device scalar | {summary['scalar_reads_per_step']:.1f} |"]
    lines += ["", "| SDPA backend | calls |", "|---|---:|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in summary["sdpa_calls_per_step"].items()] or ["| (no SDPA call) | 0 |"]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def _range(name: str):
    from torch.autograd.profiler import record_function

    with record_function(name):
        yield


def annotate_blocks(model) -> list:
    """`record_function` ranges `forward/layer<i>/attn` and `forward/layer<i>/ffn` around every
    block's attention and FFN (module hooks; the model is not changed). Returns the hook handles."""
    from torch.autograd.profiler import record_function

    handles = []
    for i, block in enumerate(getattr(model, "layers", [])):
        block = getattr(block, "_checkpoint_wrapped_module", block)
        for part in ("attn", "ffn"):
            module = getattr(block, part, None)
            if module is None:
                continue
            name = f"forward/layer{i}/{part}"

            def pre(mod, args, _name=name):
                mod._profile_range = record_function(_name)
                mod._profile_range.__enter__()

            def post(mod, args, out):
                rng = getattr(mod, "_profile_range", None)
                if rng is not None:
                    rng.__exit__(None, None, None)
                    mod._profile_range = None

            handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    return handles


def profile_steps(forward: Callable[[], object], backward: Callable[[object], None], optimizer_step: Callable[[], None],
                  steps: int, trace_path: str | Path, model=None, warmup: int = 1) -> dict:
    """Run `warmup` then `steps` training steps under `torch.profiler` (CPU and, where present, CUDA
    activity), each phase in its range; write the Chrome trace to `trace_path`; return `summarize`."""

    def one_step():
        with _range("forward"):
            out = forward()
        with _range("backward"):
            backward(out)
        with _range("optimizer"):
            optimizer_step()

    return profile_step_fn(one_step, steps, trace_path, model, warmup)


def profile_step_fn(one_step: Callable[[], object], steps: int, trace_path: str | Path, model=None,
                    warmup: int = 1) -> dict:
    """`profile_steps` for a step function that marks its own `forward`/`backward`/`optimizer`
    ranges (benchmarks/train_step.py's `make_step` does)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    handles = annotate_blocks(model) if model is not None else []
    try:
        for _ in range(warmup):
            one_step()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        with profile(activities=activities) as prof:
            for _ in range(steps):
                one_step()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
    finally:
        for h in handles:
            h.remove()
    trace_path = Path(trace_path)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(trace_path))
    return summarize(json.loads(trace_path.read_text()), steps)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", help="a Chrome trace written by torch.profiler's export_chrome_trace")
    p.add_argument("--steps", type=int, default=1, help="training steps the trace holds (figures are per step)")
    p.add_argument("--top", type=int, default=15, help="rows of the top-kernels table")
    p.add_argument("--out", default=None, help="also write the Markdown tables here")
    args = p.parse_args()
    summary = summarize(json.loads(Path(args.trace).read_text()), args.steps, args.top)
    text = markdown(summary)
    print(text)
    if args.out:
        tmp = Path(args.out).with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
