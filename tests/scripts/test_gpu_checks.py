"""scripts/gpu_checks.sh, the one-call GPU run, works end to end; on CPU its steps say why they skip or
fail, and the GPU benchmarks it runs keep working through their CPU smoke mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.benchmark_run import run_benchmark

REPO = Path(__file__).resolve().parents[2]
STEPS = ["gpu_tests", "doctor", "moe_layer", "train_step", "fp8", "fp8_experts", "backbone", "trainer", "export"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU behaviour; on a GPU run the script itself")
def test_gpu_checks_script_runs_every_step_time_boxed_and_records_why_each_cannot_run_on_cpu(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path), "DOCTOR_TIMEOUT": "300",
           "GPU_TESTS_TIMEOUT": "400", "TRAINER_TIMEOUT": "600",
           "EXPORT_TIMEOUT": "400"}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_checks.sh")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]  # the benchmarks need CUDA
    assert "no CUDA device" in (tmp_path / "env.txt").read_text()
    assert (tmp_path / "commit.txt").read_text().startswith("tree ")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [s["step"] for s in summary["steps"]] == STEPS
    assert all(s["seconds"] <= s["limit"] for s in summary["steps"])
    assert summary["failed"] == ["moe_layer", "train_step", "fp8", "fp8_experts", "backbone"]
    tests_log = (tmp_path / "gpu_tests.log").read_text()
    assert " skipped" in tests_log and "failed" not in tests_log and "error" not in tests_log.lower()
    assert "tests/shared/precision/test_native.py" in tests_log and "tests/shared/plan/test_memory.py" in tests_log
    doctor = json.loads((tmp_path / "doctor.json").read_text())
    assert doctor["versions"]["torch"] == torch.__version__ and doctor["gpus"] == []
    assert (tmp_path / "moelab-home" / "peak.json").exists()  # the measured peak comes back with the results
    assert "--gpu needs a CUDA device" in (tmp_path / "moe_layer.log").read_text()
    for name in ("train_step", "fp8", "fp8_experts", "backbone"):
        assert "--device cuda needs a CUDA device" in (tmp_path / f"{name}.log").read_text()
        assert not (tmp_path / f"{name}.json").exists()
    trainer = json.loads((tmp_path / "trainer.json").read_text())  # the real trainer, tiny on CPU
    assert trainer["config"] == "configs/tiny.yaml" and trainer["steps"] == 3
    assert trainer["tokens_per_s"] > 0 and trainer["plan_gib"] > 0 and trainer["loss_last"] is not None
    assert trainer["commit"] == (tmp_path / "commit.txt").read_text().split()[1]
    export = json.loads((tmp_path / "export.json").read_text())  # the GPU proxy's layer kinds, made on the CPU
    assert export["config"] == "configs/proxy-7b2a-h100.yaml" and export["checkpoint_device"] == "cpu"
    assert export["architecture"] == "Glm4MoeForCausalLM" and export["max_abs_logit_diff"] <= 1e-4
    assert export["greedy_equal"] and export["import_bitwise_equal"]
    assert "round trip: max |Δlogit|" in (tmp_path / "export.log").read_text()  # moelab export's own check ran


def test_gpu_checks_records_the_commit_it_was_given_not_what_the_copy_s_git_says(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path), "STEPS": "none", "MOELAB_COMMIT": "2ecc595"}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_checks.sh")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (tmp_path / "commit.txt").read_text() == "tree 2ecc595\n"
    assert json.loads((tmp_path / "summary.json").read_text())["steps"] == []


@pytest.mark.slow
def test_gpu_train_step_benchmark_compares_ours_with_hf_deepseek_and_counts_mfu_once(tmp_path):
    r = run_benchmark("gpu_train_step.py", "--device", "cpu", "--quick", "--hf-impls", "grouped_mm,eager",
                      "--profile", str(tmp_path / "profile"))
    assert set(r["tokens_per_s"]) == {"ours", "ours[recipe]", "hf[grouped_mm]", "hf[eager]"}
    assert set(r["tokens_per_s_by_routing"]) == {"learned", "forced"} and r["tokens_per_s"] == r["tokens_per_s_by_routing"]["learned"]
    assert set(r["ratio_by_routing"]["forced"]) == {"ours", "ours[recipe]"}
    assert {"forward", "backward", "optimizer"} <= set(r["profile"]["ranges_ms"])
    assert (tmp_path / "profile" / "profile_ours_recipe.md").exists()
    assert (tmp_path / "profile" / "trace_ours_recipe.json.gz").exists()
    assert r["ratio"] == pytest.approx(r["tokens_per_s"]["ours"] / r["tokens_per_s"][r["hf_fastest"]])
    counts = r["params"]
    assert abs(counts["ours"] - counts["hf[grouped_mm]"]) <= 0.01 * counts["ours"]
    assert r["flops_per_token"] > 6 * 0.5 * counts["ours"] / 10 and r["plan_gib_recipe"] > 0


@pytest.mark.slow
def test_gpu_fp8_benchmark_trains_every_run_on_the_same_batches_and_reports_its_backend():
    r = run_benchmark("gpu_fp8.py", "--device", "cpu", "--quick")
    assert set(r["tokens_per_s"]) == {"bf16", "bf16_seed1", "fp8_block", "fp8_row"}
    assert r["backends"]["fp8_block"]["expert"]["backend"] == "emulate"  # native refuses a CPU machine
    assert "backend=torchao, but" in r["errors"]["fp8_row_torchao"]  # the peer needs torchao and a GPU: left out
    assert "native: no CUDA device" in r["backends"]["fp8_block"]["expert"]["why"]
    assert all(len(v) == r["steps"] - 1 for v in r["losses"].values())
    assert r["losses"]["bf16"][0] == pytest.approx(r["losses"]["fp8_block"][0], rel=0.02)  # same init, same batch
    assert r["bf16_seed_spread"] == pytest.approx(r["final_loss"]["bf16_seed1"] - r["final_loss"]["bf16"])


@pytest.mark.slow
def test_gpu_backbone_benchmark_runs_the_scorers_backbone_in_bf16_and_fp32():
    r = run_benchmark("gpu_backbone.py", "--device", "cpu", "--quick")
    assert set(r["docs_per_s"]) == {"bf16", "fp32"} and r["pooled_cosine"] > 0.99
    assert 0 < r["feature_rel_error"] < 0.05


def _load_benchmark(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"benchmarks.{name}", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_gpu_benchmarks_full_shapes_build_before_any_gpu_is_spent():
    # The --quick smoke runs use other shapes: a first H200 call lost three benchmarks to configs
    # only the full shapes produced. Their configs, our models and HF's are built here on the meta device.
    meta = torch.device("meta")
    train = _load_benchmark("gpu_train_step")
    shape = train.Shape(**train.PROXY)
    built, errors = train.systems(shape, meta, ["grouped_mm"])
    assert not errors and {"ours", "ours[recipe]", "hf[grouped_mm]"} <= set(built)
    counts = train.check_same_size(built)
    assert abs(counts["ours"] - counts["hf[grouped_mm]"]) < 10 and counts["ours"] > 1.5e9
    assert train.recipe_plan_gib(shape)[0] > 0
    fp8 = _load_benchmark("gpu_fp8")
    for name, (seed, precision) in fp8.RUNS.items():
        model, _, _ = fp8.build(fp8.SHAPE, seed, precision, meta)
        assert model.cfg.d_model == 2560, name


def test_steps_selects_the_steps_that_run(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path), "STEPS": "doctor", "DOCTOR_TIMEOUT": "300"}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_checks.sh")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [s["step"] for s in summary["steps"]] == ["doctor"] and summary["failed"] == []
    assert proc.stdout.count("not in STEPS, skipped") == len(STEPS) - 1
