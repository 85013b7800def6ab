"""docs/benchmarks.md is generated from benchmarks/results/**/*.json and kept in step with it:
every figure of every result is on the page, with its command and machine line, and a result
that changes without the page being rebuilt fails `--check` (and this test)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from scripts.benchmark_render import fmt, leaves
from scripts.benchmarks_page import PAGE, RESULTS, build_page, load_results, main

ROOT = Path(__file__).resolve().parents[2]


def _section(page: str, rel: str) -> str:
    start = page.index(f"### `benchmarks/results/{rel}`")
    ends = [i for i in (page.find("\n### ", start + 1), page.find("\n## ", start + 1)) if i > 0]
    return page[start:min(ends) if ends else None]


def test_the_committed_page_matches_the_committed_results():
    """Fails when a result JSON changed and `make benchmarks-page` was not run (or the page was edited)."""
    assert PAGE.read_text(encoding="utf-8") == build_page(), (
        "docs/benchmarks.md is out of date: run `make benchmarks-page` and commit it")


def test_check_fails_after_a_result_changes_until_the_page_is_rebuilt(tmp_path):
    results, page = tmp_path / "results", tmp_path / "benchmarks.md"
    shutil.copytree(RESULTS, results)
    script = [sys.executable, str(ROOT / "scripts" / "benchmarks_page.py"), "--results", str(results), "--page", str(page)]
    assert subprocess.run(script, capture_output=True, text=True, cwd=tmp_path, timeout=120).returncode == 0
    assert subprocess.run([*script, "--check"], capture_output=True, text=True, cwd=tmp_path, timeout=120).returncode == 0
    target = results / "tracker.json"
    data = json.loads(target.read_text())
    data["ratio"] = 12.5
    target.write_text(json.dumps(data))
    stale = subprocess.run([*script, "--check"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert stale.returncode == 1 and "make benchmarks-page" in stale.stderr
    assert main(["--results", str(results), "--page", str(page)]) == 0
    assert "| `ratio` | 12.5 |" in _section(page.read_text(), "tracker.json")
    assert main(["--results", str(results), "--page", str(page), "--check"]) == 0


def test_every_figure_of_every_committed_result_is_in_its_section():
    page = build_page()
    results = load_results(RESULTS)
    assert len(results) >= 20 and not any(r.error for r in results)
    for res in results:
        text = _section(page, res.path.as_posix())
        for path, value in leaves(res.data):
            shown = ", ".join(fmt(v) for v in value) if isinstance(value, list) else fmt(value)
            assert shown.replace("|", "\\|") in text, (res.path, path, shown)


def test_commands_and_machine_lines_are_the_ones_the_files_record():
    page = build_page()
    capped = _section(page, "moe_layer.avx2.t1.json")
    assert "`ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 python benchmarks/moe_layer.py --threads 1`" in capped
    assert "ISA caps MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2" in capped and "threads 1" in capped
    rec = json.loads((ROOT / "benchmarks/results/moe_layer.avx2.t1.json").read_text())
    assert rec["machine"]["blas"]["mkl"] in capped  # the BLAS line is the file's, whatever the machine
    assert ", ".join(fmt(v) for v in rec["load_average_at_end"]) in capped
    assert f"| `ratio` | {fmt(rec['ratio'])} |" in capped
    assert f"| `ratio_torchtitan_same_backend` | {fmt(rec['ratio_torchtitan_same_backend'])} |" in capped
    native = _section(page, "train_step.native.json")
    assert "- command: `python benchmarks/train_step.py`" in native and "ISA caps none" in native
    filt = _section(page, "data_filter.json")
    rec = json.loads((ROOT / "benchmarks/results/data_filter.json").read_text())
    assert f"CPU {rec['cpu']} · {rec['cores']} cores · AVX-512 {'yes' if rec['avx512'] else 'no'}" in filt
    assert "BLAS not recorded" in filt
    rounds = _section(page, "router_balance/round7.json")
    assert "--recipe configs/tiny.yaml --steps 200 --seeds 2 --arm NAME=OVERRIDES" in rounds
    assert "| ga16 | 0.07236 | 0.3379 | 6.073 | 0 |" in rounds  # the arms as one table
    gpu = _section(page, "gpu/2026-12-04-h200/fp8.json")  # a step of the one-call GPU run
    assert "- command: `python benchmarks/gpu_fp8.py`" in gpu and "A step of `bash scripts/gpu_checks.sh`" in gpu
    assert "| gpu | NVIDIA H200 |" in gpu and "| `ratio_fp8_block` | 0.3514 |" in gpu


def test_new_files_and_keys_are_rendered_generically_and_a_broken_file_is_named(tmp_path):
    results = tmp_path / "results"
    (results / "sweeps").mkdir(parents=True)
    novel = {
        "ratio_vs_peer": 1.5, "label": "a|b", "missing": None, "flag": True, "tiny": 3e-7, "big": 123456.789,
        "per_system": {"ours": {"tok_s": 10.0, "mem": {"peak_gib": 2}}, "peer": {"tok_s": 8.0}},
        "curve": [{"x": 1, "y": 0.5}, {"x": 2, "y": 0.25, "extra": "z"}],
        "nested": {"deep": {"deeper": [1, 2, 3], "records": [{"a": [{"b": 7}]}]}},
        "empty": {}, "none_list": [],
    }
    (results / "sweeps" / "trial.json").write_text(json.dumps(novel))
    (results / "newbench.gpu.json").write_text(json.dumps([{"step": 1, "loss": 2.0}]))
    (results / "broken.json").write_text("{not json")
    page = build_page(results)
    trial = _section(page, "sweeps/trial.json")
    assert "- command: not recorded" in trial and "no `benchmarks/sweeps.py`" in trial
    assert "| `ratio_vs_peer` | 1.5 |" in trial and "a\\|b" in trial and "3e-07" in trial and "123456.79" in trial
    assert "| per_system | tok_s | mem.peak_gib |" in trial and "| ours | 10 | 2 |" in trial
    for _, value in leaves(novel):
        shown = ", ".join(fmt(v) for v in value) if isinstance(value, list) else fmt(value)
        assert (shown or "[]").replace("|", "\\|") in trial, shown
    records = _section(page, "newbench.gpu.json")
    assert "| 0 | 1 | 2 |" in records and "- command: not recorded" in records
    broken = _section(page, "broken.json")
    assert "Could not be read: JSONDecodeError" in broken
    assert "could not be read: JSONDecodeError" in page.split("## Results")[0]


def test_gpu_check_results_get_the_step_s_command_and_leave_the_missing_list(tmp_path):
    """scripts/gpu_checks.sh's JSON, committed under benchmarks/results/gpu/<run>/, and moe_layer --gpu."""
    results = tmp_path / "results"
    run = results / "gpu" / "h200-run"
    run.mkdir(parents=True)
    (run / "train_step.json").write_text(json.dumps({"ratio_hf": 1.31, "mfu": 0.42, "device": "NVIDIA H200"}))
    (run / "doctor.json").write_text(json.dumps({"gpus": [{"name": "NVIDIA H200", "bf16_tflops": 700.5}]}))
    (results / "moe_layer.gpu.json").write_text(json.dumps({"ratio": 1.1, "threads": 1}))
    page = build_page(results)
    step = _section(page, "gpu/h200-run/train_step.json")
    assert "- command: `python benchmarks/gpu_train_step.py`" in step and "scripts/gpu_checks.sh" in step
    assert "| `ratio_hf` | 1.31 |" in step and "700.5" in _section(page, "gpu/h200-run/doctor.json")
    assert "- command: `python benchmarks/moe_layer.py --gpu`" in _section(page, "moe_layer.gpu.json")
    waiting = page.split("## Benchmarks without a committed result")[1]
    assert "gpu_train_step.py" not in waiting and "gpu_fp8.py" in waiting


def test_descriptions_follow_the_file_self_comparisons_are_marked_and_threads_are_what_the_run_used():
    page = build_page()
    gpu_layer = _section(page, "gpu/2026-12-04-h200/moe_layer.json")
    assert "d 2560" in gpu_layer and "bf16" in gpu_layer and "HF `DeepseekV3MoE`" not in gpu_layer
    assert "- ratios: ours over ours (our grouped_mm / Triton backends over our own per-expert loop)" in gpu_layer
    cpu_layer = _section(page, "moe_layer.native.json")
    assert "d 512" in cpu_layer and "ours over ours" not in cpu_layer  # HF and torchtitan are peers
    row = next(line for line in page.splitlines() if line.startswith("| [`attention.native.json`]"))
    assert "ours/ours" in row
    rec = json.loads((ROOT / "benchmarks/results/attention.native.json").read_text())
    assert rec["threads"] != rec["machine"]["threads"]  # the run set 1 after its machine line saw 2
    assert row.endswith(f"| {rec['threads']} |")
    assert f"threads {rec['threads']}" in _section(page, "attention.native.json")
