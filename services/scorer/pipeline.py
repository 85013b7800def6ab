"""The scorer's stages as plain functions: label → train → calibrate (scoring at scale is in scoring.py).

Each stage reads and writes files under `scorer.out_dir` (atomically), returns its report as a
dict, writes it as `<stage>_report.json` and sends it to the tracker. The `moelab score` commands
and the benchmark call these; nothing here needs Ray.
"""

from __future__ import annotations

import glob
import logging
import math
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from services.scorer import calibrate as cal
from services.scorer.backbone import LayerwiseBackbone
from services.scorer.cascade import CALIBRATION_FILE, HEADS_FILE, CascadeScorer, build_heads
from services.scorer.features import cached_extract, extract
from services.scorer.heads import HEADS_VERSION
from services.scorer.io import read_docs, write_json_atomic, write_parquet_atomic
from services.scorer.label_cache import LabelCache
from services.scorer.labeling import label_documents
from services.scorer.oracle import make_oracle
from services.scorer.rubrics import RUBRICS, rubric_for
from services.scorer.train import predict, split_indices, train_head

log = logging.getLogger(__name__)
LABELS_FILE = "labels.parquet"
FAILURES_FILE = "label_failures.parquet"


def _tqdm(total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="doc", dynamic_ncols=True)


def input_paths(cfg) -> list[str]:
    """Parquet files to read: `scorer.inputs` globs, else every Parquet under `data.out_dir`."""
    patterns = cfg.scorer.inputs or [str(Path(cfg.data.out_dir) / "**" / "*.parquet")]
    paths = sorted({p for pat in patterns for p in glob.glob(pat, recursive=True)})
    if not paths:
        raise FileNotFoundError(
            f"no Parquet documents match {patterns}; run the data filter first or set scorer.inputs=[...]"
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
        kind = kind_col[i] if kind_col else kinds.get(src, src if src in ("web", "code", "math", "science") else "web")
        docs.append({"id": str(doc_id), "text": text or "", "source": src, "kind": kind})
    return docs


def tracker_run(cfg, stage: str, oracle_name: str | None = None):
    from shared import tracking

    tags = ["scorer", stage]
    if oracle_name:
        tags.append(f"oracle={oracle_name}")
    return tracking.init(config=cfg, name=f"{cfg.name}-score-{stage}", tags=tags)


def label_stage(cfg, docs: list[dict] | None = None, oracle=None) -> dict:
    """Label a seeded sample of `scorer.oracle.sample_size` documents; write labels + failures."""
    ocfg, out = cfg.scorer.oracle, Path(cfg.scorer.out_dir)
    if docs is None:
        docs = docs_from_table(read_docs(input_paths(cfg)), source_kinds(cfg))
    sample = docs if len(docs) <= ocfg.sample_size else random.Random(ocfg.seed).sample(docs, ocfg.sample_size)
    oracle = oracle or make_oracle(ocfg)
    oracle_desc = f"{oracle.name} (stand-in)" if oracle.is_stand_in else oracle.name
    if oracle.is_stand_in:
        log.warning("oracle=heuristic (stand-in): labels come from text statistics, not a language model")
    cache = LabelCache(out / "label_cache.parquet")
    with _tqdm(len(sample), "label") as bar:
        outcome = label_documents(sample, oracle, cache, max_retries=ocfg.max_retries, max_chars=ocfg.max_doc_chars,
                                  progress=bar)
    texts = {d["id"]: d["text"] for d in sample}
    rows = [{**r, "text": texts[r["id"]]} for r in outcome.labels]
    if rows:
        write_parquet_atomic(pa.Table.from_pylist(rows), out / LABELS_FILE)
    write_parquet_atomic(pa.Table.from_pylist(outcome.failures, schema=_failure_schema()), out / FAILURES_FILE)
    report = {"stage": "label", "oracle": oracle_desc, "oracle_model": oracle.model, "documents": len(sample),
              **outcome.summary()}
    report_stage(cfg, "label", report, oracle_desc)
    return report


def _failure_schema() -> pa.Schema:
    return pa.schema([("id", pa.string()), ("kind", pa.string()), ("source", pa.string()), ("rubric", pa.string()),
                      ("raw", pa.string()), ("error", pa.string()), ("attempts", pa.int64())])


def report_stage(cfg, stage: str, report: dict, oracle_desc: str | None = None) -> None:
    write_json_atomic(report, Path(cfg.scorer.out_dir) / f"{stage}_report.json")
    run = tracker_run(cfg, stage, oracle_desc)
    flat = {k: v for k, v in _flatten(report).items() if isinstance(v, int | float) and not isinstance(v, bool)}
    run.log(flat, step=0)
    run.event("scorer", f"{stage} finished", **{k: v for k, v in report.items() if isinstance(v, str)})
    run.finish()


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "/"))
        else:
            out[key] = v
    return out


def _load_labels(cfg) -> pa.Table:
    path = Path(cfg.scorer.out_dir) / LABELS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; run `moelab score label CONFIG` first")
    return pq.read_table(path)


def _features(cfg, bb: LayerwiseBackbone, rubric: str, ids: list[str], texts: list[str], layers) -> dict:
    meta = {"backbone": cfg.scorer.backbone, "probe_layer": layers[0], "judge_layer": layers[1],
            "max_tokens": cfg.scorer.heads.max_tokens, "contents": "pooled+seqs+probe_seqs"}
    path = Path(cfg.scorer.out_dir) / "features" / f"{rubric}.pt"

    def compute():
        with _tqdm(len(texts), f"backbone {rubric}") as bar:
            return extract(bb, texts, layers[0], layers[1], cfg.scorer.heads.max_tokens,
                           cfg.scorer.scoring.micro_batch, bar)

    return cached_extract(path, meta, ids, compute)


def _by_rubric(labels: pa.Table) -> dict[str, dict]:
    groups: dict[str, dict] = {}
    for row in labels.to_pylist():
        name = row["rubric"].rsplit("-v", 1)[0]
        g = groups.setdefault(name, {"ids": [], "texts": [], "y": [], "source": [], "kind": []})
        g["ids"].append(row["id"])
        g["texts"].append(row["text"])
        g["y"].append(np.asarray(row["scores"]) / RUBRICS[name].max_score)
        g["source"].append(row["source"])
        g["kind"].append(row["kind"])
    return groups


def train_stage(cfg) -> dict:
    """Train a Probe and a Judge per rubric on cached backbone features; write heads.pt."""
    scfg, hcfg = cfg.scorer, cfg.scorer.heads
    bb = LayerwiseBackbone.load(scfg.backbone, dtype="float32")
    layers = scfg.resolved_layers(bb.n_layers)
    blob = {"meta": {"heads_version": HEADS_VERSION, "backbone": scfg.backbone, "probe_layer": layers[0],
                     "judge_layer": layers[1],
                     "max_tokens": hcfg.max_tokens, "width": bb.width}, "rubrics": {}}
    report: dict = {"stage": "train", "probe_layer": layers[0], "judge_layer": layers[1], "n_layers": bb.n_layers,
                    "loss": "mse on scores/max", "rubrics": {}}
    for name, g in _by_rubric(_load_labels(cfg)).items():
        if len(g["ids"]) < 10:
            raise ValueError(f"rubric {name}: only {len(g['ids'])} labelled documents; label at least 10 per rubric")
        feats = _features(cfg, bb, name, g["ids"], g["texts"], layers)
        y = np.stack(g["y"]).astype(np.float32)
        split = split_indices(len(y), hcfg.val_fraction, hcfg.test_fraction, hcfg.seed)
        entry = {"dims": list(RUBRICS[name].dims), "max_score": RUBRICS[name].max_score,
                 "judge_cfg": {"dim": hcfg.judge_dim, "layers": hcfg.judge_layers, "heads": hcfg.judge_heads},
                 "split": {k: [g["ids"][i] for i in v] for k, v in split.items()}}
        rep = {"features_cached": bool(feats["cached"]), "n": len(y)}
        with _tqdm(0, f"train {name}") as bar:
            for kind in ("probe", "judge"):
                res = train_head(kind, feats, y, split["train"], split["val"], hcfg, bb.width, bar)
                entry[kind] = res.head.state_dict()
                rep[kind] = {"best_epoch": res.best_epoch, "epochs_run": res.epochs_run,
                             "best_val_mse": res.best_val_loss}
        blob["rubrics"][name] = entry
        report["rubrics"][name] = rep
    path = Path(scfg.out_dir) / HEADS_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(blob, tmp)
    tmp.replace(path)
    report_stage(cfg, "train", report)
    return report


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
        docs = docs_from_table(read_docs(input_paths(cfg)), source_kinds(cfg))
    docs = [d for d in docs if d["id"] not in labelled_ids]
    return docs if len(docs) <= n else random.Random(cfg.scorer.oracle.seed + 1).sample(docs, n)


def _score_both_heads(bb, heads, layers, max_tokens, docs: list[dict], micro_batch: int) -> dict[str, np.ndarray]:
    """Probe and Judge quality of every document (a cascade with no τ_drop skips nothing)."""
    sc = CascadeScorer(bb, heads, layers[0], layers[1], max_tokens, micro_batch=micro_batch)
    probe_q, judge_q = [], []
    chunk = 8 * micro_batch
    with _tqdm(len(docs), "calibrate") as bar:
        for start in range(0, len(docs), chunk):
            part = docs[start : start + chunk]
            res = sc.score([d["text"] for d in part], [d["kind"] for d in part], [d["source"] for d in part])
            probe_q.append(res["probe_quality"])
            judge_q.append(res["judge_quality"])
            bar.update(len(part))
    return {"probe": np.concatenate(probe_q), "judge": np.concatenate(judge_q)}


def calibrate_stage(cfg, docs: list[dict] | None = None) -> dict:
    """Fit τ_keep per source and τ_drop per rubric on unlabelled documents; report on the held-out split.

    The thresholds need only the heads' scores, so they are fitted on `calibration.sample_size`
    documents the oracle never labelled (or, when none are left, on the labelled held-out split);
    agreement with the oracle, keep rates, keeper loss and the compute saved are all measured on
    the labelled held-out split. `docs` (dicts with id, text, source, kind) replaces the inputs
    the unlabelled sample is drawn from.
    """
    scfg = cfg.scorer
    out = Path(scfg.out_dir)
    blob = torch.load(out / HEADS_FILE, weights_only=False)
    meta = blob["meta"]
    bb = LayerwiseBackbone.load(meta["backbone"], dtype="float32")
    heads = build_heads(blob, bb.width)
    layers = (meta["probe_layer"], meta["judge_layer"])
    labels = _load_labels(cfg)
    held: dict[str, dict] = {}  # per rubric: held-out predictions and what the report needs
    for name, g in _by_rubric(labels).items():
        entry = blob["rubrics"][name]
        pos = {doc_id: i for i, doc_id in enumerate(g["ids"])}
        test = np.array([pos[i] for i in entry["split"]["test"]])
        train = np.array([pos[i] for i in entry["split"]["train"]])
        feats = _features(cfg, bb, name, g["ids"], g["texts"], layers)
        y = np.stack(g["y"])
        probe, judge = heads[name]
        lengths = np.array([len(t) for t in g["texts"]], dtype=np.float64)
        held[name] = {"test": test, "y": y[test], "texts": [g["texts"][i] for i in test],
                      "p_pred": predict(probe, "probe", feats, test), "j_pred": predict(judge, "judge", feats, test),
                      "l_pred": cal.length_baseline(lengths[train], y[train], lengths[test]),
                      "sources": np.array(g["source"])[test], "kinds": np.array(g["kind"])[test]}
    for h in held.values():
        h["pq"], h["jq"] = h["p_pred"].clip(0, 1).mean(1), h["j_pred"].clip(0, 1).mean(1)

    docs = calibration_sample(cfg, set(labels.column("id").to_pylist()), docs)
    if docs:
        scores = _score_both_heads(bb, heads, layers, meta["max_tokens"], docs, scfg.scoring.micro_batch)
        fit_args = (scores["judge"], scores["probe"], [d["source"] for d in docs], [d["kind"] for d in docs],
                    [rubric_for(d["kind"]).name for d in docs])
        fitted_on = f"{len(docs)} unlabelled documents"
    else:
        log.warning("no unlabelled documents for calibration: fitting the thresholds on the labelled held-out split, "
                    "so the report's keep rates and keeper loss are in-sample")
        cat = lambda key: np.concatenate([h[key] for h in held.values()])  # noqa: E731
        fit_args = (cat("jq"), cat("pq"), cat("sources"), cat("kinds"),
                    np.concatenate([[name] * len(h["test"]) for name, h in held.items()]))
        fitted_on = "the labelled held-out split (in-sample: no unlabelled documents left)"
    ccfg = scfg.calibration
    th = cal.fit_thresholds(*fit_args, keep_rate=ccfg.keep_rate, max_loss=ccfg.max_keeper_loss)
    calib_keep = fit_args[0] >= np.array([th.keep_threshold(s, k) for s, k in zip(fit_args[2], fit_args[3], strict=True)])

    report: dict = {"stage": "calibrate", "rubrics": {}, "keep_rate": {},
                    "calibration": {"fitted_on": fitted_on, "documents_per_source": th.docs_per_source,
                                    "keepers_per_rubric": th.keepers_per_rubric,
                                    "expected_keeper_loss": {r: cal.expected_keeper_loss(n, ccfg.max_keeper_loss)
                                                             for r, n in th.keepers_per_rubric.items()},
                                    "keeper_loss_p90": {r: cal.expected_keeper_loss(n, ccfg.max_keeper_loss, 0.9)
                                                        for r, n in th.keepers_per_rubric.items()}}}
    test_docs: list[tuple[str, str, str]] = []
    for name, h in held.items():
        rub = RUBRICS[name]
        sp = {k: cal.per_dim_spearman(h[key], h["y"], rub.dims) for k, key in
              (("probe", "p_pred"), ("judge", "j_pred"), ("length_baseline", "l_pred"))}
        oq = h["y"].mean(1)
        keepers = h["jq"] >= np.array([th.keep_threshold(s, k) for s, k in zip(h["sources"], h["kinds"], strict=True)])
        oracle_keep = np.zeros(len(oq), dtype=bool)
        for src in sorted(set(h["sources"].tolist())):
            m = h["sources"] == src
            rate = ccfg.keep_rate(h["kinds"][m][0])
            oracle_keep[m] = oq[m] >= cal.tau_for_keep_rate(oq[m], rate)
            in_fit = np.asarray(fit_args[2]) == src
            report["keep_rate"][src] = {"target": rate, "realised": float(keepers[m].mean()), "n": int(m.sum()),
                                        "realised_calibration": float(calib_keep[in_fit].mean()) if in_fit.any() else None}
        skipped = h["pq"] < th.tau_drop.get(name, -math.inf)
        report["rubrics"][name] = {
            "n_test": len(h["test"]),
            "spearman": sp,
            "mean_spearman": {k: float(np.mean(list(v.values()))) for k, v in sp.items()},
            "spearman_quality": {"probe": cal.spearman(h["pq"], oq), "judge": cal.spearman(h["jq"], oq),
                                 "length_baseline": cal.spearman(h["l_pred"].mean(1), oq)},
            "mae_per_class_judge": cal.mae_per_class(h["j_pred"], h["y"], rub.max_score),
            "mae_per_class_probe": cal.mae_per_class(h["p_pred"], h["y"], rub.max_score),
            "f1_at_keep": cal.f1(keepers, oracle_keep),
            "tau_drop": th.tau_drop.get(name, -math.inf),
            "judge_passes_skipped": float(skipped.mean()),
            "keeper_loss": float((skipped & keepers).sum() / max(1, keepers.sum())),
        }
        test_docs += list(zip(h["texts"], h["kinds"].tolist(), h["sources"].tolist(), strict=True))
    calib = {"tau_keep": th.tau_keep, "tau_drop": th.tau_drop, "max_keeper_loss": ccfg.max_keeper_loss}
    write_json_atomic(calib, out / CALIBRATION_FILE)
    report["compute"] = measure_saving(bb, heads, layers, meta["max_tokens"], calib, test_docs,
                                       scfg.scoring.micro_batch)
    report["tau_keep"], report["tau_drop"] = th.tau_keep, th.tau_drop
    _plot(report, out / "calibration.png")
    report_stage(cfg, "calibrate", report)
    return report


def measure_saving(bb, heads, layers, max_tokens, calib, docs, micro_batch) -> dict:
    """Run the cascade and the Judge alone over the same documents; compare counted backbone FLOPs."""
    texts, kinds, sources = (list(x) for x in zip(*docs, strict=True)) if docs else ([], [], [])
    sc = CascadeScorer(bb, heads, layers[0], layers[1], max_tokens, calib["tau_drop"], calib["tau_keep"], micro_batch)
    flops = {}
    results = {}
    for mode in ("judge", "cascade"):
        bb.reset_counters()
        results[mode] = sc.score(texts, kinds, sources, mode=mode)
        flops[mode] = sum(bb.layer_flops)
    jk, ck = results["judge"]["keep"], results["cascade"]["keep"]
    return {"flops_judge_only": flops["judge"], "flops_cascade": flops["cascade"],
            "flops_saved": 1.0 - flops["cascade"] / flops["judge"] if flops["judge"] else 0.0,
            "judge_passes_skipped": float(results["cascade"]["judge_skipped"].mean()) if texts else 0.0,
            "keeper_loss": float((jk & ~ck).sum() / max(1, jk.sum())), "n": len(texts)}


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["rubrics"])
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(5 * max(1, len(names)), 3.5), squeeze=False)
    for ax, name in zip(axes[0], names, strict=False):
        ms = report["rubrics"][name]["mean_spearman"]
        ax.bar(list(ms), [ms[k] for k in ms], color=["#4c72b0", "#55a868", "#c44e52"])
        ax.set_title(f"{name}: mean Spearman vs oracle (held out)")
        ax.set_ylim(min(0.0, min(ms.values())), 1.0)
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)
