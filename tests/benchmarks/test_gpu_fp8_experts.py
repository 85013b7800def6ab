"""benchmarks/gpu_fp8_experts.py (the GPU check of fp8 experts) keeps running between GPU sessions: its
CPU smoke mode runs every contender the machine has, on the reference kernel, and its JSON carries
what the GPU run will be read by."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_fp8_experts_script_times_and_measures_each_recipe_and_says_what_it_left_out(tmp_path):
    out = tmp_path / "fp8_experts.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "benchmarks/gpu_fp8_experts.py", "--device", "cpu", "--quick", "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r == json.loads(out.read_text()) and r["commit"] and r["benchmark"] == "fp8_experts"
    measured = {"bf16", "ours_fp8_row", "ours_fp8_block"}
    try:
        import torchao  # noqa: F401
    except ImportError:
        assert "torchao is not installed" in r["errors"]["torchao_fp8_row"]
    assert measured <= set(r["ms_per_step"]["grouped_gemm"]) and set(r["ms_per_step"]) == {"grouped_gemm", "expert_swiglu"}
    assert all(r["speedup_vs_bf16"][w]["bf16"] == 1.0 for w in r["speedup_vs_bf16"])
    assert "reference kernel" in r["paths"]["ours_fp8_row"]
    e, d, f = r["shape"]["experts"], r["shape"]["d_model"], r["shape"]["hidden"]
    mem = r["memory"]
    # the cached fp8 layouts of both weights, forward and Dgrad: 1 byte per element plus fp32 scales
    site_bytes = sum(2 * e * n * k + 4 * e * (n + k) for n, k in ((2 * f, d), (d, f)))
    assert mem["ours_fp8_row"]["fp8_cache_bytes"] == site_bytes and mem["bf16"]["fp8_cache_bytes"] == 0
    assert all(m["master_bytes"] == 4 * 3 * e * d * f for m in mem.values())
    assert all(m["held_for_backward_bytes"] > 0 and m["cuda_peak_added_bytes"] is None for m in mem.values())
    assert mem["ours_fp8_row"]["predicted_lowp_copy_bytes"] > 0
    # weights quantised once per step, not per call: at most one quantisation per call where an
    # uncached path makes two (the forward and the Dgrad layout)
    assert 0 < r["ours_weight_quantisations"] <= r["ours_grouped_gemm_calls"] < r["uncached_weight_quantisations"]
    assert all(q[0] <= q[1] <= q[2] and q[0] > 0 for w in r["ms_quartiles"].values() for q in w.values())
