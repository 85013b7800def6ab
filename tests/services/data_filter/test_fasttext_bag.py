"""The cached bag-of-tokens predictor against fastText itself: same labels, same probabilities.

lid.176 (quantized, pruned n-grams, hierarchical softmax) on the demo corpus's real text in many
languages and scripts, and small model files written here in fastText's format (dense matrices,
softmax and hierarchical softmax, unpruned n-grams) that fasttext-predict loads too.
"""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from services.data_filter.fasttext_bag import BagClassifier, fnv1a
from services.data_filter.filters.language import FastTextPredictor, default_model_path, load_model

DEMO = Path(__file__).resolve().parents[3] / "data" / "demo"
EDGES = [
    "", "   ", "\t", "a", "Hola, ¿cómo estás? Me llamo Juan.", "这是一个中文句子，没有空格。", "日本語のテキストです",
    "Привет, мир", "__label__en hello world", "__label__xx", "naïve café\u00a0résumé", "x\u2003y\u3000z",
    "emoji 🙂🙂 text", "ab\x1fcd", "</s> </s>", "e\u0301", "12345 67890", "def f(x):     return x ** 2",
    "line one\nline two\n\nand a third",
]


def demo_texts(limit_per_source: int = 120) -> list[str]:
    texts = []
    for path in sorted(DEMO.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if i >= limit_per_source:
                    break
                texts.append(json.loads(line)["text"].replace("\n", " "))
    return texts


def assert_same(bag: BagClassifier, fast: FastTextPredictor, texts: list[str], k: int) -> None:
    """Same labels in the same order, probabilities within float32 rounding.

    Labels at fastText's floor (p ~ 1e-5, every term log(p + 1e-5)) tie to within that rounding,
    so their order is only checked through their probabilities.
    """
    worst = 0.0
    for text in texts:
        ours, theirs = bag.predict(text, k=k), fast.predict(text, k=k)
        assert len(ours) == len(theirs), text[:80]
        assert [lab for lab, p in ours if p > 1e-4] == [lab for lab, p in theirs if p > 1e-4], text[:80]
        worst = max([worst] + [abs(p - q) for (_, p), (_, q) in zip(ours, theirs, strict=True)])
    assert worst < 2e-5


@pytest.fixture(scope="module")
def lid176():
    path = str(default_model_path())
    return BagClassifier(path), FastTextPredictor(path)


@pytest.mark.parametrize("k", [1, 5])
def test_lid176_predictions_equal_fasttext_on_real_text_in_many_scripts(lid176, k):
    bag, fast = lid176
    texts = demo_texts() + EDGES
    assert len({fast.predict(t)[0][0] for t in texts if fast.predict(t)}) >= 10  # many languages really met
    assert_same(bag, fast, texts, k)


def test_a_cache_cleared_many_times_gives_the_same_predictions(lid176):
    bag, fast = lid176
    small = BagClassifier(default_model_path(), cache_tokens=50)
    texts = demo_texts(20)
    assert_same(small, fast, texts, 1)
    assert small.cache_clears > 10


def test_load_model_picks_the_cached_predictor_for_lid176_and_fasttext_on_request():
    path = str(default_model_path())
    assert isinstance(load_model(path), BagClassifier)
    assert isinstance(load_model(path, exact_fasttext=True), FastTextPredictor)


def test_fnv1a_is_the_published_hash_on_ascii_and_sign_extends_other_bytes():
    def plain(data: bytes) -> int:
        h = 2166136261
        for byte in data:
            h = ((h ^ byte) * 16777619) % 2**32
        return h

    assert fnv1a(b"") == 2166136261
    assert fnv1a(b"a") == plain(b"a") == 0xE40C292C  # the published FNV-1a 32 of "a"
    assert fnv1a("<é".encode()) != plain("<é".encode())  # fastText hashes int8_t: C3 A9 become FFFFFFC3 FFFFFFA9
    # which reading is fastText's is settled by the n-grams of non-Latin text above matching its predictions


def write_model(path: Path, *, loss: int, word_ngrams: int = 1, seed: int = 0, minn: int = 2, maxn: int = 3) -> Path:
    """A small supervised fastText model file (format 12, dense matrices, no pruning)."""
    rng = np.random.default_rng(seed)
    dim, bucket = 6, 997
    words = ["</s>", "the", "der", "und", "and", "of", "la"]
    labels = ["__label__en", "__label__de", "__label__es", "__label__fr"]
    counts = [100, 90, 80, 70, 60, 50, 40]
    label_counts = [500, 300, 200, 100]
    out = [struct.pack("<ii", 793712314, 12), struct.pack("<12i", dim, 5, 1, 1, 5, word_ngrams, loss, 3, bucket, minn, maxn, 100),
           struct.pack("<d", 1e-4), struct.pack("<iii", len(words) + len(labels), len(words), len(labels)),
           struct.pack("<qq", sum(counts), -1)]
    for word, count in zip(words, counts, strict=True):
        out.append(word.encode() + b"\0" + struct.pack("<qb", count, 0))
    for label, count in zip(labels, label_counts, strict=True):
        out.append(label.encode() + b"\0" + struct.pack("<qb", count, 1))
    out.append(struct.pack("<?", False))
    out.append(struct.pack("<qq", len(words) + bucket, dim) + rng.normal(0, 1, (len(words) + bucket, dim)).astype("<f4").tobytes())
    out.append(struct.pack("<?", False))
    out.append(struct.pack("<qq", len(labels), dim) + rng.normal(0, 1, (len(labels), dim)).astype("<f4").tobytes())
    path.write_bytes(b"".join(out))
    return path


@pytest.mark.parametrize(("minn", "maxn"), [(2, 3), (1, 5)])
@pytest.mark.parametrize(("loss", "name"), [(3, "softmax"), (1, "hierarchical softmax")])
def test_dense_unpruned_models_match_fasttext(tmp_path, loss, name, minn, maxn):
    path = str(write_model(tmp_path / f"m{loss}.bin", loss=loss, minn=minn, maxn=maxn))
    bag, fast = BagClassifier(path), FastTextPredictor(path)
    assert bag.supports, name
    texts = EDGES + ["the der und and of la", "the the the", "unknown words only here", "und der la of"]
    for k in (1, 2, 4):
        assert_same(bag, fast, texts, k)


def test_batched_ngram_rows_are_the_scalar_hash_of_every_ngram(lid176):
    """The numpy n-gram pass against fastText's loop written out with `fnv1a`, token by token (pruning included)."""
    bag, _ = lid176

    def scalar(token: str, minn: int, maxn: int) -> list[int]:
        w = "<" + token + ">"
        grams = [w[i : i + n] for n in range(max(minn, 1), maxn + 1) for i in range(len(w) - n + 1)
                 if not (n == 1 and (i == 0 or i == len(w) - 1))]
        rows = [fnv1a(g.encode("utf-8", "surrogatepass")) % bag.bucket for g in grams]
        return sorted(bag.nwords + int(bag._pruned_row[r]) for r in rows if bag._pruned_row[r] >= 0)

    tokens = ["a", "", "the", "naïve", "这是一个中文句子", "🙂🙂", "e\u0301", "x\ud800y", "Привет,", "12345", "__x__"]
    tokens += [w for t in demo_texts(5) for w in t.split()[:30]]
    model_minn, model_maxn = bag.minn, bag.maxn
    for minn, maxn in ((model_minn, model_maxn), (1, 5), (3, 3)):
        bag.minn, bag.maxn = minn, maxn
        try:
            rows, owner = bag._gram_rows(tokens)
        finally:
            bag.minn, bag.maxn = model_minn, model_maxn
        for i, token in enumerate(tokens):
            assert sorted(rows[owner == i].tolist()) == scalar(token, minn, maxn), (token, minn, maxn)


def test_a_word_ngram_model_is_left_to_fasttext(tmp_path):
    path = str(write_model(tmp_path / "bigrams.bin", loss=3, word_ngrams=2))
    assert not BagClassifier(path).supports
    assert isinstance(load_model(path), FastTextPredictor)


def test_a_file_that_is_not_a_fasttext_model_is_refused_with_its_name(tmp_path):
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"not a model at all")
    with pytest.raises(ValueError, match="model.bin"):
        load_model(str(bad))
    cut = tmp_path / "cut.ftz"
    cut.write_bytes(default_model_path().read_bytes()[:50_000])  # a download that stopped half-way
    with pytest.raises(ValueError, match="cut.ftz.*ends inside the model"):
        load_model(str(cut))


@pytest.mark.parametrize("k", [1, 5, 40, 176])
def test_the_pruned_tree_search_gives_the_labels_and_sums_of_scoring_every_leaf(lid176, k):
    """`predict` searches only the part of the tree that can hold the top k; `log_probs` scores every
    leaf in numpy: the same labels in the same order (ties to the lower index) and the same sums."""
    bag, _ = lid176
    floor = float(np.log(1e-5))
    for text in demo_texts(40) + EDGES:
        scores = bag.log_probs(text)
        want = [] if scores is None else [i for i in np.argsort(-scores, kind="stable")[:k] if scores[i] >= floor]
        got = bag.predict(text, k=k)
        assert [lab for lab, _ in got] == [bag.labels[i] for i in want], text[:80]
        np.testing.assert_allclose([p for _, p in got], [np.exp(scores[i]) for i in want], rtol=1e-12, atol=0)
