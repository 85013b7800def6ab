"""Everything an ablation checks and builds before the first arm trains.

Arms → documents (raw globs as they are, the data filter run with the arm's overrides, or the
scorer's scored set re-selected at the arm's keep rate: keep_rate.py) →
held-out texts removed from every arm → one tokenizer for every arm (given, or trained on an equal
sample of each arm's documents, so no arm's vocabulary is favoured) → each arm's token shards →
the token budget check. Any of these failing stops the ablation before any training starts: a
missing input, an empty held-out set, an arm with no document left, an arm holding fewer tokens
than the budget needs. Each arm's prepared data is keyed by its recipe and inputs, so a rerun
reuses it and a changed recipe rebuilds only that arm.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from cluster.ablation.documents import RecipeError, expand, held_out_keys, write_arm_documents
from cluster.stages import digest, file_fingerprints
from shared.config import ExperimentConfig
from shared.config.ablation import ArmConfig, arm_data
from shared.data.atomic import atomic_write_json

PREPARED = "prepared.json"


@dataclass
class ArmPlan:
    """One arm ready to train: its config (without seed and run name), what its data holds, and
    `data_key`, which changes whenever its documents or the shared tokenizer do (its shard paths
    stay the same, so the config alone cannot tell a finished run on the old data from one on the new)."""

    name: str
    cfg: ExperimentConfig
    report: dict[str, Any]
    data_key: str = ""


def budget_tokens(cfg: ExperimentConfig) -> int:
    t = cfg.train
    return t.steps * t.micro_batch_size * t.seq_len * t.grad_accum


def _arm_files(cfg: ExperimentConfig, arm: ArmConfig, root: Path, log) -> tuple[list[Path], Any]:
    """The files an arm's recipe names, and what identifies them (for the prepared-data key)."""
    if arm.scores is not None:
        from cluster.ablation.keep_rate import select_at_keep_rate

        log(f"ablation: arm {arm.name}: the scorer's documents at keep rate {arm.keep_rate:.0%} from {arm.scores}")
        return select_at_keep_rate(arm.name, arm.scores, arm.keep_rate, root / "selected")
    if arm.filter is None:
        files = expand(arm.documents, f"ablation arm {arm.name!r}")
        return files, file_fingerprints([str(f) for f in files])
    from services.data_filter.pipeline import run as run_filter

    data = arm_data(cfg.data, arm)
    inputs = [str(f) for src in data.inputs for f in expand(src.paths, f"data.inputs {src.name!r}")]
    key = {"data": data.model_dump(mode="json"), "inputs": file_fingerprints(inputs)}
    out = root / "filtered"
    marker = out / "ablation_key.json"
    if not (marker.is_file() and json.loads(marker.read_text()).get("key") == digest(key)):
        shutil.rmtree(out, ignore_errors=True)
        log(f"ablation: arm {arm.name}: data filter with overrides {arm.filter}")
        run_filter(data, out_dir=out, experiment=cfg)
        atomic_write_json(marker, {"key": digest(key)})
    files = sorted(out.glob("*.parquet"))
    if not files:
        raise RecipeError(f"ablation arm {arm.name!r}: the data filter kept no document (see {out}/stats.json)")
    return files, key


def _shared_tokenizer(cfg: ExperimentConfig, arm_docs: dict[str, list[Path]], out: Path):
    """The ablation's one tokenizer: `ablation.tokenizer_path`, or a BPE trained on an equal number of
    documents from every arm (reused while that sample's inputs are unchanged)."""
    from shared.data.prepare import iter_texts
    from shared.data.tokenizer import CONFIG_FILE, load_tokenizer, train_tokenizer

    a, t = cfg.ablation, cfg.mixture.tokenizer
    if a.tokenizer_path:
        if not Path(a.tokenizer_path).exists():
            raise RecipeError(f"ablation.tokenizer_path: {a.tokenizer_path} does not exist")
        return load_tokenizer(a.tokenizer_path, eos_token=t.eos_token)
    key = digest({"arms": {k: file_fingerprints([str(p) for p in v]) for k, v in sorted(arm_docs.items())},
                  "per_arm": a.tokenizer_docs_per_arm, "vocab": t.vocab_size, "min_frequency": t.min_frequency,
                  "eos": t.eos_token})
    meta = out / CONFIG_FILE
    if meta.is_file() and json.loads(meta.read_text()).get("ablation_sample") == key:
        return load_tokenizer(out, eos_token=t.eos_token)

    def sample():
        for name in sorted(arm_docs):
            yield from islice(iter_texts(arm_docs[name], a.tokenizer_docs_per_arm), a.tokenizer_docs_per_arm)

    return train_tokenizer(sample(), out, vocab_size=t.vocab_size, min_frequency=t.min_frequency, eos_token=t.eos_token,
                           extra_config={"ablation_sample": key, "docs_per_arm": a.tokenizer_docs_per_arm,
                                         "arms": sorted(arm_docs)})


def check_budget(arm: str, manifest: dict, rates: dict[str, float], budget: int, max_epochs: float) -> None:
    """Refuse an arm whose tokens (per source, when it has rates) cannot feed the budget within max_epochs."""
    need = budget / max_epochs
    have = int(manifest.get("tokens") or 0)
    if have < need:
        raise RecipeError(
            f"ablation arm {arm!r} holds {have:,} tokens (held-out documents removed) but the budget is {budget:,} "
            f"tokens (train.steps × micro_batch_size × seq_len × grad_accum) at ablation.max_epochs={max_epochs}: "
            f"it needs at least {need:,.0f}; lower train.steps, raise max_epochs or give the arm more documents")
    sources = manifest.get("sources") or {}
    total = sum(v for v in rates.values() if v > 0)
    for source, rate in sorted(rates.items()):
        if rate <= 0:
            continue
        if source not in sources:
            raise RecipeError(f"ablation arm {arm!r}: rates name source {source!r}, which none of its documents "
                              f"carry (sources: {', '.join(sorted(sources))})")
        want = budget * rate / total / max_epochs
        if sources[source]["tokens"] < want:
            raise RecipeError(f"ablation arm {arm!r}: source {source!r} holds {sources[source]['tokens']:,} tokens, "
                              f"fewer than its rate's share of the budget ({want:,.0f} at max_epochs={max_epochs})")


def reference_keys(names: list[str] | None) -> set[bytes]:
    """Text keys of the evaluation suite's reference sets; an unknown or empty set is refused here,
    before training, not when the first trained model is measured."""
    from cluster.ablation.documents import text_key
    from shared.eval.reference_sets import ReferenceSetError, load_reference_sets

    try:
        sets = load_reference_sets(names)
    except ReferenceSetError as exc:
        raise RecipeError(f"ablation.reference_sets: {exc}") from None
    empty = sorted(name for name, texts in sets.items() if not texts)
    if empty:
        raise RecipeError(f"ablation.reference_sets: {empty} hold no text; bits per byte needs at least one")
    return {text_key(t) for texts in sets.values() for t in texts}


def prepare(cfg: ExperimentConfig, log=print) -> tuple[list[ArmPlan], dict[str, Any]]:
    """Build and check every arm's data; returns the arm plans and a report of what was built."""

    a = cfg.ablation
    out = Path(a.out_dir)
    held_out_file = out / "held_out" / "documents.parquet"
    eval_files = expand(a.eval_documents, "ablation.eval_documents")
    held_out, held_counts = held_out_keys(eval_files, held_out_file)
    if a.suite:  # the suite's reference texts are measured on, so no arm may train on them either
        held_out |= reference_keys(a.reference_sets)

    arm_docs: dict[str, list[Path]] = {}
    arm_counts: dict[str, dict] = {}
    arm_keys: dict[str, str] = {}
    eval_key = file_fingerprints([str(f) for f in eval_files])
    for arm in a.arms:
        root = out / "arms" / arm.name
        files, source_key = _arm_files(cfg, arm, root, log)
        key = digest({"recipe": arm.model_dump(mode="json"), "sources": source_key, "held_out": eval_key})
        marker = root / PREPARED
        arm_keys[arm.name] = key
        if marker.is_file() and (done := json.loads(marker.read_text())).get("key") == key:
            arm_docs[arm.name] = [Path(p) for p in done["documents"]]
            arm_counts[arm.name] = done["counts"]
            continue
        selection = source_key.get("selection") if isinstance(source_key, dict) else None
        shutil.rmtree(root / "documents", ignore_errors=True)
        shutil.rmtree(root / "tokens", ignore_errors=True)
        shutil.rmtree(root / "tokens-eval", ignore_errors=True)
        docs, counts = write_arm_documents(arm.name, files, held_out, root / "documents")
        arm_docs[arm.name] = docs
        arm_counts[arm.name] = {**counts.as_dict(), **({"keep_rate": arm.keep_rate, "selection": selection}
                                                       if selection is not None else {})}
        atomic_write_json(marker, {"key": key, "documents": [str(d) for d in docs], "counts": arm_counts[arm.name]})
        log(f"ablation: arm {arm.name}: {counts.written} documents ({counts.held_out_removed} held-out removed, "
            f"{sum(counts.malformed.values())} malformed)")

    tok = _shared_tokenizer(cfg, arm_docs, out / "tokenizer")
    budget = budget_tokens(cfg)
    plans = []
    from services.trainer.data import prepare_shards

    for arm in a.arms:
        root = out / "arms" / arm.name
        m = cfg.mixture
        arm_cfg = cfg.model_copy(update={
            "ablation": None,
            "mixture": m.model_copy(update={
                "documents": [str(p) for p in arm_docs[arm.name]], "eval_documents": [str(held_out_file)],
                "rates": dict(arm.rates), "shard_dir": str(root / "tokens"), "use_ray": False,
                "tokenizer": m.tokenizer.model_copy(update={"path": str(tok.path)}),
            }),
            # the ablation measures each final model once, with its own suite settings (ablation.suite):
            # the trainer's in-loop suite would score the same model again at the last step
            "train": cfg.train.model_copy(update={
                "out_dir": str(out / "runs"),
                "eval_suite": cfg.train.eval_suite.model_copy(update={"enabled": False})}),
        })
        for shards in (root / "tokens", root / "tokens-eval"):  # built with another tokenizer: rebuild
            made = shards / "manifest.json"
            if made.is_file() and json.loads(made.read_text())["tokenizer"]["hash"] != tok.hash:
                shutil.rmtree(shards)
        prepare_shards(arm_cfg, rank=0)  # train and held-out shards, built here once, before any arm trains
        manifest = json.loads((root / "tokens" / "manifest.json").read_text())
        check_budget(arm.name, manifest, arm.rates, budget, a.max_epochs)
        plans.append(ArmPlan(arm.name, arm_cfg, {"documents": arm_counts[arm.name], "tokens": manifest["tokens"],
                                                 "sources": {k: v["tokens"] for k, v in manifest["sources"].items()}},
                             data_key=digest({"documents": arm_keys[arm.name], "tokenizer": tok.hash})))
    report = {"budget_tokens": budget, "tokenizer": {"path": str(tok.path), "hash": tok.hash},
              "held_out": held_counts.as_dict()}
    return plans, report
