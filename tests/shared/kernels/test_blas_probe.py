"""What BLAS code really runs: counted from MKL's and oneDNN's own verbose logs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from shared.kernels import blas_probe, cpu_gemm


def test_calls_are_counted_per_library():
    a = torch.randn(256, 256)
    calls = blas_probe.blas_calls(lambda: (torch.mm(a, a), F.linear(a, a)))
    assert calls["mkl_calls"] == 2 and calls["mkl"] == {"SGEMM": 2} and calls["onednn_calls"] == 0
    if cpu_gemm.onednn_available():
        calls = blas_probe.blas_calls(lambda: torch.ops.mkldnn._linear_pointwise(a, a, None, "none", [], ""))
        assert calls["mkl_calls"] == 0 and calls["onednn_calls"] == 1
        (impl,) = calls["onednn"]
        assert "matmul" in impl  # e.g. "inner_product brg_matmul:avx512_core"
    assert blas_probe.describe_calls({"mkl": {"SGEMM": 3}, "onednn": {}, "mkl_calls": 3, "onednn_calls": 0}) == \
        "MKL 3 (SGEMM 3); oneDNN 0"


def test_capture_leaves_stdout_working(capfd):
    blas_probe.capture_verbose(lambda: torch.mm(torch.randn(8, 8), torch.randn(8, 8)))
    print("still here")
    assert "still here" in capfd.readouterr().out


def test_libraries_name_the_code_path_each_runs():
    libs = blas_probe.libraries()
    assert libs["mkl"].startswith("oneMKL") and "code path" in libs["mkl"]
    if cpu_gemm.onednn_available():
        assert libs["onednn"].startswith("oneDNN v") and " ISA " in libs["onednn"] and "matmul" in libs["onednn"]
    assert libs["aten"] == torch.backends.cpu.get_cpu_capability()


def test_an_already_printed_header_is_read_from_a_fresh_interpreter():
    text = ("MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture Intel(R) "
            "Advanced Vector Extensions 2 (Intel(R) AVX2) enabled processors, Lnx 2.60GHz lp64 gnu_thread\n"
            "onednn_verbose,v1,info,oneDNN v3.12.0 (commit 80afa71)\n"
            "onednn_verbose,v1,info,cpu,isa:Intel AVX2\n"
            "onednn_verbose,v1,primitive,exec,cpu,inner_product,brg_matmul:avx2,forward_inference,src,,mb64,0.1\n")
    assert blas_probe._parse_libraries(text) == {
        "mkl": "oneMKL 2024.0 Update 2, AVX2 code path",
        "onednn": "oneDNN v3.12.0, ISA Intel AVX2, matmul brg_matmul:avx2",
    }
    assert blas_probe._parse_libraries("SGEMM only, no header") == {"mkl": None, "onednn": None}


def test_an_mkl_header_without_an_instruction_set_still_names_the_library():
    """What MKL prints on an AMD EPYC: no instruction set, the branch for processors it does not identify."""
    text = ("MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture Intel(R) "
            "Architecture processors, Lnx 2.45GHz lp64 gnu_thread\n")
    assert blas_probe._parse_libraries(text)["mkl"] == (
        "oneMKL 2024.0 Update 2, unnamed code path (for Intel(R) 64 architecture Intel(R) Architecture processors)")


@pytest.mark.parametrize(("env", "tag"), [({}, "native"), ({"MKL_ENABLE_INSTRUCTIONS": "AVX2"}, "avx2"),
                                         ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, "avx512-core")])
def test_results_are_filed_under_the_capped_isa(monkeypatch, env, tag):
    for var in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS"):
        monkeypatch.delenv(var, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert blas_probe.isa_tag() == tag
    assert blas_probe.machine_report()["isa_caps"] == env
