"""The scorer's stages as plain functions: label → train → calibrate (scoring at scale is in scoring.py).

Each stage reads and writes files under `scorer.out_dir` (atomically), returns its report as a
dict, writes it as `<stage>_report.json` and sends it to the tracker. The `moelab score` commands
and the benchmarks call these; nothing here needs Ray. Calibration lives in calibrate_stage.py.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from services.scorer.backbone import LayerwiseBackbone
from services.scorer.calibrate_stage import calibrate_stage
from services.scorer.cascade import HEADS_FILE
from services.scorer.degrade import can_carry, degrade, kinds_for
from services.scorer.heads import HEADS_VERSION
from services.scorer.io import write_parquet_atomic
from services.scorer.label_cache import LabelCache
from services.scorer.labeling import label_documents
from services.scorer.oracle import make_oracle
from services.scorer.rubrics import RUBRICS
from services.scorer.stage_support import (
    FAILURES_FILE,
    LABELS_FILE,
    backbone_features,
    input_docs,
    labels_by_rubric,
    load_labels,
    progress_bar,
    report_stage,
    windowing_meta,
)
from services.scorer.train import source_pairs, split_indices, train_head
from services.scorer.windows import WindowReader

__all__ = ["calibrate_stage", "degraded_copies", "label_stage", "train_stage"]
log = logging.getLogger(__name__)


def degraded_copies(sample: list[dict], fraction: float, seed: int) -> tuple[list[dict], dict[str, int]]:
    """`round(fraction · len(sample))` degraded copies of sampled documents (degrade.py), kinds in turn.

    Each copy has id `<id>~<kind>`, `group` = its source document's id (train.py keeps a group in
    one split) and `degradation` = the kind. Kinds are dealt to the documents in a seeded order;
    a document that cannot carry its kind (`degrade.can_carry`: a shuffle needs sentences with an
    order to lose) trades kinds with the next document that can carry it and whose own kind it
    can take, so every kind keeps its share of the copies and lands where it damages something.
    Returns the copies and the skips by reason: `unchanged` (the degradation left the text as it
    was, e.g. collapsing a one-line file) and `no_carrier` (no document left could take the kind).
    """
    rng = random.Random(seed + 7)
    n = int(round(fraction * len(sample)))
    order = rng.sample(range(len(sample)), len(sample)) if sample else []
    plan = []
    for i in range(n):
        doc = sample[order[i % len(order)]]
        options = kinds_for(doc["kind"])
        plan.append([doc, options[(i + i // len(order)) % len(options)]])
    skipped = {"unchanged": 0, "no_carrier": 0}
    copies = []
    for doc, kind in _dealt_to_carriers(plan):
        if kind is None:
            skipped["no_carrier"] += 1
            continue
        text = degrade(doc["text"], kind, random.Random(f"{seed}:{doc['id']}:{kind}"))
        if text == doc["text"] or not text.strip():
            skipped["unchanged"] += 1
            continue
        copies.append({**doc, "id": f"{doc['id']}~{kind}", "text": text, "group": doc["id"], "degradation": kind})
    return copies, skipped


def _dealt_to_carriers(plan: list[list]) -> list[list]:
    """`plan` ([document, kind] in dealing order) with kinds traded so that each document can carry
    its kind; a kind nobody left can carry becomes None. A trade never gives a document a kind twice."""
    carries: dict[tuple[str, str], bool] = {}

    def ok(doc: dict, kind: str) -> bool:
        key = (doc["id"], kind)
        if key not in carries:
            carries[key] = kind in kinds_for(doc["kind"]) and can_carry(doc["text"], kind)
        return carries[key]

    planned = {(d["id"], k) for d, k in plan}
    for p, (doc, kind) in enumerate(plan):
        if ok(doc, kind):
            continue
        for q in [*range(p + 1, len(plan)), *range(p)]:
            other, theirs = plan[q]
            if (theirs != kind and ok(other, kind) and ok(doc, theirs)
                    and (other["id"], kind) not in planned and (doc["id"], theirs) not in planned):
                planned -= {(doc["id"], kind), (other["id"], theirs)}
                planned |= {(doc["id"], theirs), (other["id"], kind)}
                plan[p][1], plan[q][1] = theirs, kind
                break
        else:
            plan[p][1] = None
    return plan


def label_stage(cfg, docs: list[dict] | None = None, oracle=None) -> dict:
    """Label a seeded sample of `scorer.oracle.sample_size` documents (plus degraded copies of some,
    `oracle.augment_fraction`); write labels + failures."""
    ocfg, out = cfg.scorer.oracle, Path(cfg.scorer.out_dir)
    if docs is None:
        docs = input_docs(cfg)
    sample = docs if len(docs) <= ocfg.sample_size else random.Random(ocfg.seed).sample(docs, ocfg.sample_size)
    sample = [{**d, "group": d["id"], "degradation": ""} for d in sample]
    copies, skipped = degraded_copies(sample, ocfg.augment_fraction, ocfg.seed)
    to_label = sample + copies
    oracle = oracle or make_oracle(ocfg)
    oracle_desc = f"{oracle.name} (stand-in)" if oracle.is_stand_in else oracle.name
    if oracle.is_stand_in:
        log.warning("oracle=heuristic (stand-in): labels come from text signals, not a language model")
    cache = LabelCache(out / "label_cache.parquet")
    with progress_bar(len(to_label), "label") as bar:
        outcome = label_documents(to_label, oracle, cache, max_retries=ocfg.max_retries, max_chars=ocfg.max_doc_chars,
                                  progress=bar)
    extra = {d["id"]: (d["text"], d["group"], d["degradation"]) for d in to_label}
    rows = [{**r, "text": extra[r["id"]][0], "group": extra[r["id"]][1], "degradation": extra[r["id"]][2]}
            for r in outcome.labels]
    if rows:
        write_parquet_atomic(pa.Table.from_pylist(rows), out / LABELS_FILE)
    write_parquet_atomic(pa.Table.from_pylist(outcome.failures, schema=_failure_schema()), out / FAILURES_FILE)
    report = {"stage": "label", "oracle": oracle_desc, "oracle_model": oracle.model, "documents": len(sample),
              "degraded_copies": len(copies), "degraded_unchanged_skipped": skipped["unchanged"],
              "degraded_no_carrier_skipped": skipped["no_carrier"], **outcome.summary()}
    report_stage(cfg, "label", report, oracle_desc)
    return report


def _failure_schema() -> pa.Schema:
    return pa.schema([("id", pa.string()), ("kind", pa.string()), ("source", pa.string()), ("rubric", pa.string()),
                      ("raw", pa.string()), ("error", pa.string()), ("attempts", pa.int64())])


def heads_meta(cfg, layers, width: int) -> dict:
    return {"heads_version": HEADS_VERSION, **windowing_meta(cfg, layers), "width": width}


def train_stage(cfg) -> dict:
    """Train a Probe and a Judge per rubric on cached backbone features; write heads.pt."""
    scfg, hcfg = cfg.scorer, cfg.scorer.heads
    bb = LayerwiseBackbone.load(scfg.backbone, dtype="float32")
    layers = scfg.resolved_layers(bb.n_layers)
    blob = {"meta": heads_meta(cfg, layers, bb.width), "rubrics": {}}
    reader = WindowReader.from_meta(bb.tokenizer, blob["meta"])
    report: dict = {"stage": "train", "probe_layer": layers[0], "judge_layer": layers[1], "n_layers": bb.n_layers,
                    "loss": "mse on scores/max", "rubrics": {}}
    for name, g in labels_by_rubric(load_labels(cfg)).items():
        if len(set(g["group"])) < 10:
            raise ValueError(f"rubric {name}: only {len(set(g['group']))} labelled documents; label at least 10 per rubric")
        feats = backbone_features(cfg, bb, reader, name, g, layers)
        y = np.stack(g["y"]).astype(np.float32)
        split = split_indices(len(y), hcfg.val_fraction, hcfg.test_fraction, hcfg.seed, g["group"])
        entry = {"dims": list(RUBRICS[name].dims), "max_score": RUBRICS[name].max_score,
                 "judge_cfg": {"dim": hcfg.judge_dim, "layers": hcfg.judge_layers, "heads": hcfg.judge_heads,
                               "pool": hcfg.judge_pool, "readout_queries": hcfg.judge_readout_queries},
                 "split": {k: [g["ids"][i] for i in v] for k, v in split.items()}}
        rep = {"features_cached": bool(feats["cached"]), "n": len(y),
               "read_fraction_mean": float(feats["coverage"].mean())}
        # the epoch budget of both heads; a head that stops early jumps to its budget's end
        with progress_bar(2 * hcfg.members * hcfg.max_epochs, f"train {name}", unit="epoch") as bar:
            pairs = tuple(source_pairs(g["group"], g["degradation"], split[k]) for k in ("train", "val"))
            rep["pairs"] = {"train": len(pairs[0]), "val": len(pairs[1])}
            for kind in ("probe", "judge"):
                runs = [train_head(kind, feats, y, split["train"], split["val"], hcfg, bb.width, bar, pairs, member=k)
                        for k in range(hcfg.members)]
                # one head is stored as its state dict; an ensemble as the list of its members'
                entry[kind] = runs[0].head.state_dict() if len(runs) == 1 else [r.head.state_dict() for r in runs]
                rep[kind] = {"best_epoch": [r.best_epoch for r in runs], "epochs_run": [r.epochs_run for r in runs],
                             "best_val_mse": [r.best_val_loss for r in runs]}
                if len(runs) == 1:
                    rep[kind] = {k: v[0] for k, v in rep[kind].items()}
        blob["rubrics"][name] = entry
        report["rubrics"][name] = rep
    path = Path(scfg.out_dir) / HEADS_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(blob, tmp)
    tmp.replace(path)
    report_stage(cfg, "train", report)
    return report
