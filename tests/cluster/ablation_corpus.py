"""A tiny two-arm corpus and config for ablation tests: readable sentences vs the same with garbage."""

from __future__ import annotations

import json
import random
from pathlib import Path

from shared.config import ExperimentConfig, load_config

WORDS = ("the river runs past an old mill where children learn to read and count while their parents "
         "bake bread sell wool and talk about the weather the harvest and the long winter ahead").split()


def sentences(rng: random.Random, n: int) -> str:
    return " ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))).capitalize() + "."
                    for _ in range(n))


def garbage(rng: random.Random, n: int) -> str:
    return " ".join("".join(rng.choice("qxzj0123456789#@%") for _ in range(rng.randint(3, 9))) for _ in range(n))


def write_jsonl(path: Path, texts: list[str], source: str, extra_lines: tuple[str, ...] = ()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for i, text in enumerate(texts):
            fh.write(json.dumps({"id": f"{source}-{i}", "source": source, "text": text}) + "\n")
        for line in extra_lines:
            fh.write(line + "\n")
    return path


def make_corpus(root: Path, docs: int = 60) -> dict[str, Path]:
    rng = random.Random(7)
    clean = [sentences(rng, 6) for _ in range(docs)]
    noisy = [garbage(rng, 40) if i % 2 else t for i, t in enumerate(clean)]
    held = [sentences(rng, 6) for _ in range(8)]
    return {
        "clean": write_jsonl(root / "clean.jsonl", clean + held[:2], "prose", extra_lines=("{not json",)),
        "noisy": write_jsonl(root / "noisy.jsonl", noisy, "prose"),
        "held": write_jsonl(root / "held.jsonl", held, "held"),
    }


def ablation_config(root: Path, *overrides: str, steps: int = 3) -> ExperimentConfig:
    files = make_corpus(root / "corpus")
    return load_config(Path(__file__).parents[2] / "configs" / "tiny.yaml", [
        "name=abl", "model.vocab_size=512", "model.d_model=32", "model.n_layers=2", "model.max_seq_len=64",
        "mixture.tokenizer.vocab_size=512", "mixture.documents=[]", "mixture.eval_documents=[]", "mixture.rates={}",
        f"train.steps={steps}", "train.seq_len=32", "train.micro_batch_size=2", "train.grad_accum=1",
        "train.eval_every=100", "train.eval_batches=2", "train.checkpoint_every=100", "optim.warmup_steps=1",
        "tracker.mode=disabled",
        f"ablation={{baseline: clean, seeds: 2, suite: false, out_dir: {root / 'out'}, "
        f"eval_documents: [{files['held']}], tokenizer_docs_per_arm: 40, cpus_per_run: 1, "
        f"arms: [{{name: clean, documents: [{files['clean']}]}}, {{name: noisy, documents: [{files['noisy']}]}}]}}",
        *overrides,
    ])
