"""`moelab doctor`: the hardware and environment check to run before the first training."""

from __future__ import annotations

import json

import typer


def format_table(report) -> str:
    rows: list[tuple[str, str]] = []
    for name, version in report.versions.items():
        rows.append((name, version or "absent"))
    cpu = report.cpu
    rows += [
        ("cpu", cpu.get("model", "unknown")),
        ("cpu ISA flags", " ".join(cpu.get("isa_flags", [])) or "none of the tracked ones"),
        ("ISA caps (env)", " ".join(f"{k}={v}" for k, v in cpu.get("isa_env", {}).items()) or "none"),
        ("MKL", report.blas.get("mkl") or "not found"),
        ("oneDNN", report.blas.get("onednn") or "not found"),
        ("ATen CPU kernels", report.blas.get("aten") or "unknown"),
        ("cpu cores", str(report.cpu_cores)),
        ("memory", f"{report.memory_gib:.1f} GiB"),
        ("free disk", f"{report.disk_free_gib:.1f} GiB"),
    ]
    if report.cpu_fp32_gflops is not None:
        rows.append(("cpu fp32 matmul", f"{report.cpu_fp32_gflops:.1f} GFLOP/s (measured)"))
    if report.cpu_gemm_autotune:
        rows.append(("cpu GEMM autotune", f"key {cpu.get('autotune_key')} (MOELAB_HOME cache; --retune to measure again)"))
        for entry in report.cpu_gemm_autotune:
            note = f"  (provisional: measured at load {entry['load_average']})" if entry.get("provisional") else ""
            rows.append((f"  {entry['class']}", f"{entry['library']:<6}  MKL {entry['mkl_us']:.1f} µs, "
                         f"oneDNN {entry['onednn_us']:.1f} µs{note}"))
    if report.cpu_expert_paths:
        rows.append(("cpu routed-expert path", "per layer shape, measured by the first training steps (MOELAB_HOME cache)"))
        for entry in report.cpu_expert_paths:
            times = ", ".join(f"{way} {ms:.1f} ms" for way, ms in entry["ms"].items())
            n = entry["confirmations"]
            rows.append((f"  {entry['class']}", f"{entry['way']:<16}  {times}  (fastest of {n} process{'es' * (n > 1)})"))
    if report.gloo_allreduce_gbps is not None:
        rows.append(("gloo all-reduce (2 proc)", f"{report.gloo_allreduce_gbps:.2f} GB/s bus bandwidth"))
    for gpu in report.gpus:
        spec = f" / spec {gpu.spec_tflops:.0f} ({gpu.tflops_fraction:.0%})" if gpu.spec_tflops else " / spec unknown"
        rows.append((f"gpu {gpu.index}", f"{gpu.name}, {gpu.memory_gib:.0f} GiB"))
        rows.append((f"gpu {gpu.index} bf16 matmul", f"{gpu.bf16_tflops:.0f} TFLOP/s{spec}"))
        bw_spec = f" / spec {gpu.spec_gbps:.0f}" if gpu.spec_gbps else ""
        rows.append((f"gpu {gpu.index} memory copy", f"{gpu.copy_gbps:.0f} GB/s{bw_spec}"))
    if report.nccl_busbw_gbps is not None:
        rows.append(("nccl all-reduce", f"{report.nccl_busbw_gbps:.1f} GB/s bus bandwidth"))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    lines.append("")
    lines += [f"FAIL: {f}" for f in report.failures] or ["all checks passed"]
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor(
        as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
        require_gpu: bool = typer.Option(False, "--require-gpu", help="Fail when no CUDA device is visible."),
        quick: bool = typer.Option(False, "--quick", help="Smaller measurements (seconds, less precise)."),
        retune: bool = typer.Option(False, "--retune", help="Forget this machine's CPU GEMM and routed-expert choices and measure again."),
    ) -> None:
        """Versions, resources, the BLAS code paths in use, the CPU GEMM autotune table, measured
        matmul/copy/all-reduce peaks; exits 1 when a check fails."""
        from shared.hardware import run_doctor, store_peak

        report = run_doctor(require_gpu=require_gpu, quick=quick, retune=retune)
        store_peak(report)
        if as_json:
            typer.echo(json.dumps(report.to_json()))
        else:
            typer.echo(format_table(report))
        if report.failures:
            raise typer.Exit(code=1)
