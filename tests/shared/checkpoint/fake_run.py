"""A run folder as the trainer leaves it (config.yaml, tokenizer, checkpoints/step_*), without training.

The weights are the model's random init with the router biases set apart from each other (live
bias ≠ its average ≠ 0), so a reader that loads the wrong bias, or none, routes differently; the
checkpoint is written by the trainer's own `CheckpointManager`."""

from __future__ import annotations

from pathlib import Path
from pydoc_data.topics import topics

import torch

from services.trainer.checkpoint import CheckpointManager
from shared.config import load_config, save_resolved
from shared.data.tokenizer import load_tokenizer, train_tokenizer
from shared.model import MoETransformer

ROOT = Path(__file__).resolve().parents[3]
VOCAB = 512


def shared_tokenizer(folder: Path) -> Path:
    """A small byte-level BPE trained on Python's reference manual (the same one for every run)."""
    if not (folder / "moelab_tokenizer.json").is_file():
        texts = [t for _, t in sorted(topics.items())][:120]
        train_tokenizer(texts, folder, vocab_size=VOCAB)
    load_tokenizer(folder)
    return folder


def fake_cfg(tmp: Path, name: str, *overrides: str, recipe: str = "tiny.yaml"):
    return load_config(ROOT / "configs" / recipe, [
        f"train.out_dir={tmp}/runs", f"train.run_name={name}", f"model.vocab_size={VOCAB}",
        f"mixture.tokenizer.out_dir={shared_tokenizer(tmp / 'tok')}", "mixture.tokenizer.vocab_size=512",
        "tracker.mode=disabled", "model.max_seq_len=64", *overrides])


def perturb_biases(model: MoETransformer, seed: int = 1) -> None:
    gen = torch.Generator().manual_seed(seed)
    for layer in model.moe_layers():
        E = layer.router.expert_bias_E.numel()
        layer.router.expert_bias_E.copy_(torch.randn(E, generator=gen) * 0.5)
        layer.router.expert_bias_avg_E.copy_(torch.randn(E, generator=gen) * 0.5)
        if layer.bungee is not None:
            layer.bungee.data.fill_(1.5)


def make_run(tmp: Path, name: str = "tiny", *overrides: str, recipe: str = "tiny.yaml", steps: tuple[int, ...] = (3,),
             seed: int = 0, meta: dict | None = None) -> tuple[Path, MoETransformer]:
    """Write a run folder with a checkpoint at each of `steps`; returns it and the model saved last."""
    cfg = fake_cfg(tmp, name, *overrides, recipe=recipe)
    run = Path(cfg.train.out_dir) / name
    save_resolved(cfg, run)
    torch.manual_seed(seed)
    model = MoETransformer(cfg.model)
    with torch.no_grad():
        perturb_biases(model, seed + 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    manager = CheckpointManager(run / "checkpoints", keep_last=len(steps))
    for step in steps:
        manager.save(step, model, opt, meta or {"note": "fake"})
    return run, model
