"""Where the CPU benchmarks file their results: named by ISA, nothing for a smoke run, `--out` wins."""

from __future__ import annotations

import json

from benchmarks import result_file


def test_result_is_named_by_the_isa_the_run_had(monkeypatch, tmp_path):
    monkeypatch.setattr(result_file, "RESULTS", tmp_path)
    for var in ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        monkeypatch.delenv(var, raising=False)
    assert result_file.cpu_result_path("cpu_gemm", None, quick=False) == tmp_path / "cpu_gemm.native.json"
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    assert result_file.cpu_result_path("cpu_gemm", None, quick=False) == tmp_path / "cpu_gemm.avx2.json"


def test_quick_runs_file_nothing_unless_out_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(result_file, "RESULTS", tmp_path)
    monkeypatch.setenv("MOELAB_COMMIT", "abc1234")
    assert result_file.save_cpu_result("attention", None, True, {"ratio": 1.0}) is None
    assert list(tmp_path.iterdir()) == []
    out = tmp_path / "mine.json"
    assert result_file.save_cpu_result("attention", out, True, {"ratio": 1.5}) == out
    assert json.loads(out.read_text())["ratio"] == 1.5 and json.loads(out.read_text())["commit"] == "abc1234"
    written = result_file.save_cpu_result("attention", None, False, {"ratio": 2.0})
    assert written.parent == tmp_path and json.loads(written.read_text())["commit"] == "abc1234"


def test_thread_count_and_a_tag_in_place_of_the_isa_name_other_runs(monkeypatch, tmp_path):
    monkeypatch.setattr(result_file, "RESULTS", tmp_path)
    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS", raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    assert result_file.cpu_result_path("moe_layer", None, False, threads=1) == tmp_path / "moe_layer.native.t1.json"
    assert result_file.cpu_result_path("moe_layer", None, False, tag="gpu") == tmp_path / "moe_layer.gpu.json"



def test_a_filed_result_records_machine_threads_and_load_but_keeps_its_own_fields(monkeypatch, tmp_path):
    monkeypatch.setenv("MOELAB_COMMIT", "abc1234")
    out = result_file.save_result(tmp_path / "sub" / "r.json", {"ratio": 1.2, "cores": 99})
    written = json.loads(out.read_text())
    assert written["commit"] == "abc1234" and written["ratio"] == 1.2
    assert written["cores"] == 99  # what the benchmark recorded itself is not overwritten
    assert written["torch_threads"] >= 1 and written["cpu"] and isinstance(written["isa_flags"], (list, str))
    assert len(written["load_average_at_end"]) == 3
