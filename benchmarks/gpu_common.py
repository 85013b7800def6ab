"""What the GPU benchmarks share: the device's facts and peaks, interleaved timing, MFU, the result file.

Every GPU benchmark times its contenders in the same run, round by round in a rotating order
(a slow spell slows all alike), synchronising the device around each timed call, and reports
medians and ratios. MFU is counted once: tokens/s × `shared.model.flops_per_token` (the
training FLOPs of a token, 6·N_active_matmul + attention) / peak, against both the data-sheet
peak and the peak `moelab doctor` measured on this GPU (`shared.hardware.measured_peak_flops`).
Each benchmark also runs on CPU with `--device cpu` at tiny sizes, so a CPU test keeps the
code working between GPU sessions; those figures mean nothing.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from shared.provenance import tree_commit

ROOT = Path(__file__).resolve().parents[1]


def device_facts(device: torch.device) -> dict:
    """Versions and the device's name, memory and bf16 peaks (spec and measured), for the JSON."""
    from shared.hardware import GPU_SPECS, measured_peak_flops

    facts = {"commit": tree_commit(), "torch": torch.__version__, "cuda": torch.version.cuda,
             "python": platform.python_version(), "device": str(device)}
    try:
        import transformers

        facts["transformers"] = transformers.__version__
    except ImportError:
        facts["transformers"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts.update(gpu=props.name, gpu_memory_gib=props.total_memory / 2**30,
                     capability=f"sm{props.major}{props.minor}")
        spec = next((t * 1e12 for k, t, _ in GPU_SPECS if k in props.name), None)
        facts.update(peak_spec_flops=spec, peak_measured_flops=_measured_only(device) or None)
    else:
        facts.update(gpu=None, peak_spec_flops=None, peak_measured_flops=measured_peak_flops(device))
    return facts


def _measured_only(device: torch.device) -> float | None:
    from shared.hardware import peak_file

    path = peak_file()
    if not path.exists():
        return None
    return json.loads(path.read_text()).get(f"cuda:{torch.cuda.get_device_name(device)}")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(contenders: dict[str, Callable[[int], object]], rounds: int, device: torch.device,
                     warmup: int = 2) -> dict[str, list[float]]:
    """Seconds of each timed call `fn(round)`, after `warmup` untimed rounds; the order rotates."""
    names = list(contenders)
    for r in range(warmup):
        for name in names:
            contenders[name](r)
    sync(device)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            sync(device)
            t0 = time.perf_counter()
            contenders[name](warmup + r)
            sync(device)
            times[name].append(time.perf_counter() - t0)
    return times


def first_runs(contenders: dict[str, Callable[[], object]], device: torch.device,
               resident: dict[str, float] | None = None) -> tuple[dict[str, float | None], dict[str, str]]:
    """Run each contender once: (its peak memory GiB, the error of those that did not run).

    Every contender's model is resident while each runs, so a contender's figure is what it held
    before its first step (`resident[name]`, its weights) plus what that step added at its peak
    (gradients, optimizer state, activations): its own footprint, comparable with `moelab plan`,
    not the process's total.

    A GPU session is one short run on an image this repository does not control (another
    transformers, a Triton that cannot compile a kernel, an out-of-memory): a contender that fails
    is dropped with its reason in the JSON rather than losing the other contenders' figures.
    """
    memory: dict[str, float | None] = {}
    errors: dict[str, str] = {}
    for name, fn in contenders.items():
        try:
            added = peak_added_gib(device, fn)
            memory[name] = None if added is None else added + (resident or {}).get(name, 0.0)
        except Exception as exc:  # noqa: BLE001 - recorded, reported, and the contender dropped
            errors[name] = f"{type(exc).__name__}: {exc}"[:500]
            print(f"{name} failed and is left out: {errors[name]}", flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return memory, errors


def module_gib(module: torch.nn.Module) -> float:
    """GiB held by a module's parameters and buffers."""
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors) / 2**30


def median(values: list[float]) -> float:
    return statistics.median(values)


def mfu(tokens_per_s: float, flops_per_token: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation, the training FLOPs of a token counted once."""
    return tokens_per_s * flops_per_token / peak if peak else None


def peak_added_gib(device: torch.device, fn: Callable[[], object]) -> float | None:
    """Run `fn`; how far allocated device memory rose above its level before, at its peak (None off CUDA)."""
    if device.type != "cuda":
        fn()
        return None
    sync(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    sync(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**30


def text_bytes(n_tokens: int) -> torch.Tensor:
    """Python's documentation prose (`pydoc_data`, in every CPython) as byte tokens, repeated to length."""
    import pydoc_data.topics as topics

    data = "\n\n".join(topics.topics[k] for k in sorted(topics.topics)).encode("utf-8")
    t = torch.tensor(list(data), dtype=torch.long)
    reps = -(-n_tokens // t.numel())
    return t.repeat(reps)[:n_tokens]


def write_result(result: dict, out: str | None) -> None:
    """Write the result JSON atomically to `out` (if given) and print it as the last output line."""
    text = json.dumps(result, default=float)
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text + "\n")
        os.replace(tmp, path)
    print(text, flush=True)


def pick_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda needs a CUDA device, and torch sees none (use --device cpu for a smoke run)")
    return torch.device(name)
