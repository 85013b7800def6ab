"""What the scorer's stages share: reading inputs and labels, backbone features, reports to disk and tracker.

Each stage reads and writes files under `scorer.out_dir` (atomically), returns its report as a
dict, writes it as `<stage>_report.json` and sends it to the tracker (`report_stage`).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from services.scorer.features import cached_extract, extract
from services.scorer.io import read_docs, write_json_atomic
from services.scorer.rubrics import RUBRICS, kind_of_source
from shared.data.stage_outputs import resolve_documents

LABELS_FILE = "labels.parquet"
FAILURES_FILE = "label_failures.parquet"


def progress_bar(total: int, desc: str, unit: str = "doc"):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True)


def input_paths(cfg) -> list[str]:
    """Parquet files to read: `scorer.inputs` (globs, or folders with a manifest), else exactly the
    shards the data filter's manifest in `data.out_dir` declares, never its work files."""
    paths = [str(p) for p in resolve_documents(list(cfg.scorer.inputs), cfg.data.out_dir)]
    if not paths:
        raise FileNotFoundError(
            f"no Parquet documents match scorer.inputs={list(cfg.scorer.inputs)}; fix the globs or leave scorer.inputs "
            "empty to read the data filter's declared output"
        )
    return paths


def source_kinds(cfg) -> dict[str, str]:
    """Source name → kind (web/code/math/science) from `data.inputs`."""
    return {s.name: s.kind for s in cfg.data.inputs}


def docs_from_table(table: pa.Table, kinds: dict[str, str]) -> list[dict]:
    cols = table.column_names
    ids, texts = table.column("id").to_pylist(), table.column("text").to_pylist()
    sources = table.column("source").to_pylist() if "source" in cols else ["web"] * len(ids)
    kind_col = table.column("kind").to_pylist() if "kind" in cols else None
    docs = []
    for i, (doc_id, text, src) in enumerate(zip(ids, texts, sources, strict=True)):
        kind = kind_col[i] if kind_col else kind_of_source(src, kinds)
        docs.append({"id": str(doc_id), "text": text or "", "source": src, "kind": kind})
    return docs


def input_docs(cfg) -> list[dict]:
    return docs_from_table(read_docs(input_paths(cfg)), source_kinds(cfg))


def tracker_run(cfg, stage: str, oracle_name: str | None = None):
    from shared import tracking

    tags = ["scorer", stage]
    if oracle_name:
        tags.append(f"oracle={oracle_name}")
    return tracking.init(config=cfg, name=f"{cfg.name}-score-{stage}", tags=tags)


def report_stage(cfg, stage: str, report: dict, oracle_desc: str | None = None, log_extra=None) -> None:
    """Write `<stage>_report.json` and send its numbers (and `log_extra(run)`, if given) to the tracker."""
    write_json_atomic(report, Path(cfg.scorer.out_dir) / f"{stage}_report.json")
    run = tracker_run(cfg, stage, oracle_desc)
    flat = {k: v for k, v in flatten(report).items() if isinstance(v, int | float) and not isinstance(v, bool)}
    run.log(flat, step=0)
    if log_extra is not None:
        log_extra(run)
    run.event("scorer", f"{stage} finished", **{k: v for k, v in report.items() if isinstance(v, str)})
    run.finish()


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "/"))
        else:
            out[key] = v
    return out


def load_labels(cfg) -> pa.Table:
    path = Path(cfg.scorer.out_dir) / LABELS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; run `moelab score label CONFIG` first")
    return pq.read_table(path)


def labels_by_rubric(labels: pa.Table) -> dict[str, dict]:
    """Labelled documents per rubric: ids, texts, targets (scores / max), sources, kinds, groups, degradations."""
    groups: dict[str, dict] = {}
    for row in labels.to_pylist():
        name = row["rubric"].rsplit("-v", 1)[0]
        g = groups.setdefault(name, {"ids": [], "texts": [], "y": [], "source": [], "kind": [], "group": [],
                                     "degradation": []})
        g["ids"].append(row["id"])
        g["texts"].append(row["text"])
        g["y"].append(np.asarray(row["scores"]) / RUBRICS[name].max_score)
        g["source"].append(row["source"])
        g["kind"].append(row["kind"])
        g["group"].append(row.get("group") or row["id"])
        g["degradation"].append(row.get("degradation") or "")
    return groups


def windowing_meta(cfg, layers) -> dict:
    """The backbone, layers and windowing that features and heads are tied to (WindowReader.from_meta reads it)."""
    h = cfg.scorer.heads
    return {"backbone": cfg.scorer.backbone, "probe_layer": layers[0], "judge_layer": layers[1],
            "max_tokens": h.max_tokens, "window_tokens": h.window_tokens, "window_policy": h.window_policy,
            "layout_marks": h.layout_marks, "probe_windows": h.probe_windows, "skip_repeats": h.skip_repeats}


def features_meta(cfg, layers) -> dict:
    return {**windowing_meta(cfg, layers),
            "contents": "windows:pooled+seqs+probe_seqs+buckets+repeated+doc_stats(length,repeated,unfinished,cohesion,heading)"}


def backbone_features(cfg, bb, reader, rubric: str, g: dict, layers) -> dict:
    """Cached (features/<rubric>.pt) backbone features of a rubric's labelled documents."""
    path = Path(cfg.scorer.out_dir) / "features" / f"{rubric}.pt"

    def compute():
        with progress_bar(len(g["texts"]), f"backbone {rubric}") as bar:
            return extract(bb, reader, g["texts"], g["kind"], layers[0], layers[1], cfg.scorer.scoring.micro_batch, bar)

    return cached_extract(path, features_meta(cfg, layers), g["ids"], g["texts"], compute)


def calibration_sample(cfg, labelled_ids: set[str], docs: list[dict] | None = None) -> list[dict]:
    """A seeded sample of `scorer.calibration.sample_size` input documents (or of `docs`) the oracle
    did not label.

    Labelled documents stay out: the heads were trained on most of them, so their scores are not
    those of the documents the thresholds will meet.
    """
    n = cfg.scorer.calibration.sample_size
    if n == 0:
        return []
    if docs is None:
        docs = input_docs(cfg)
    docs = [d for d in docs if d["id"] not in labelled_ids]
    return docs if len(docs) <= n else random.Random(cfg.scorer.oracle.seed + 1).sample(docs, n)


QUICK_OVERRIDES = ("scorer.oracle.sample_size=300", "scorer.heads.max_epochs=2", "scorer.calibration.sample_size=300")


def benchmark_recipe(path: str, overrides: list[str], quick: bool):
    """A recipe as the scorer benchmarks run it: tracker off, `QUICK_OVERRIDES` added for a smoke run.
    Returns the config and the overrides applied (reported in the benchmark's JSON)."""
    from shared.config import load_config

    applied = list(overrides) + (list(QUICK_OVERRIDES) if quick else [])
    cfg = load_config(path, applied)
    cfg.tracker.mode = "disabled"
    return cfg, applied
