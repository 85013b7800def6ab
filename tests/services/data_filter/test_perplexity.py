"""The Kneser-Ney model is a real, normalised LM; fitted on a source's own documents, its word-order test
and fences keep real prose and remove shuffled text, word salad and gibberish; the pass is counted."""

from __future__ import annotations

import json
import random

import kenlm
import pytest

from services.data_filter.filters.perplexity import PerplexityFilter, fold_of
from services.data_filter.lm.kneser_ney import BOS, estimate, tokenize, write_arpa
from services.data_filter.lm.ngram import NgramModel, sentences
from services.data_filter.pipeline import run
from shared.config.data import DataConfig
from shared.config.filters import PerplexityConfig
from tests.services.data_filter import realtext


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


@pytest.mark.parametrize("order", [2, 3])
def test_in_memory_scores_equal_kenlm_on_the_same_arpa(tmp_path, order):
    train = [tokenize(p) for p in realtext.manual_paragraphs()[:200]]
    model = NgramModel(train, order)
    arpa = kenlm.Model(str(write_arpa(model.table, tmp_path / "m.arpa")))
    for para in realtext.manual_paragraphs()[300:310]:
        toks = tokenize(para)
        ours = model.score([toks])[0]
        theirs = -arpa.score(" ".join(toks), bos=True, eos=True) / (len(toks) + 1)
        assert ours == pytest.approx(theirs, abs=1e-6)
        if order == 2:  # the vectorised path the pipeline uses gives the same numbers
            assert model.score_encoded(model.encode(para, "en")) == pytest.approx(model.score([toks]), abs=1e-9)


def _group(n: int = 240) -> list[tuple[str, str]]:
    paras = realtext.manual_paragraphs()
    return [(f"m{i}", "\n\n".join(paras[(2 * i + j) % len(paras)] for j in range(2))) for i in range(n)]


def test_word_order_test_and_fences_keep_real_prose_and_remove_shuffled_salad_and_gibberish():
    """On the demo's Wikipedia articles (~250k words), single-line variants of 100 of them."""
    rng = random.Random(0)
    docs = [(d["id"], d["text"]) for d in realtext.demo_documents("wiki") if len(d["text"].split()) > 80]
    assert len(docs) > 500
    filt = PerplexityFilter(PerplexityConfig())
    folds = ([t for i, t in docs if fold_of(i) == 0], [t for i, t in docs if fold_of(i) == 1])
    models = filt.fit(folds, "en")
    real = [filt.score(models[fold_of(i)], i, t, "en") for i, t in docs]
    fences = filt.fences([s.log_ppl for s in real], [s.gain for s in real])
    kept = sum(filt.decide(s, fences) is None for s in real) / len(real)
    assert kept >= 0.99, kept
    vocab = [w for _, t in docs for w in t.split()]
    caught = {"shuffled": 0, "salad": 0, "gibberish": 0}
    for i, t in docs[:100]:
        words = t.split()
        shuffled = words[:]
        rng.shuffle(shuffled)
        variants = {"shuffled": " ".join(shuffled), "salad": " ".join(rng.choice(vocab) for _ in words),
                    "gibberish": " ".join("".join(rng.choice("etaoinshrdlu") for _ in w) for w in words)}
        for name, text in variants.items():
            caught[name] += filt.decide(filt.score(models[fold_of(i)], f"{name}{i}", text, "en"), fences) is not None
    assert caught["shuffled"] >= 97 and caught["salad"] >= 97 and caught["gibberish"] == 100, caught


def test_japanese_is_modelled_on_character_class_runs_not_whole_lines():
    toks = sentences("日本語の文章です。Debianを使う。", "ja")[0]
    assert "日本語" in toks and "の" in toks and "debian" in toks and len(toks) >= 8


def _write(path, recs):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
    return path


def test_pipeline_removes_planted_shuffled_documents_and_counts_small_groups(tmp_path):
    rng = random.Random(1)
    wiki = [(d["id"], d["text"]) for d in realtext.demo_documents("wiki") if len(d["text"].split()) > 80][:200]
    recs = [{"id": i, "text": t} for i, t in wiki]
    planted = []
    for i, t in wiki[:10]:
        words = t.split()
        rng.shuffle(words)
        planted.append(f"shuf-{i}")
        text = "\n".join(" ".join(words[j:j + 12]) + "." for j in range(0, len(words), 12))
        recs.append({"id": f"shuf-{i}", "text": text})
    src = _write(tmp_path / "web.jsonl", recs)
    tiny = _write(tmp_path / "tiny.jsonl", [{"id": f"t{i}", "text": t} for i, t in _group(5)])
    data = DataConfig.model_validate({"inputs": [{"name": "manual", "paths": [str(src)]},
                                                 {"name": "tiny", "kind": "science", "paths": [str(tiny)]}],
                                      "filter": {"workers": 0, "dedup": {"enabled": False}}})
    stats = run(data, tmp_path / "out")
    removed = {}
    for line in (tmp_path / "out" / "removed_samples.jsonl").read_text().splitlines():
        r = json.loads(line)
        removed[r["id"]] = r["reason"]
    assert sum(removed.get(p) == "no_word_order" for p in planted) >= 9, removed
    web = {s["name"]: s for s in stats["chains"]["web"]}["perplexity"]
    assert web["in"] - web["kept"] <= 10 + 4  # the planted ten plus at most 2% of 200 real documents
    science = {s["name"]: s for s in stats["chains"]["science"]}["perplexity"]
    assert science["skipped"] == {"unscored_group_too_small_or_no_word_units": science["in"]}
    # fences come from the documents no layout rule flagged; the flagged ones are reviewed, each counted
    assert stats["fitted"]["groups"]["manual/en"]["docs"] == web["in"] - sum(web["flagged"].values())
    assert stats["sources"]["manual"]["funnel"][4] == {"stage": "perplexity", "docs": web["kept"]}
