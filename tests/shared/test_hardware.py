"""`moelab doctor`: the CPU branch runs for real here; the GPU branch runs where CUDA is."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from moelab.cli import app
from shared import hardware

runner = CliRunner()


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("MOELAB_HOME", str(tmp_path))


def test_doctor_json_on_cpu_measures_matmul_and_gloo():
    if torch.cuda.is_available():
        pytest.skip("CPU branch only")
    result = runner.invoke(app, ["doctor", "--json", "--quick"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output.strip().splitlines()[-1])
    assert report["versions"]["torch"] == torch.__version__
    assert report["cpu_fp32_gflops"] > 1.0
    assert report["gloo_allreduce_gbps"] > 0.0
    assert report["failures"] == []
    assert hardware.measured_peak_flops("cpu") == pytest.approx(report["cpu_fp32_gflops"] * 1e9)


def test_doctor_shows_the_cpu_the_blas_code_paths_and_the_gemm_autotune_table():
    if torch.cuda.is_available():
        pytest.skip("CPU branch only")
    from shared.kernels import cpu_gemm, gemm_autotune

    result = runner.invoke(app, ["doctor", "--json", "--quick"])
    report = json.loads(result.output.strip().splitlines()[-1])
    assert report["cpu"]["model"] and report["cpu"]["autotune_key"] == gemm_autotune.machine_key()
    assert "code path" in report["blas"]["mkl"]
    if cpu_gemm.onednn_available():
        rows = report["cpu_gemm_autotune"]
        assert len(rows) >= 3 and all(r["library"] in ("mkl", "onednn") and r["mkl_us"] > 0 for r in rows)
        assert gemm_autotune.cache_path().exists()  # under this test's MOELAB_HOME
        table = runner.invoke(app, ["doctor", "--quick", "--retune"]).output
        assert "cpu GEMM autotune" in table and "MKL" in table and "oneDNN" in table
        assert gemm_autotune.TUNER.measured == 3  # --retune measured the quick probes again


def test_cpu_peak_is_the_faster_of_torch_mm_and_the_models_gemm(monkeypatch):
    """The model runs its big GEMMs through `cpu_gemm.mm_nt`; a peak from `torch.mm` alone would
    understate the machine (half of oneDNN's speed on AMD CPUs) and inflate MFU."""
    from shared.kernels import cpu_gemm

    plain = hardware.measure_cpu_fp32_gflops(n=256, repeats=5)
    monkeypatch.setattr(cpu_gemm, "mm_nt", lambda a, b: a)  # an 'infinitely fast' oneDNN
    assert hardware.measure_cpu_fp32_gflops(n=256, repeats=5) > 20 * plain


def test_doctor_table_and_require_gpu_failure_on_cpu():
    if torch.cuda.is_available():
        pytest.skip("CPU branch only")
    result = runner.invoke(app, ["doctor", "--quick", "--require-gpu"])
    assert result.exit_code == 1
    assert "cpu fp32 matmul" in result.output
    assert "FAIL: no CUDA device" in result.output


def test_gpu_below_60_percent_of_spec_is_a_failure(monkeypatch):
    slow = hardware.GpuReport(0, "NVIDIA H200", 141.0, 300.0, 4000.0, 989.0, 4800.0)
    assert slow.tflops_fraction == pytest.approx(300 / 989)
    monkeypatch.setattr(hardware.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(hardware.torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(hardware, "measure_gpu", lambda i, n: slow)
    report = hardware.run_doctor(quick=True)
    assert any("30% of its 989 spec" in f for f in report.failures)


@pytest.mark.gpu
def test_doctor_gpu_branch_measures_each_gpu():
    report = hardware.run_doctor()
    assert report.gpus, "CUDA is available but no GPU was measured"
    for gpu in report.gpus:
        assert gpu.bf16_tflops > 1.0 and gpu.copy_gbps > 1.0
    print(json.dumps(report.to_json(), indent=2))


def test_doctor_lists_the_measured_routed_expert_paths_and_retune_forgets_them(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("CPU branch only")
    from shared.kernels import expert_path_autotune as epa
    from shared.kernels import gemm_autotune

    monkeypatch.delenv(epa.SETTING_ENV, raising=False)
    monkeypatch.setattr(gemm_autotune, "machine_is_busy", lambda: False)
    epa.TUNER.reset()
    way = epa.TUNER.way(256, 32, 16, 4, 2)  # what a training step's first MoE forward does
    report = json.loads(runner.invoke(app, ["doctor", "--json", "--quick"]).output.strip().splitlines()[-1])
    (row,) = report["cpu_expert_paths"]
    assert row["class"] == f"T256.d32.F16.E4.K2.t{torch.get_num_threads()}" and row["way"] == way
    assert set(row["ms"]) >= {"loop", "fused"} and row["confirmations"] == 1
    assert "(fastest of 1 process)" in runner.invoke(app, ["doctor", "--quick"]).output
    table = runner.invoke(app, ["doctor", "--quick", "--retune"]).output
    assert "cpu routed-expert path" not in table and epa.cached_entries() == {}
    epa.TUNER.reset()


def test_a_cpu_without_a_stored_peak_is_measured_once_when_asked(monkeypatch):
    """A first training run on a new machine reports MFU: the peak is measured and stored."""
    calls = []
    monkeypatch.setattr(hardware, "measure_cpu_fp32_gflops", lambda: calls.append(1) or 123.0)
    monkeypatch.setattr(hardware, "machine_busy", lambda before, after: "")
    assert hardware.measured_peak_flops("cpu") is None and not calls  # not asked: nothing measured
    assert hardware.measured_peak_flops("cpu", measure_missing=True) == pytest.approx(123e9)
    assert hardware.measured_peak_flops("cpu", measure_missing=True) == pytest.approx(123e9)
    assert len(calls) == 1 and json.loads(hardware.peak_file().read_text())[hardware.peak_key("cpu")] == pytest.approx(123e9)


def test_a_peak_of_another_machine_or_thread_count_is_never_used(monkeypatch):
    """The file may be shared (one home folder, several machines or thread counts): only this
    machine's and this thread count's own entry counts, and concurrent stores all land."""
    import threading

    monkeypatch.setattr(hardware, "measure_cpu_fp32_gflops", lambda: 50.0)
    monkeypatch.setattr(hardware, "machine_busy", lambda before, after: "")
    hardware.peak_file().write_text(json.dumps({"cpu": 1e15, "cpu@othermachine/threads=1": 1e15}))
    assert hardware.measured_peak_flops("cpu") is None  # the old unkeyed entry and another machine's: not ours
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = hardware.measured_peak_flops("cpu", measure_missing=True)
        assert one == pytest.approx(50e9) and hardware.peak_key("cpu").endswith("/threads=1")
    finally:
        torch.set_num_threads(threads)
    stores = [threading.Thread(target=hardware._store_peaks, args=({f"k{i}": float(i + 1)},)) for i in range(8)]
    for t in stores:
        t.start()
    for t in stores:
        t.join()
    stored = json.loads(hardware.peak_file().read_text())
    assert all(stored[f"k{i}"] == i + 1 for i in range(8)) and stored["cpu@othermachine/threads=1"] == 1e15


def test_a_peak_measured_on_a_busy_machine_is_used_once_and_not_stored(monkeypatch):
    """Measured while other work shared the cores, the peak reads low and every later run's MFU
    would read high: it serves this run only, and the next quiet measurement is what gets stored."""
    monkeypatch.setattr(hardware, "measure_cpu_fp32_gflops", lambda: 40.0)
    monkeypatch.setattr(hardware, "machine_busy", lambda before, after: "other processes used 1.50 cores meanwhile")
    assert hardware.measured_peak_flops("cpu", measure_missing=True) == pytest.approx(40e9)
    assert hardware.measured_peak_flops("cpu") is None  # nothing stored
    monkeypatch.setattr(hardware, "machine_busy", lambda before, after: "")
    monkeypatch.setattr(hardware, "measure_cpu_fp32_gflops", lambda: 90.0)
    assert hardware.measured_peak_flops("cpu", measure_missing=True) == pytest.approx(90e9)
    assert hardware.measured_peak_flops("cpu") == pytest.approx(90e9)


def test_a_stored_peak_only_rises(monkeypatch):
    """A lower measurement (contention) never replaces a higher one; a higher one replaces a low one."""
    hardware._store_peaks({"k": 50e9})
    hardware._store_peaks({"k": 30e9})
    assert json.loads(hardware.peak_file().read_text())["k"] == pytest.approx(50e9)
    hardware._store_peaks({"k": 80e9})
    assert json.loads(hardware.peak_file().read_text())["k"] == pytest.approx(80e9)


def test_machine_busy_counts_what_other_processes_used_during_the_measurement():
    # (wall, machine busy seconds, own seconds): 2 s of wall, we used 3.8 CPU s of the machine's 4
    assert hardware.machine_busy((0.0, 10.0, 1.0), (2.0, 14.0, 4.8)) == ""
    # the machine was busy for 4 CPU s but we used 1: others took 1.5 cores
    assert hardware.machine_busy((0.0, 10.0, 1.0), (2.0, 14.0, 2.0)) == "other processes used 1.50 cores meanwhile"
    assert hardware.machine_busy(None, (2.0, 14.0, 2.0)) == ""  # no /proc/stat: cannot tell, not refused


def test_the_machine_counters_include_our_own_gemm_time():
    """/proc/stat's busy time covers this process's own CPU time, so `others` is what is left."""
    before = hardware._cpu_seconds()
    hardware.measure_cpu_fp32_gflops(n=512, repeats=20)  # well over the 10 ms clock tick on any machine
    after = hardware._cpu_seconds()
    assert before is not None and after is not None
    own, machine = after[2] - before[2], after[1] - before[1]
    assert own > 0.005 and machine >= own - 0.05  # clock ticks are coarse (10 ms)
