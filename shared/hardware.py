"""Hardware facts and *measured* peaks, for `moelab doctor` and for MFU.

Why measure instead of trusting the spec sheet: MFU against a number the chip never reaches hides
real losses, and a misconfigured node (wrong clocks, a GPU on the wrong PCIe link, a container
without shared memory for NCCL) only shows up as a measurement far below spec. The measured peak
is stored (see `store_peak`) so the trainer computes MFU against what this machine really does.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import platform
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from shared.net import free_port

log = logging.getLogger(__name__)

# Dense (no sparsity) bf16 tensor-core TFLOP/s and HBM GB/s from the vendors' data sheets.
# Matched by substring of torch.cuda.get_device_name(), most specific first.
GPU_SPECS: tuple[tuple[str, float, float], ...] = (
    ("H200", 989.0, 4800.0),
    ("H100 PCIe", 756.0, 2000.0),
    ("H100", 989.0, 3350.0),
    ("B200", 2250.0, 8000.0),
    ("A100-SXM4-80GB", 312.0, 2039.0),
    ("A100", 312.0, 1555.0),
    ("L40S", 362.0, 864.0),
)
MIN_FRACTION_OF_SPEC = 0.60


@dataclass
class GpuReport:
    index: int
    name: str
    memory_gib: float
    bf16_tflops: float
    copy_gbps: float
    spec_tflops: float | None
    spec_gbps: float | None

    @property
    def tflops_fraction(self) -> float | None:
        return self.bf16_tflops / self.spec_tflops if self.spec_tflops else None


@dataclass
class DoctorReport:
    versions: dict[str, str | None]
    cpu_cores: int
    memory_gib: float
    disk_free_gib: float
    cpu: dict = field(default_factory=dict)  # model, ISA flags, ISA-capping variables, autotune key
    blas: dict[str, str | None] = field(default_factory=dict)  # the MKL / oneDNN code paths really running
    cpu_gemm_autotune: list[dict] = field(default_factory=list)  # this machine's measured GEMM choices
    cpu_expert_paths: list[dict] = field(default_factory=list)  # and routed-expert ways per layer shape
    cpu_fp32_gflops: float | None = None
    gloo_allreduce_gbps: float | None = None
    gpus: list[GpuReport] = field(default_factory=list)
    nccl_busbw_gbps: float | None = None
    failures: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        out = asdict(self)
        for gpu, raw in zip(self.gpus, out["gpus"], strict=True):
            raw["tflops_fraction"] = gpu.tflops_fraction
        return out


def package_versions() -> dict[str, str | None]:
    """Versions of what a training run depends on; None for what is absent (never imported here)."""
    versions: dict[str, str | None] = {"python": platform.python_version(), "torch": torch.__version__}
    versions["cuda"] = torch.version.cuda
    versions["nccl"] = None
    if torch.cuda.is_available():
        try:
            versions["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001 - NCCL missing from this build is a fact to report
            versions["nccl"] = None
    for name in ("ray", "transformer-engine", "vllm", "triton", "flash-linear-attention"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def memory_gib() -> float:
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    return 0.0


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def measure_cpu_fp32_gflops(n: int = 1024, repeats: int = 5) -> float:
    """Best-of-`repeats` fp32 matmul throughput on this process's threads, the faster of torch's
    `mm` (MKL) and oneDNN's matmul (`shared.kernels.cpu_gemm.mm_nt` pinned to it).

    MFU must be measured against the fastest GEMM the model can run: on AMD CPUs MKL runs at about
    half the speed oneDNN reaches, and the model runs its GEMMs on whichever is faster, so a peak
    taken from `torch.mm` alone would put MFU near or above 100% there.
    """
    from shared.kernels import cpu_gemm

    a = torch.randn(n, n)
    b = torch.randn(n, n)

    def onednn() -> None:
        with cpu_gemm.use_cpu_gemm("onednn" if cpu_gemm.onednn_available() else "mkl"):
            cpu_gemm.mm_nt(a, b)

    best = float("inf")
    for gemm in (lambda: torch.mm(a, b), onednn):
        gemm()
        for _ in range(repeats):
            t0 = time.perf_counter()
            gemm()
            best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


def measure_gpu(index: int, n: int = 8192, iters: int = 20) -> GpuReport:
    """bf16 matmul TFLOP/s and device-memory copy GB/s of one GPU, next to its spec."""
    dev = torch.device("cuda", index)
    props = torch.cuda.get_device_properties(dev)
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(dev)
    start.record()
    for _ in range(iters):
        a @ b
    end.record()
    torch.cuda.synchronize(dev)
    tflops = 2 * n**3 * iters / (start.elapsed_time(end) / 1e3) / 1e12
    buf = torch.empty(256 * 2**20, device=dev, dtype=torch.float32)  # 1 GiB
    dst = torch.empty_like(buf)
    dst.copy_(buf)
    torch.cuda.synchronize(dev)
    start.record()
    for _ in range(iters):
        dst.copy_(buf)
    end.record()
    torch.cuda.synchronize(dev)
    gbps = 2 * buf.numel() * 4 * iters / (start.elapsed_time(end) / 1e3) / 1e9  # read + write
    spec = next(((t, g) for key, t, g in GPU_SPECS if key in props.name), (None, None))
    return GpuReport(index, props.name, props.total_memory / 2**30, tflops, gbps, spec[0], spec[1])


def _allreduce_worker(rank: int, world: int, port: int, backend: str, numel: int, iters: int, out) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=rank, world_size=world)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    x = torch.ones(numel, device=device)
    dist.all_reduce(x)
    if backend == "nccl":
        torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    if backend == "nccl":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    if rank == 0:
        # Bus bandwidth as nccl-tests defines it: algbw × 2(n−1)/n.
        algbw = numel * 4 * iters / elapsed / 1e9
        out.put(algbw * 2 * (world - 1) / world)
    dist.destroy_process_group()


def measure_allreduce_busbw(backend: str, world: int, numel: int, iters: int) -> float:
    """All-reduce bus bandwidth (GB/s) across `world` local processes (gloo on CPU, NCCL on GPUs)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = free_port()
    procs = [
        ctx.Process(target=_allreduce_worker, args=(r, world, port, backend, numel, iters, queue)) for r in range(world)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"{backend} all-reduce workers failed (exit codes {[p.exitcode for p in procs]})")
    return float(queue.get())


# GEMMs whose shape classes `moelab doctor` makes sure are measured, as (m, k, n, layouts, vary): one
# linear of the train-step benchmark (d 256 → 128 over 2,048 rows: forward, input and weight
# gradient) and one routed expert of the MoE layer benchmark (512 rows, d 512, width 128), whose
# row count varies with the routing.
PROBE_GEMMS = (
    (2048, 256, 128, "rr", ""), (2048, 128, 256, "rc", ""), (128, 2048, 256, "cc", ""),
    (512, 512, 128, "rr", "m"), (512, 512, 128, "rc", "m"), (512, 512, 128, "cc", "k"),
)


def cpu_gemm_report(retune: bool = False, quick: bool = False) -> list[dict]:
    """This machine's GEMM choices after measuring `PROBE_GEMMS` (all of them measured again with
    `retune`), one row per shape class with both libraries' times."""
    from shared.kernels import cpu_gemm, gemm_autotune

    tuner = gemm_autotune.TUNER
    tuner.reset()  # read the cache of this MOELAB_HOME
    if retune:
        tuner.clear()
    if cpu_gemm.onednn_available():
        for m, k, n, layout, vary in PROBE_GEMMS[:3] if quick else PROBE_GEMMS:
            tuner.library(m, k, n, layout, vary)
    section = gemm_autotune.read_cache().get(tuner.key, {}).get("classes", {})
    return [{"class": label, "library": e["library"], "mkl_us": round(e["mkl_us"], 1),
             "onednn_us": round(e["onednn_us"], 1), "provisional": e.get("provisional", False),
             "load_average": e.get("load_average")} for label, e in sorted(section.items())]


def cpu_expert_path_report(retune: bool = False) -> list[dict]:
    """The routed-expert way measured for each layer shape this machine has trained (forgotten with
    `retune`, to be measured again by the next training run)."""
    from shared.kernels import expert_path_autotune

    expert_path_autotune.TUNER.reset()
    if retune:
        expert_path_autotune.TUNER.clear()
    return [{"class": label, "way": e["way"], "ms": e["ms"], "load_average": e.get("load_average"),
             "confirmations": e.get("confirmations", 1)}
            for label, e in sorted(expert_path_autotune.cached_entries().items())]


def cpu_facts() -> dict:
    from shared.kernels import gemm_autotune

    fingerprint = gemm_autotune.machine_fingerprint()
    return {"model": fingerprint["cpu"], "isa_flags": fingerprint["isa_flags"], "isa_env": fingerprint["env"],
            "autotune_key": gemm_autotune.machine_key(fingerprint)}


def run_doctor(require_gpu: bool = False, quick: bool = False, retune: bool = False) -> DoctorReport:
    """Collect versions, resources and measured peaks; `failures` lists every failed check."""
    from shared.kernels.blas_probe import libraries

    report = DoctorReport(
        versions=package_versions(),
        cpu_cores=cpu_cores(),
        memory_gib=memory_gib(),
        disk_free_gib=shutil.disk_usage(Path.cwd()).free / 2**30,
        cpu=cpu_facts(),
        blas=libraries(),
    )
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            gpu = measure_gpu(i, n=4096 if quick else 8192)
            report.gpus.append(gpu)
            frac = gpu.tflops_fraction
            if frac is not None and frac < MIN_FRACTION_OF_SPEC:
                report.failures.append(
                    f"GPU {i} ({gpu.name}) reaches {gpu.bf16_tflops:.0f} TFLOP/s bf16, "
                    f"{frac:.0%} of its {gpu.spec_tflops:.0f} spec (< {MIN_FRACTION_OF_SPEC:.0%})"
                )
        if torch.cuda.device_count() > 1:
            report.nccl_busbw_gbps = measure_allreduce_busbw("nccl", torch.cuda.device_count(), 64 * 2**20, 20)
    else:
        if require_gpu:
            report.failures.append("no CUDA device visible to torch (--require-gpu); check the driver and CUDA_VISIBLE_DEVICES")
        report.cpu_fp32_gflops = measure_cpu_fp32_gflops(n=512 if quick else 1024)
        report.cpu_gemm_autotune = cpu_gemm_report(retune=retune, quick=quick)
        report.cpu_expert_paths = cpu_expert_path_report(retune=retune)
        report.gloo_allreduce_gbps = measure_allreduce_busbw("gloo", 2, 2**20 if quick else 16 * 2**20, 5)
    if report.disk_free_gib < 1.0:
        report.failures.append(f"only {report.disk_free_gib:.2f} GiB free disk in {Path.cwd()}")
    return report


def peak_file() -> Path:
    return Path(os.environ.get("MOELAB_HOME", Path.home() / ".cache" / "moelab")) / "peak.json"


def peak_key(device: torch.device | str) -> str:
    """What a stored peak belongs to: this machine (CPU model, flags, ISA variables, torch; see
    `gemm_autotune.machine_key`), the device and, on CPU, the thread count that measured it.

    Why so narrow: a peak file under a home folder shared by several machines, or one written by a
    process running on fewer threads, would otherwise be read as this process's peak, and MFU would
    move by 10-100x between runs of the same model with no word said."""
    from shared.kernels.gemm_autotune import machine_key

    device = torch.device(device)
    if device.type == "cpu":
        return f"cpu@{machine_key()}/threads={torch.get_num_threads()}"
    return f"cuda:{torch.cuda.get_device_name(device)}@{machine_key()}"


def store_peak(report: DoctorReport) -> Path:
    """Persist the measured peak FLOP/s of this machine's devices, read later by `measured_peak_flops`."""
    peaks: dict[str, float] = {}
    if report.cpu_fp32_gflops:
        peaks[peak_key("cpu")] = report.cpu_fp32_gflops * 1e9
    for gpu in report.gpus:
        peaks[peak_key(torch.device("cuda", gpu.index))] = gpu.bf16_tflops * 1e12
    return _store_peaks(peaks)


def _store_peaks(peaks: dict[str, float]) -> Path:
    """Merge `peaks` into the file under an exclusive lock (two processes storing at once both land).

    A stored value only rises: a peak is the most the device did, and a measurement taken while
    something else shared the cores reads low (which would inflate every later run's MFU), so a
    later, higher measurement replaces it and a lower one never does."""
    import fcntl

    from shared.data.atomic import atomic_write_json

    path = peak_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        existing = _read_peaks(path)
        for key, value in peaks.items():
            old = existing.get(key)
            existing[key] = max(value, old) if isinstance(old, int | float) else value
        atomic_write_json(path, existing)
    return path


def _read_peaks(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def measured_peak_flops(device: torch.device | str, measure_missing: bool = False) -> float | None:
    """The peak stored by `moelab doctor` for this device on this machine (`peak_key`), else the
    GPU's spec, else None.

    With `measure_missing` a CPU without a stored peak is measured now (about a second) and the
    result stored, so a first run on a new machine reports MFU. Only for a process that has the
    machine to itself: ranks measuring at once would each see a fraction of the cores and
    overstate MFU.
    """
    device = torch.device(device)
    key = peak_key(device)
    value = _read_peaks(peak_file()).get(key)
    if value:
        return float(value)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return next((t * 1e12 for k, t, _ in GPU_SPECS if k in name), None)
    if measure_missing:
        before = _cpu_seconds()
        peak = measure_cpu_fp32_gflops() * 1e9
        busy = machine_busy(before, _cpu_seconds())
        if busy:
            log.warning("measured the CPU peak (%.1f GFLOP/s) while other work shared the cores (%s): this "
                        "run's MFU is against it and reads high; not stored (run `moelab doctor` when quiet)",
                        peak / 1e9, busy)
        else:
            _store_peaks({key: peak})
        return peak
    return None


def _cpu_seconds() -> tuple[float, float, float] | None:
    """(wall, the machine's busy CPU seconds, this process's CPU seconds), or None without /proc/stat."""
    import resource

    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    ticks = [int(x) for x in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    hz = os.sysconf("SC_CLK_TCK")
    me = resource.getrusage(resource.RUSAGE_SELF)
    return time.monotonic(), (sum(ticks[:8]) - idle) / hz, me.ru_utime + me.ru_stime


def machine_busy(before: tuple[float, float, float] | None, after: tuple[float, float, float] | None) -> str:
    """Why a measurement taken between `before` and `after` reads low ('' when it does not): other
    processes used more than a quarter of one core on average meanwhile. Measured, not read from
    the load average, which lags by a minute and counts this pipeline's own finished stages."""
    if before is None or after is None or after[0] <= before[0]:
        return ""
    wall = after[0] - before[0]
    others = (after[1] - before[1]) - (after[2] - before[2])
    return f"other processes used {others / wall:.2f} cores meanwhile" if others > 0.25 * wall else ""


if __name__ == "__main__":  # pragma: no cover - convenience for debugging
    print(json.dumps(run_doctor(quick="--quick" in sys.argv).to_json(), indent=2))
