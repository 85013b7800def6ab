"""The lm-eval adapter: its log-likelihoods are the model's own, and the harness runs the offline suite
on a tiny checkpoint with the same numbers the in-loop scorer gives."""

from __future__ import annotations

import math
from pathlib import Path

import lm_eval
import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.tasks import TaskManager

from services.evaluator.harness_model import MoelabLM
from shared.checkpoint.read import load_trained_model
from shared.eval.bpb import bits_per_byte
from shared.eval.tasks import SUITE_DIR, discover_tasks, score_task
from tests.shared.checkpoint.fake_run import make_run

PAIRS = [("The capital of Köln is", " not a city."), ("def f(x):\n", "    return x  # ← ünïcode"),
         ("", "An empty context is conditioned on the document start."), ("Spaces at the end ", "move over")]


def _requests(kind: str, args: list[tuple]) -> list[Instance]:
    return [Instance(request_type=kind, doc={}, arguments=a, idx=i) for i, a in enumerate(args)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder, _ = make_run(tmp_path_factory.mktemp("eval"), "tiny")
    return folder


@pytest.fixture(scope="module")
def loaded(run):
    return load_trained_model(run, require_tokenizer=True)


@torch.no_grad()
def _direct(model, tok, context: str, continuation: str) -> tuple[float, bool]:
    """One unbatched forward over EOS + context + continuation; the continuation's tokens are the whole
    string's tokens after the context's (trailing spaces moved to the continuation)."""
    stripped = context.rstrip(" ")
    cont = context[len(stripped):] + continuation
    whole = tok.encode(stripped + cont)
    n_ctx = len(tok.encode(stripped)) if stripped else 0
    ids = torch.tensor([[tok.eos_id, *whole]])
    logp = torch.log_softmax(model(ids[:, :-1])[0][0].double(), dim=-1)
    positions = range(n_ctx, len(whole))
    target = [whole[p] for p in positions]
    total = sum(float(logp[p, t]) for p, t in zip(positions, target, strict=True))
    greedy = all(int(logp[p].argmax()) == t for p, t in zip(positions, target, strict=True))
    return total, greedy


def test_loglikelihood_equals_direct_model_calls(loaded):
    lm = MoelabLM(model=loaded.model, tokenizer=loaded.tokenizer, seq_len=64, batch_size=3)
    got = lm.loglikelihood(_requests("loglikelihood", PAIRS))
    for (ctx, cont), (ll, greedy) in zip(PAIRS, got, strict=True):
        want, want_greedy = _direct(loaded.model, loaded.tokenizer, ctx, cont)
        assert ll == pytest.approx(want, abs=1e-5)
        assert greedy == want_greedy


def test_loglikelihood_rolling_is_the_bits_per_byte_likelihood(loaded):
    texts = ["Grüße — 日本語 " * 12, "short"]
    lm = MoelabLM(model=loaded.model, tokenizer=loaded.tokenizer, seq_len=16)
    got = lm.loglikelihood_rolling(_requests("loglikelihood_rolling", [(t,) for t in texts]))
    for text, ll in zip(texts, got, strict=True):
        bits = bits_per_byte(loaded.model, loaded.tokenizer, [text], seq_len=16).bits
        assert -ll / math.log(2) == pytest.approx(bits, rel=1e-6)


@torch.no_grad()
def test_generate_until_is_greedy_and_stops_at_the_stop_string(loaded):
    model, tok = loaded.model, loaded.tokenizer
    lm = MoelabLM(model=model, tokenizer=tok, seq_len=64)
    ids = [tok.eos_id, *tok.encode("The ")]
    for _ in range(6):
        ids.append(int(model(torch.tensor([ids]))[0][0, -1].argmax()))
    greedy = tok.decode(ids[1 + len(tok.encode("The ")):])
    (free,) = lm.generate_until(_requests("generate_until", [("The ", {"until": [], "max_gen_toks": 6})]))
    assert free == greedy
    stop = greedy[len(greedy) // 2:] or greedy
    (cut,) = lm.generate_until(_requests("generate_until", [("The ", {"until": [stop], "max_gen_toks": 6})]))
    assert cut == greedy.split(stop)[0]


def test_harness_runs_the_committed_suite_on_a_checkpoint_with_the_in_loop_numbers(run, loaded):
    """lm_eval loads data/reference/tasks unchanged (its own TaskManager) and scores a checkpoint
    given by path; every metric equals shared.eval.tasks' in-process score of the same items."""
    lm = MoelabLM(checkpoint=str(run), batch_size=8)
    names = [t.name for t in discover_tasks()]
    out = lm_eval.simple_evaluate(model=lm, tasks=names, task_manager=TaskManager(include_path=str(SUITE_DIR)),
                                  limit=6, num_fewshot=0, bootstrap_iters=0)
    assert set(names) <= set(out["results"])
    for task in discover_tasks():
        mine = score_task(loaded.model, loaded.tokenizer, task, seq_len=lm.seq_len, limit=6)
        harness = out["results"][task.name]
        for metric in ("acc", "acc_norm", "logprob"):
            assert harness[f"{metric},none"] == pytest.approx(mine[metric], abs=1e-6), (task.name, metric)


def test_suite_yaml_names_files_that_exist_from_the_repository_root():
    for task in discover_tasks(SUITE_DIR):
        assert task.data_path.is_file() and Path(task.data_path).suffix == ".jsonl"
