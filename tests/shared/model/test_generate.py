"""Generation with a decode cache computes what the full forward computes, token by token, and the
samplers honour temperature, top-k, top-p and the seed."""

from __future__ import annotations

import pytest
import torch

from shared.config import load_config
from shared.model import MoETransformer
from shared.model.generate import SamplingConfig, generate, next_token

PATTERNS = {"gqa": ["gqa"], "mla": ["mla"], "swa": ["swa"]}


def _model(kind: str) -> MoETransformer:
    cfg = load_config("configs/tiny.yaml", [f"model.attention.pattern=[{','.join(PATTERNS[kind])}]",
                                            "model.vocab_size=256", "model.max_seq_len=64"])
    torch.manual_seed(0)
    model = MoETransformer(cfg.model).eval()
    with torch.no_grad():  # a live-looking bias, so routing is not the init's tie-free default
        for layer in model.moe_layers():
            layer.router.expert_bias_avg_E.normal_(0, 0.3)
    return model


def _recomputed_greedy(model: MoETransformer, prompt: list[int], n: int) -> tuple[list[int], list[torch.Tensor]]:
    seq, out, logits = list(prompt), [], []
    with torch.no_grad():
        for _ in range(n):
            last = model(torch.tensor([seq]))[0][0, -1]
            logits.append(last)
            out.append(int(last.argmax()))
            seq.append(out[-1])
    return out, logits


@pytest.mark.parametrize("kind", ["gqa", "mla"])
def test_cached_greedy_equals_recomputing_the_whole_sequence(kind):
    model = _model(kind)
    prompt = [5, 17, 99, 3, 42, 7]
    got = generate(model, prompt, SamplingConfig(max_new_tokens=10))
    want, _ = _recomputed_greedy(model, prompt, 10)
    assert got.cached and got.tokens == want
    assert got.cache_bytes > 0


def test_mla_cache_holds_only_the_latent_and_the_shared_rope_key():
    model = _model("mla")
    prompt = list(range(1, 9))
    got = generate(model, prompt, SamplingConfig(max_new_tokens=4))
    m = model.cfg.attention.mla
    per_token = (m.kv_lora_rank + m.qk_rope_head_dim) * 4 * model.cfg.n_layers  # fp32 bytes
    assert got.cache_bytes == per_token * (len(prompt) + 3)  # the last token is chosen, never fed back


def test_a_kind_without_a_cache_recomputes_and_says_so():
    model = _model("swa")
    got = generate(model, [1, 2, 3], SamplingConfig(max_new_tokens=5))
    want, _ = _recomputed_greedy(model, [1, 2, 3], 5)
    assert not got.cached and got.uncached_kinds == ["swa"] and got.tokens == want


def test_sampling_is_reproducible_by_seed_and_streams_each_token():
    model = _model("gqa")
    seen: list[int] = []
    a = generate(model, [1, 2, 3], SamplingConfig(max_new_tokens=6, temperature=1.0, seed=3), on_token=seen.append)
    b = generate(model, [1, 2, 3], SamplingConfig(max_new_tokens=6, temperature=1.0, seed=3))
    c = generate(model, [1, 2, 3], SamplingConfig(max_new_tokens=6, temperature=1.0, seed=4))
    assert a.tokens == b.tokens == seen and a.tokens != c.tokens


def test_top_k_and_top_p_keep_only_the_allowed_tokens():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]]).repeat(2000, 1)
    gen = torch.Generator().manual_seed(0)
    top2 = next_token(logits, SamplingConfig(temperature=1.0, top_k=2), gen)
    assert set(top2.tolist()) == {0, 1}
    probs = logits[0].softmax(-1)  # 0.64, 0.24, 0.09, ...: top_p 0.8 keeps the first two
    assert probs[0] < 0.8 < probs[:2].sum()
    nucleus = next_token(logits, SamplingConfig(temperature=1.0, top_p=0.8), gen)
    assert set(nucleus.tolist()) == {0, 1}
    greedy = next_token(logits, SamplingConfig(), gen)
    assert set(greedy.tolist()) == {0}


def test_stop_token_ends_generation_and_bad_settings_are_refused():
    model = _model("gqa")
    first = generate(model, [1, 2, 3], SamplingConfig(max_new_tokens=5)).tokens[0]
    assert generate(model, [1, 2, 3], SamplingConfig(max_new_tokens=5, stop_token=first)).tokens == [first]
    with pytest.raises(ValueError, match="max_seq_len"):
        generate(model, [1] * 60, SamplingConfig(max_new_tokens=10))
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=0.0)
