"""The stand-in oracle's signals are real: each moves when its defect is planted, in the file's own language."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from services.scorer.degrade import degrade, kinds_for
from services.scorer.oracle import BACKENDS, make_oracle
from services.scorer.oracle.code_signals import code_language, code_scores, code_signals
from services.scorer.oracle.heuristic import HeuristicOracle
from services.scorer.oracle.kneser_ney import KneserNeyTrigram
from services.scorer.oracle.openers import OpenerModel, sentence_openers
from services.scorer.oracle.prose_signals import general_scores, prose_signals, titled
from services.scorer.oracle.reference import in_reference
from services.scorer.oracle.spelling import misspelt_rate, single_edits
from services.scorer.oracle.text_units import language
from services.scorer.sample_docs import demo_records
from shared.config import ConfigError, load_config
from shared.config.scorer import OracleConfig

PROSE = ("The river rises in the northern hills and flows south through three valleys. "
         "Farmers along the river grow wheat and barley on its flood plains. "
         "Each spring the river floods the plains and leaves fresh silt behind. "
         "The silt keeps the valleys fertile, so the farmers welcome the floods. "
         "In summer the river runs low and the valleys turn dry and brown.\n\n"
         "A dam was built on the river in the last century to store water for the summer. "
         "The dam holds back the floods, and the farmers now water their fields from canals. "
         "Without the floods the plains receive less silt, and the farmers buy fertiliser instead.")
GO = ("// Sum adds the numbers in values and returns the total.\n"
      "func Sum(values []int) int {\n\ttotal := 0\n\tfor _, value := range values {\n"
      "\t\ttotal += value // running total\n\t}\n\treturn total\n}\n")


@pytest.fixture(scope="module")
def oracle():
    return HeuristicOracle(("data/demo/wiki.jsonl.gz",), 3)


def test_kneser_ney_prefers_seen_word_order_and_gives_unknown_words_mass():
    sents = [s.lower().split() for s in ["the cat sat on the mat", "the dog sat on the rug", "a cat sat on a rug"]] * 5
    lm = KneserNeyTrigram(sents)
    fluent = lm.log2_perplexity([["the", "cat", "sat", "on", "the", "rug"]])
    scrambled = lm.log2_perplexity([["rug", "on", "the", "sat", "cat", "the"]])
    assert fluent < scrambled
    assert 0 < lm.prob("the", "cat", "<unk>") < 1
    total = sum(lm.prob("the", "cat", w) for w in lm.vocab | {"<unk>", "</s>"})
    assert total == pytest.approx(1.0, abs=1e-6)  # a distribution over the vocabulary


def test_opener_model_tells_paragraph_openers_from_words_that_point_back():
    model = OpenerModel.fit([PROSE] * 3)
    assert sentence_openers("The dam. It holds.\n\nThe river. It floods.")[:2] == [(True, "the"), (False, "it")]
    assert model.log_odds("a") > 0 > model.log_odds("each")  # "A dam ..." opens a paragraph in PROSE
    assert model.log_odds("never-seen") == pytest.approx(math.log(
        (sum(model.later.values()) + 0.5) / (sum(model.initial.values()) + 0.5)))
    ordered = "The dam was built. Each year it held.\n\nA river ran. Each spring it rose. Each summer it fell."
    reordered = "Each year it held. The dam was built.\n\nEach spring it rose. A river ran. Each summer it fell."
    assert model.order_signal(ordered) > 0 > model.order_signal(reordered)
    assert model.order_signal("One paragraph. With two sentences.") == 0.0  # too few openers to compare


def test_each_prose_signal_moves_under_its_defect(oracle):
    rng = lambda: random.Random(3)  # noqa: E731
    clean = prose_signals(PROSE, oracle.models)
    assert "en" in oracle.models and clean.unfinished == 0 and clean.duplicate_fraction == 0
    assert prose_signals(degrade(PROSE, "spelling", rng()), oracle.models).oov_rate > clean.oov_rate + 0.03
    # eight sentences, the last staying last: a few shuffles keep related sentences together by chance
    shuffled = [prose_signals(degrade(PROSE, "order", random.Random(s)), oracle.models).cohesion for s in range(10)]
    assert sum(c < clean.cohesion for c in shuffled) >= 8 and np.mean(shuffled) < clean.cohesion - 0.15
    assert prose_signals(degrade(PROSE, "truncation", rng()), oracle.models).unfinished == 1
    assert prose_signals(degrade(PROSE, "repetition", rng()), oracle.models).duplicate_fraction > 0.2
    assert prose_signals(degrade(PROSE, "spam", rng()), oracle.models).spam_density > clean.spam_density + 2


def test_misspelt_rate_counts_unknown_words_one_edit_from_a_known_word_not_rare_correct_words():
    vocab = frozenset({"river", "flows", "south", "through", "valleys"})
    assert {"rivr", "rievr", "rivers", "riber"} <= single_edits("river")
    # "rivr" and "flwos" are one edit from known words; "xylophone" is unknown but no typo of anything
    assert misspelt_rate(["the", "rivr", "flwos", "south", "xylophone"], vocab) == pytest.approx(2 / 5)
    # a name the document repeats is its own vocabulary, and so is a typo of it
    assert misspelt_rate(["zorbin", "zorbin", "zorbim", "valleys"], vocab) == pytest.approx(1 / 4)
    assert misspelt_rate(["a", "an", "42"], vocab) == 0.0  # nothing of three letters or more to judge


def test_misspelling_ten_percent_of_words_adds_four_points_of_misspelt_rate_in_nine_documents_of_ten(oracle):
    """The property DEDUCTIONS is sized on, checked as it was measured: on held-aside documents (not in
    the reference share), one misspelt copy each. A draw can plant few typos or typos that are real
    words, so it is a rate over documents, not a bound on each."""
    docs = [r for r in demo_records("wiki") if not in_reference(r["id"], 3) and len(r["text"]) >= 800][:30]
    rises = [prose_signals(degrade(r["text"], "spelling", random.Random(r["id"])), oracle.models).misspelt_rate
             - prose_signals(r["text"], oracle.models).misspelt_rate for r in docs]
    assert len(docs) == 30 and sum(rise >= 0.04 for rise in rises) >= 27, sorted(rises)


def test_language_is_read_from_the_body_and_not_only_from_a_localised_heading():
    """Translated manuals leave sections in English under a translated heading; the reference LM
    (and so the perplexity signal) must follow the body, which starts past the first 80 characters."""
    heading = "6.7.3. Pulizia accurata del sistema dopo un aggiornamento dei pacchetti installati"
    assert len(heading) > 80 and language(heading) == "it"
    assert language(heading + "\n\n" + PROSE) == "en"
    assert language("Le fleuve prend sa source dans les collines du nord. " * 3) == "fr"
    assert language("1234 -- 5678") == "und"


def test_titled_sees_an_opening_heading_and_a_shuffle_that_buries_it():
    doc = "The river\n\n" + PROSE
    assert titled(doc) == 1.0 and titled(PROSE) == 0.0
    assert titled("The river flows south.\n\nMore text here.") == 0.0  # a sentence, not a heading
    assert titled("The river") == 0.0  # a heading with nothing under it


def test_collapsed_code_is_not_rewarded_with_higher_comment_or_declaration_rates():
    """Rates are per effective line (max(lines, characters / 50)): one long line is not one line."""
    clean, flat = code_signals(GO), code_signals(degrade(GO, "layout", random.Random(0)))
    effective_lines = len(degrade(GO, "layout", random.Random(0))) / 50
    assert flat.n_lines == 1 and effective_lines > 3  # per physical line both rates would be 1.0
    assert flat.comments == pytest.approx(1 / effective_lines, rel=0.05) and flat.defs < 0.5
    assert sum(code_scores(flat).values()) < sum(code_scores(clean).values())


def test_code_signals_read_the_files_own_comment_syntax_names_and_layout():
    s = code_signals(GO)
    assert code_language(GO) == "go" and s.comments > 0.2 and s.docstrings == 1 and s.indented > 0.5
    obf = code_signals(degrade(GO, "obfuscation", random.Random(0)))
    flat = code_signals(degrade(GO, "layout", random.Random(0)))
    assert obf.comments == 0 and obf.identifier_quality < s.identifier_quality - 0.3
    assert flat.n_lines == 1 and flat.indented == 0


def test_oracle_is_deterministic_and_ranks_clean_text_above_every_degraded_copy(oracle):
    """Before rounding to the rubric's integers every degraded copy scores lower; after, never higher."""
    for text, kind in ((PROSE, "web"), (GO, "code")):
        assert oracle.scores(text, kind) == HeuristicOracle(("data/demo/wiki.jsonl.gz",), 3).scores(text, kind)
        def raw(t: str, kind: str = kind) -> float:
            return sum((code_scores(code_signals(t)) if kind == "code"
                        else general_scores(prose_signals(t, oracle.models))).values())

        for k in kinds_for(kind):
            bad = degrade(text, k, random.Random(1))
            assert raw(bad) < raw(text), k
            assert sum(oracle.scores(bad, kind).values()) <= sum(oracle.scores(text, kind).values()), k


def test_backend_sections_and_registry():
    assert set(BACKENDS) == {"heuristic", "openai", "vllm"}
    cfg = OracleConfig(heuristic={"reference": ["data/demo/wiki.jsonl.gz"], "reference_every": 5})
    built = make_oracle(cfg)
    assert isinstance(built, HeuristicOracle) and built.is_stand_in
    assert OracleConfig(backend="openai", openai={"concurrency": 3}).backend_section().concurrency == 3
    with pytest.raises(ConfigError, match="concurrency"):  # a flat key is refused: concurrency is the openai section's
        load_config("configs/demo.yaml", ["scorer.oracle.concurrency=4"])


def test_registry_builds_the_vllm_oracle_from_its_one_section():
    cfg = OracleConfig(backend="vllm", vllm={
        "model": "/models/judge", "max_tokens": 64, "temperature": 0.5, "constraint": "vllm_regex",
        "tensor_parallel_size": 2, "replicas": 3, "accelerator_type": "L40S", "batch_size": 8})
    oracle = make_oracle(cfg)
    assert (oracle.model, oracle.max_tokens, oracle.temperature, oracle.constraint) == (
        "/models/judge", 64, 0.5, "vllm_regex")
    req = oracle.gpu_request()
    assert (req.what, req.gpus_per_unit, req.units, req.accelerator_type) == ("scorer.oracle.vllm", 2, 3, "L40S")
    assert oracle.engine.batch_size == 8
    with pytest.raises(ConfigError, match="model"):  # the model lives in the backend's section only
        load_config("configs/demo.yaml", ["scorer.oracle.model=x"])
