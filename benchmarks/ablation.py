"""Sanity ablation with a known answer: clean text against the same text with 30% planted garbage.

Arm `clean` is the demo corpus's Wikipedia prose without its planted problems (every 20th document
held out for eval loss). Arm `garbage` is the same documents in the same order, except that a
random set of whole documents holding 30% of the arm's *tokens* is replaced, each in its place, by a
planted garbage document of exactly as many tokens (a web-boilerplate page, a page of one repeated
line, or a product-spam page). The one tokenizer both arms use is trained here on the clean
documents, before the garbage arm exists, because it is what counts the 30%. Same token budget, same
tiny MoE proxy (configs/tiny.yaml, trained at its 256-token window, the one the suite evaluates in),
3 seeds each, run by `moelab ablate`'s own code (cluster.ablation) on a local Ray. Seeds are
paired: seed k of both arms has the same initialisation and the same document order (the arms hold
the same number of documents, of the same token lengths position by position, under the same
source name), so every training window of the garbage arm is the clean arm's window with some whole
documents swapped for garbage of the same length.

Why whole documents: a garbage arm that keeps the first 70% of every document and garbles the rest
trains on document openings only, while every reference text is scored from a document start, so it
is judged on text shaped like its own and can beat the clean arm for that reason alone. Whole kept
documents are an unbiased sample of the clean arm's prose, so the arms differ only in how much prose
they hold, not in which part of a document it comes from.

The known answer: at the same budget the garbage arm sees 70% of the clean arm's prose, so the
clean arm must have the lower bits per byte on the prose reference set (data/reference/prose.jsonl,
in neither arm), with the paired Student-t 95% interval excluding zero; that is what `passed` and
the exit code say. The task score judged is the mean accuracy over the suite's two prose tasks
(`task/prose/acc`, 200 items), fixed before any run; `task_separates` says whether it separates
the arms, and `separating_metrics` lists every metric whose interval excludes zero in the clean
arm's favour (with ~15 metrics, one may do so by chance). `unigram_bpb_prose` is the prose BPB of
the clean arm's unigram token frequencies: a model near it has learned nothing the garbage could
take away, which is why the earlier 120-step budget could not separate the arms.

    .venv/bin/python benchmarks/ablation.py            # 3 seeds, one pass over the arms at 2,048 tokens a step
    .venv/bin/python benchmarks/ablation.py --quick    # 2 seeds, 6 steps, tiny model (a smoke test)
    .venv/bin/python benchmarks/ablation.py --first-seed 3 --seeds 22   # seeds no earlier run was judged on

The last line is one JSON object with bpb_gap (garbage − clean, mean over seeds), bpb_ci_low,
task_gap (clean − garbage pooled prose accuracy), task_ci_low, seconds, and `passed`; a full run
also writes it to benchmarks/results/ablation.json (or `--out`) with the commit, the command and
the load average before and after, since `seconds` is wall-clock on whatever else the machine was
running.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"

GARBAGE_FRACTION = 0.3
TOKENS_PER_STEP = 2048
HELD_OUT_EVERY = 20  # every 20th Wikipedia document is held out for eval loss, in neither arm
BOILERPLATE = ("Home | About us | Contact | Privacy policy | Terms of use | Cookie settings\n"
               "Subscribe to our newsletter! Click here to sign up. All rights reserved.\n")
SPAM = ("BEST PRICES!!! Buy cheap watches now, free shipping, limited offer, 90% off, "
        "order today www.cheap-deals-online.example click click click ")


def garbage_unit(rng: random.Random) -> str:
    """One kind of garbage, chosen per document: web boilerplate, one repeated line, or spam."""
    kind = rng.randrange(3)
    if kind == 0:
        return BOILERPLATE
    if kind == 1:
        return f"Posted by admin on {rng.randint(1, 28)} March {rng.randint(2001, 2023)} | Reply | Share\n"
    return SPAM


def planted_garbage(tok, rng: random.Random, n_tokens: int) -> str:
    """Exactly `n_tokens` tokens (of `tok`) of one kind of garbage, as text."""
    if n_tokens <= 0:
        return ""
    unit = garbage_unit(rng)
    ids: list[int] = []
    repeats = 8
    while len(ids) < n_tokens:
        ids = tok.encode(unit * repeats)
        repeats *= 2
    return tok.decode(ids[:n_tokens])


def replaced_documents(lengths: list[int], rng: random.Random) -> set[int]:
    """Indices of the documents to replace by garbage: a random prefix of a shuffled order, ended at
    the document that brings their tokens closest to GARBAGE_FRACTION of all tokens. A prefix of a
    random permutation is a uniform sample of documents (no preference for short or long ones), so
    the prose the garbage arm keeps is an unbiased 70% of the clean arm's."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    target = GARBAGE_FRACTION * sum(lengths)
    chosen: set[int] = set()
    total = 0
    for i in order:
        if total + lengths[i] >= target:
            if (total + lengths[i]) - target <= target - total:
                chosen.add(i)
            break
        chosen.add(i)
        total += lengths[i]
    return chosen


def split_corpus(root: Path) -> tuple[dict[str, Path], int]:
    """clean.jsonl (the training documents) and held.jsonl (every HELD_OUT_EVERY-th document), from
    the Wikipedia source's documents without a planted problem.

    A training document whose text is also held out (the corpus has duplicates) or is a prose
    reference text is left out here, before the garbage arm is made from the clean one: the ablation
    would drop it from the clean arm only (the garbage copy's text differs), and arms with different
    document counts would shuffle in different orders, unpairing the seeds. Returns the paths and
    how many documents were left out."""
    from shared.eval.reference_sets import load_reference_sets

    docs = [json.loads(line) for line in gzip.open(ROOT / "data/demo/wiki.jsonl.gz", "rt", encoding="utf-8")]
    # the demo corpus plants problems in this source for the data filter to find (data/demo/PLANTED.md:
    # boilerplate, duplicates, gibberish, other languages); the clean arm and the held-out set are
    # the documents without them, or the "clean" arm would carry web boilerplate of its own
    docs = [d for d in docs if not (d.get("meta") or {}).get("planted")]
    held_texts = {d["text"] for i, d in enumerate(docs) if i % HELD_OUT_EVERY == 0}
    never_train = held_texts | set(load_reference_sets(["prose"])["prose"])
    paths = {name: root / f"{name}.jsonl" for name in ("clean", "held")}
    root.mkdir(parents=True, exist_ok=True)
    left_out = 0
    with paths["clean"].open("w") as clean, paths["held"].open("w") as held:
        for i, d in enumerate(docs):
            rec = {"id": d["id"], "source": "wiki", "text": d["text"]}
            if i % HELD_OUT_EVERY == 0:
                held.write(json.dumps(rec) + "\n")
            elif d["text"] in never_train:
                left_out += 1
            else:
                clean.write(json.dumps(rec) + "\n")
    return paths, left_out


def shared_tokenizer(clean: Path, out: Path, vocab_size: int, min_frequency: int):
    """The one tokenizer of both arms, trained on the clean arm's documents.

    Why here and not by the ablation: the garbage fraction is a fraction of *tokens*, so the
    tokenizer that counts them must exist before the garbage arm does. A tokenizer fitted to the
    garbage as well (the ablation's default: an equal sample of every arm) learns its repeated
    strings as long tokens, and 30% of the characters became only 24% of the tokens."""
    from shared.data.tokenizer import train_tokenizer

    texts = [json.loads(line)["text"] for line in clean.open()]
    return train_tokenizer(texts, out, vocab_size=vocab_size, min_frequency=min_frequency)


def write_garbage_arm(clean: Path, out: Path, tok) -> dict[str, float]:
    """garbage.jsonl: the clean documents in the same order, with a random set of whole documents
    holding 30% of the tokens each replaced, in its place, by a planted garbage document of exactly
    as many tokens (one kind per document); returns the token counts."""
    rng = random.Random(0)
    records = [json.loads(line) for line in clean.open()]
    lengths = [len(ids) for ids in tok.encode_batch([r["text"] for r in records])]
    replaced = replaced_documents(lengths, rng)
    garbage_tokens = 0
    with out.open("w") as fh:
        for i, rec in enumerate(records):
            if i in replaced:
                rec = {**rec, "id": f"{rec['id']}-garbage", "text": planted_garbage(tok, rng, lengths[i])}
                garbage_tokens += lengths[i]
            fh.write(json.dumps(rec) + "\n")
    arm_lengths = [len(ids) for ids in tok.encode_batch([json.loads(line)["text"] for line in out.open()])]
    arm_tokens = sum(arm_lengths)
    return {"prose_tokens": sum(lengths) - garbage_tokens, "garbage_tokens": garbage_tokens, "arm_tokens": arm_tokens,
            "garbage_documents": len(replaced),
            # documents whose length differs between the arms (0: the arms' streams line up token for token)
            "length_mismatches": sum(a != b for a, b in zip(lengths, arm_lengths, strict=True)),
            "garbage_token_fraction": garbage_tokens / arm_tokens}


def unigram_bpb(tok, train: Path, texts: list[str]) -> float:
    """Bits per byte of `texts` under the clean arm's unigram token frequencies (add-one): the level a
    model sits at before it has learned anything beyond which tokens are common."""
    import numpy as np

    counts = np.ones(tok.vocab_size)
    for ids in tok.encode_batch([json.loads(line)["text"] for line in train.open()]):
        counts += np.bincount(ids, minlength=tok.vocab_size)
    logp = np.log2(counts / counts.sum())
    bits = -sum(float(logp[ids].sum()) for ids in tok.encode_batch(texts))
    return bits / sum(len(t.encode("utf-8")) for t in texts)


def config(root: Path, quick: bool, seeds: int, steps: int | None, passes: int = 1, first_seed: int = 0):
    """The ablation config and what was measured while making its arms; `steps` None: `passes` passes
    over the smaller arm (whole steps of TOKENS_PER_STEP); at one pass neither arm repeats a token."""
    from shared.config import load_config
    from shared.eval.reference_sets import load_reference_sets

    base = load_config(ROOT / "configs" / "tiny.yaml")
    files, left_out = split_corpus(root / "corpus")
    t = base.mixture.tokenizer
    tok = shared_tokenizer(files["clean"], root / "tokenizer", t.vocab_size, t.min_frequency)
    files["garbage"] = root / "corpus" / "garbage.jsonl"
    planted = write_garbage_arm(files["clean"], files["garbage"], tok)
    prose = load_reference_sets(["prose"])["prose"]
    if steps is None:  # the arms hold the same tokens (garbage documents are length-matched); min() in case not
        steps = passes * min(planted["prose_tokens"] + planted["garbage_tokens"], planted["arm_tokens"]) // TOKENS_PER_STEP
    if quick:
        shape = ["model.d_model=32", "model.n_layers=2", "model.max_seq_len=64", "train.seq_len=64",
                 "train.micro_batch_size=4", "optim.warmup_steps=2", "ablation.reference_texts=8",
                 "ablation.task_items=16"]
    else:
        # trained at the window the suite evaluates in (the model's max_seq_len), 2,048 tokens a step
        # in one micro-batch (the recipe's 16 micro-batches of one sequence cost ~3x the time on CPU)
        shape = [f"train.seq_len={base.model.max_seq_len}", f"train.micro_batch_size={TOKENS_PER_STEP // base.model.max_seq_len}"]
    cfg = load_config(ROOT / "configs" / "tiny.yaml", [
        "name=sanity-ablation", "mixture.documents=[]", "mixture.eval_documents=[]", "mixture.rates={}",
        "train.eval_every=100000", "train.eval_batches=16", "train.checkpoint_every=100000",
        "train.grad_accum=1", f"train.steps={steps}", "tracker.mode=disabled",
        f"ablation={{baseline: clean, seeds: {seeds}, first_seed: {first_seed}, out_dir: {root / 'out'}, eval_documents: [{files['held']}], "
        f"reference_sets: [prose], tokenizer_path: {tok.path}, cpus_per_run: 1, max_epochs: {passes}, "
        f"arms: [{{name: clean, documents: [{files['clean']}]}}, {{name: garbage, documents: [{files['garbage']}]}}]}}",
        *shape,
    ])
    used = prose[: cfg.ablation.reference_texts]
    return cfg, {**planted, "steps": steps, "training_documents_left_out": left_out, "unigram_bpb_prose": unigram_bpb(tok, files["clean"], used),
                 "prose_reference_texts": len(used), "prose_reference_bytes": sum(len(x.encode("utf-8")) for x in used)}


TASK_METRIC = "task/prose/acc"


def separates_for_clean(c: dict) -> bool:
    """Whether a paired comparison (garbage − clean) puts the clean arm ahead with an interval that
    excludes zero *and has a spread*: seeds that all give the same difference make a zero-width
    interval, which is no evidence however far from zero it sits (the verdict names no winner)."""
    if not c.get("excludes_zero") or not c.get("sd"):
        return False
    return (c["mean"] < 0) == c["higher_is_better"]


def pooled_prose_accuracy(report: dict) -> dict[str, dict[int, float]]:
    """Per arm and seed, the mean accuracy over the suite's prose tasks (cloze and continuation: 200
    items): the task score this benchmark judges, fixed before any run; both arms train on prose only."""
    names = [m for m in report["metrics"] if m.startswith("task/") and "prose" in m and m.endswith("/acc")]
    out: dict[str, dict[int, float]] = {}
    for arm, a in report["arms"].items():
        out[arm] = {int(seed): sum(r["metrics"][m] for m in names) / len(names)
                    for seed, r in a["runs"].items() if names and all(m in r["metrics"] for m in names)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds, 6 steps, a smaller model (smoke test)")
    ap.add_argument("--seeds", type=int, default=None)
    ap.add_argument("--first-seed", type=int, default=0,
                    help="Seeds are first-seed, first-seed + 1, …: a run registered on seeds no earlier run used")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--passes", type=int, default=1,
                    help="Passes over the arms' documents when --steps is not given (each arm may repeat a "
                         "document this many times)")
    ap.add_argument("--work", type=Path, default=None, help="Working folder (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=None, help="Also write the final JSON here")
    args = ap.parse_args(argv)
    if args.passes < 1:
        ap.error(f"--passes {args.passes}: at least one pass over the arms")
    if args.first_seed < 0:
        ap.error(f"--first-seed {args.first_seed}: seeds are non-negative")
    seeds = args.seeds or (2 if args.quick else 3)
    steps = args.steps or (6 if args.quick else None)

    import ray

    from cluster.ablation import run_ablation
    from shared.stats import compare_paired, verdict_line

    load_before = os.getloadavg()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ablation-bench-") as tmp:
        work = args.work or Path(tmp)
        cfg, made = config(work, args.quick, seeds, steps, args.passes, args.first_seed)
        if not ray.is_initialized():
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        report = run_ablation(cfg, log=lambda line: print(line, flush=True))
    seconds = time.perf_counter() - t0
    comp = report["comparisons"]["garbage"]
    bpb = comp.get("bpb/prose", {})
    # signed so that > 0 means the clean arm is better
    bpb_gap, bpb_ci_low = bpb.get("mean"), bpb.get("ci_low")
    pooled = pooled_prose_accuracy(report)
    task = None
    if pooled.get("clean") and pooled.get("garbage"):
        tc = compare_paired(pooled["garbage"], pooled["clean"])
        task = {"gap": -tc.mean, "ci_low": -tc.high, "verdict": verdict_line(TASK_METRIC, "garbage", "clean", tc, True),
                "separates": separates_for_clean({**tc.as_dict(), "excludes_zero": tc.excludes_zero, "higher_is_better": True})}
    arm_bpb = {arm: report["arms"][arm]["metrics"].get("bpb/prose", {}).get("mean") for arm in ("clean", "garbage")}
    for line in [*report["verdicts"], *([task["verdict"]] if task else [])]:
        print(line)
    print(f"prose BPB: clean {arm_bpb['clean']}, garbage {arm_bpb['garbage']}, unigram {made['unigram_bpb_prose']:.4f}")
    passed = bool(bpb) and separates_for_clean(bpb)
    result = {"bpb_gap": bpb_gap, "bpb_ci_low": bpb_ci_low,
              "task_metric": TASK_METRIC, "task_gap": task and task["gap"], "task_ci_low": task and task["ci_low"],
              "task_separates": bool(task) and task["separates"],
              # lower is better: garbage − clean, > 0 when the clean arm is better, as for BPB
              "eval_loss_gap": comp["eval/loss"]["mean"] if "eval/loss" in comp else None,
              "eval_loss_ci_low": comp["eval/loss"]["ci_low"] if "eval/loss" in comp else None,
              # metrics whose interval excludes zero in the clean arm's favour
              "separating_metrics": sorted([m for m, c in comp.items() if separates_for_clean(c)]
                                           + ([TASK_METRIC] if task and task["separates"] else [])),
              "interval": "paired Student-t, 95%",
              "bpb_prose": arm_bpb, "unigram_bpb_prose": made["unigram_bpb_prose"],
              "prose_reference_texts": made["prose_reference_texts"],
              "prose_reference_bytes": made["prose_reference_bytes"],
              "garbage_token_fraction": made["garbage_token_fraction"],
              "garbage_documents": made["garbage_documents"], "length_mismatches": made["length_mismatches"],
              "design": "whole documents replaced in place by garbage documents of the same token length",
              "documents_per_arm": {arm: report["arms"][arm]["documents"]["written"] for arm in ("clean", "garbage")},
              "training_documents_left_out": made["training_documents_left_out"],
              "seeds": seeds, "seeds_run": sorted(int(k) for k in report["arms"]["clean"]["runs"]), "steps": made["steps"], "passes": args.passes, "budget_tokens": report["budget_tokens"], "quick": args.quick,
              "verdicts": [*report["verdicts"], *([task["verdict"]] if task else [])],
              "seconds": round(seconds, 1), "passed": passed,
              # `seconds` is wall-clock: read it against the machine's load while it ran
              "load_average_before": [round(x, 2) for x in load_before],
              "load_average_after": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
              "command": " ".join([".venv/bin/python", "benchmarks/ablation.py", *(argv if argv is not None else sys.argv[1:])])}
    out = args.out or (None if args.quick else RESULTS / "ablation.json")
    if out is not None:
        from shared.data.atomic import atomic_write_json
        from shared.provenance import tree_commit

        atomic_write_json(out, {**result, "commit": tree_commit(), "machine": platform.node(),
                                "threads_per_run": int(cfg.ablation.cpus_per_run)})
    print(json.dumps(result))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
