"""The calibrate stage: fit the thresholds, report agreement on held-out labels, plot and log it.

- `held_out`: Probe, Judge and length-baseline predictions on each rubric's labelled test split
  (documents neither head trained on; degraded copies stay with their source document).
- `fit`: τ_keep per source, τ_drop and τ_accept per rubric on `calibration.sample_size` documents the
  oracle never labelled (or, when none are left, on the held-out split, with a warning that the
  report is then in-sample); the thresholds need only the heads' scores, not labels.
- `build_report`: agreement with the oracle, keep rates, keeper loss, pairwise accuracy on
  held-out (clean, degraded copy) pairs, and backbone FLOPs of the cascade vs the Judge alone.
- `plot` writes calibration.png; the tracker gets the report's numbers and one reliability
  diagram per rubric and head (`run.log_calibration`: predicted quality vs the oracle's).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from services.scorer import calibrate as cal
from services.scorer.backbone import LayerwiseBackbone
from services.scorer.calibration_warnings import attach_warnings
from services.scorer.cascade import CALIBRATION_FILE, HEADS_FILE, CascadeScorer, build_heads, reader_for
from services.scorer.io import write_json_atomic
from services.scorer.rubrics import RUBRICS, rubric_for
from services.scorer.stage_support import (
    backbone_features,
    calibration_sample,
    labels_by_rubric,
    load_labels,
    progress_bar,
    report_stage,
)
from services.scorer.train import predict

log = logging.getLogger(__name__)


@dataclass
class HeldOut:
    """One rubric's labelled test split: oracle targets and every head's predictions, per document."""

    y: np.ndarray  # [n, dims] oracle scores / max
    probe_pred: np.ndarray
    judge_pred: np.ndarray
    length_pred: np.ndarray
    texts: list[str]
    sources: np.ndarray
    kinds: np.ndarray
    groups: np.ndarray
    degradation: np.ndarray  # "" for clean documents

    @property
    def probe_q(self) -> np.ndarray:
        return self.probe_pred.clip(0, 1).mean(1)

    @property
    def judge_q(self) -> np.ndarray:
        return self.judge_pred.clip(0, 1).mean(1)

    @property
    def clean(self) -> np.ndarray:
        return self.degradation == ""


@dataclass
class Fit:
    """The fitted thresholds and the per-document scores and sources they were fitted on."""

    thresholds: cal.Thresholds
    fitted_on: str
    judge_q: np.ndarray
    sources: np.ndarray
    kinds: np.ndarray

    def keeps(self, judge_q: np.ndarray, sources, kinds) -> np.ndarray:
        tau = np.array([self.thresholds.keep_threshold(s, k) for s, k in zip(sources, kinds, strict=True)])
        return judge_q >= tau


def held_out(cfg, bb, reader, blob: dict, heads: dict, layers) -> dict[str, HeldOut]:
    out = {}
    for name, g in labels_by_rubric(load_labels(cfg)).items():
        split = blob["rubrics"][name]["split"]
        pos = {doc_id: i for i, doc_id in enumerate(g["ids"])}
        test, train = (np.array([pos[i] for i in split[k]], dtype=np.int64) for k in ("test", "train"))
        feats = backbone_features(cfg, bb, reader, name, g, layers)
        y = np.stack(g["y"])
        probe, judge = heads[name]
        lengths = np.array([len(t) for t in g["texts"]], dtype=np.float64)
        src, kinds, groups, degradation = (np.array(g[k])[test] for k in ("source", "kind", "group", "degradation"))
        out[name] = HeldOut(y[test], predict(probe, "probe", feats, test), predict(judge, "judge", feats, test),
                            cal.length_baseline(lengths[train], y[train], lengths[test]),
                            [g["texts"][i] for i in test], src, kinds, groups, degradation)
    return out


def _score_both_heads(scorer: CascadeScorer, docs: list[dict]) -> dict[str, np.ndarray]:
    """Probe and Judge quality of every document (a cascade with no τ_drop skips nothing)."""
    probe_q, judge_q = [], []
    chunk = 8 * scorer.micro_batch
    with progress_bar(len(docs), "calibrate") as bar:
        for start in range(0, len(docs), chunk):
            part = docs[start : start + chunk]
            res = scorer.score([d["text"] for d in part], [d["kind"] for d in part], [d["source"] for d in part])
            probe_q.append(res["probe_quality"])
            judge_q.append(res["judge_quality"])
            bar.update(len(part))
    return {"probe": np.concatenate(probe_q), "judge": np.concatenate(judge_q)}


def fit(cfg, scorer: CascadeScorer, held: dict[str, HeldOut], docs: list[dict]) -> Fit:
    """τ_keep per source, τ_drop and τ_accept per rubric on the unlabelled `docs` (or the clean held-out split)."""
    ccfg = cfg.scorer.calibration
    if docs:
        scores = _score_both_heads(scorer, docs)
        args = (scores["judge"], scores["probe"], np.array([d["source"] for d in docs]),
                np.array([d["kind"] for d in docs]), np.array([rubric_for(d["kind"]).name for d in docs]))
        fitted_on = f"{len(docs)} unlabelled documents"
    else:
        log.warning("no unlabelled documents for calibration: fitting the thresholds on the labelled held-out split, "
                    "so the report's keep rates and keeper loss are in-sample")
        cat = lambda f: np.concatenate([f(h)[h.clean] for h in held.values()])  # noqa: E731
        args = (cat(lambda h: h.judge_q), cat(lambda h: h.probe_q), cat(lambda h: h.sources), cat(lambda h: h.kinds),
                np.concatenate([[name] * int(h.clean.sum()) for name, h in held.items()]))
        fitted_on = "the labelled held-out split (in-sample: no unlabelled documents left)"
    th = cal.fit_thresholds(*args, keep_rate=ccfg.keep_rate, max_loss=ccfg.max_keeper_loss,
                            confidence=ccfg.keeper_loss_confidence, scope=ccfg.tau_drop_scope,
                            max_false_keep=ccfg.max_false_keep)
    return Fit(th, fitted_on, args[0], args[2], args[3])


def pair_accuracy(q: np.ndarray, h: HeldOut) -> dict[str, float]:
    """Per degradation kind: the fraction of held-out (clean, degraded copy) pairs the scores order
    right (ties are errors)."""
    clean = {g: q[i] for i, g in enumerate(h.groups) if h.clean[i]}
    hits: dict[str, list[bool]] = {}
    for i, kind in enumerate(h.degradation):
        if kind and h.groups[i] in clean:
            hits.setdefault(str(kind), []).append(bool(clean[h.groups[i]] > q[i]))
    return {k: float(np.mean(v)) for k, v in sorted(hits.items())}


def _source_keep_rates(h: HeldOut, f: Fit, ccfg, keepers: np.ndarray, oracle_q: np.ndarray) -> tuple[dict, np.ndarray]:
    """Per source of a rubric's clean held-out documents: the target keep rate, the rate the fitted
    τ_keep realises there and on the calibration documents; and which documents the oracle keeps at
    the same rate (the reference the F1 at keep is measured against)."""
    src, kinds = h.sources[h.clean], h.kinds[h.clean]
    rates, oracle_keep = {}, np.zeros(len(oracle_q), dtype=bool)
    for s in sorted(set(src.tolist())):
        m = src == s
        rate = ccfg.keep_rate(kinds[m][0])
        oracle_keep[m] = oracle_q[m] >= cal.tau_for_keep_rate(oracle_q[m], rate)
        in_fit = f.sources == s
        rates[s] = {"target": rate, "realised": float(keepers[m].mean()), "n": int(m.sum()),
                    "realised_calibration": float(f.keeps(f.judge_q[in_fit], f.sources[in_fit], f.kinds[in_fit]).mean())
                    if in_fit.any() else None}
    return rates, oracle_keep


def _rubric_report(name: str, h: HeldOut, f: Fit, ccfg) -> tuple[dict, dict]:
    """One rubric's agreement with the oracle on its clean held-out documents, and its sources' keep rates."""
    rub, c = RUBRICS[name], h.clean
    y, pp, jp, lp = h.y[c], h.probe_pred[c], h.judge_pred[c], h.length_pred[c]
    pq_, jq_, src, kinds = h.probe_q[c], h.judge_q[c], h.sources[c], h.kinds[c]
    sp = {k: cal.per_dim_spearman(pred, y, rub.dims) for k, pred in
          (("probe", pp), ("judge", jp), ("length_baseline", lp))}
    oq = y.mean(1)
    keepers = f.keeps(jq_, src, kinds)
    keep_rates, oracle_keep = _source_keep_rates(h, f, ccfg, keepers, oq)
    dropped = cal.drop_mask(f.thresholds, pq_, src, kinds, [name] * len(pq_))
    accepted = cal.accept_mask(f.thresholds, pq_, src, kinds, [name] * len(pq_))
    skipped = dropped | accepted
    return {
        "n_test": int(c.sum()), "n_test_degraded": int((~c).sum()),
        "spearman": sp,
        "mean_spearman": {k: float(np.mean(list(v.values()))) for k, v in sp.items()},
        "spearman_quality": {"probe": cal.spearman(pq_, oq), "judge": cal.spearman(jq_, oq),
                             "length_baseline": cal.spearman(lp.mean(1), oq)},
        "pair_accuracy": {"probe": pair_accuracy(h.probe_q, h), "judge": pair_accuracy(h.judge_q, h),
                          "oracle": pair_accuracy(h.y.mean(1), h)},
        "mae_per_class_judge": cal.mae_per_class(jp, y, rub.max_score),
        "mae_per_class_probe": cal.mae_per_class(pp, y, rub.max_score),
        "f1_at_keep": cal.f1(keepers, oracle_keep),
        "tau_drop": f.thresholds.drop_threshold(name), "tau_accept": f.thresholds.accept_threshold(name),
        "judge_passes_skipped": float(skipped.mean()) if len(skipped) else 0.0,
        "probe_kept": float(accepted.mean()) if len(accepted) else 0.0,
        "keeper_loss": float((dropped & keepers).sum() / max(1, keepers.sum())),
        "false_keep": float((accepted & ~keepers).sum() / max(1, (~keepers).sum())),
    }, keep_rates


def build_report(cfg, f: Fit, held: dict[str, HeldOut]) -> dict:
    ccfg = cfg.scorer.calibration
    th = f.thresholds
    conf = ccfg.keeper_loss_confidence
    fitted_keepers, fitted_rejects = ({k: (sum(per.values()) if k == cal.POOLED else per.get(k, 0)) for k in th.tau_drop}
                                      for per in (th.keepers_per_rubric, th.rejects_per_rubric))
    report: dict = {"stage": "calibrate", "rubrics": {}, "keep_rate": {},
                    "calibration": {"fitted_on": f.fitted_on, "documents_per_source": th.docs_per_source,
                                    "keepers_per_rubric": th.keepers_per_rubric, "confidence": conf,
                                    "tau_drop_scope": ccfg.tau_drop_scope, "keepers_per_tau_drop": fitted_keepers,
                                    "expected_keeper_loss": {r: cal.expected_keeper_loss(n, ccfg.max_keeper_loss,
                                                                                         confidence=conf)
                                                             for r, n in fitted_keepers.items()},
                                    "keeper_loss_p90": {r: cal.expected_keeper_loss(n, ccfg.max_keeper_loss, 0.9, conf)
                                                        for r, n in fitted_keepers.items()},
                                    "rejects_per_tau_accept": fitted_rejects,
                                    # the same Beta law bounds the rejects the Probe keeps (calibrate.tau_accept_for_rate)
                                    "expected_false_keep": {r: cal.expected_keeper_loss(n, ccfg.max_false_keep,
                                                                                        confidence=conf)
                                                            for r, n in fitted_rejects.items()},
                                    "false_keep_p90": {r: cal.expected_keeper_loss(n, ccfg.max_false_keep, 0.9, conf)
                                                       for r, n in fitted_rejects.items()}}}
    for name, h in held.items():
        report["rubrics"][name], keep_rates = _rubric_report(name, h, f, ccfg)
        report["keep_rate"].update(keep_rates)
    report["tau_keep"], report["tau_drop"], report["tau_accept"] = th.tau_keep, th.tau_drop, th.tau_accept
    return report


def measure_saving(scorer: CascadeScorer, docs: list[tuple[str, str, str]]) -> dict:
    """Run the cascade and the Judge alone over the same documents; compare counted backbone FLOPs."""
    texts, kinds, sources = (list(x) for x in zip(*docs, strict=True)) if docs else ([], [], [])
    flops, results = {}, {}
    for mode in ("judge", "cascade"):
        scorer.bb.reset_counters()
        results[mode] = scorer.score(texts, kinds, sources, mode=mode)
        flops[mode] = sum(scorer.bb.layer_flops)
    jk, ck = results["judge"]["keep"], results["cascade"]["keep"]
    return {"flops_judge_only": flops["judge"], "flops_cascade": flops["cascade"],
            "flops_saved": 1.0 - flops["cascade"] / flops["judge"] if flops["judge"] else 0.0,
            "judge_passes_skipped": float(results["cascade"]["judge_skipped"].mean()) if texts else 0.0,
            "probe_kept": float(results["cascade"]["probe_kept"].mean()) if texts else 0.0,
            "keeper_loss": float((jk & ~ck).sum() / max(1, jk.sum())),
            "false_keep": float((~jk & ck).sum() / max(1, (~jk).sum())), "n": len(texts),
            "read_fraction_mean": float(results["judge"]["read_fraction"].mean()) if texts else 0.0}


def plot(report: dict, path: Path) -> None:
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


def log_reliability(run, held: dict[str, HeldOut]) -> None:
    """One reliability diagram per rubric and head on the dashboard: predicted vs oracle quality."""
    for name, h in held.items():
        if not h.clean.any():
            continue
        oracle_q = h.y[h.clean].mean(1)
        for head, q in (("judge", h.judge_q), ("probe", h.probe_q)):
            run.log_calibration(q[h.clean].tolist(), oracle_q.tolist(), name=f"{name}/{head}", bins=10)


def calibrate_stage(cfg, docs: list[dict] | None = None) -> dict:
    """Fit τ_keep per source, τ_drop and τ_accept per rubric on unlabelled documents; report on the held-out split.

    `docs` (dicts with id, text, source, kind) replaces the inputs the unlabelled sample is drawn from.
    """
    out = Path(cfg.scorer.out_dir)
    blob = torch.load(out / HEADS_FILE, weights_only=False)
    meta = blob["meta"]
    bb = LayerwiseBackbone.load(meta["backbone"], dtype="float32")
    heads = build_heads(blob, bb.width)
    reader = reader_for(bb, meta)
    layers = (meta["probe_layer"], meta["judge_layer"])
    held = held_out(cfg, bb, reader, blob, heads, layers)
    labelled = set(load_labels(cfg).column("id").to_pylist())
    scorer = CascadeScorer(bb, heads, layers[0], layers[1], reader, micro_batch=cfg.scorer.scoring.micro_batch)
    f = fit(cfg, scorer, held, calibration_sample(cfg, labelled, docs))
    report = attach_warnings(build_report(cfg, f, held))
    calib = {"tau_keep": f.thresholds.tau_keep, "tau_drop": f.thresholds.tau_drop,
             "tau_accept": f.thresholds.tau_accept, "max_keeper_loss": cfg.scorer.calibration.max_keeper_loss,
             "max_false_keep": cfg.scorer.calibration.max_false_keep,
             "keeper_loss_confidence": cfg.scorer.calibration.keeper_loss_confidence}
    write_json_atomic(calib, out / CALIBRATION_FILE)
    scorer.tau_drop, scorer.tau_keep, scorer.tau_accept = f.thresholds.tau_drop, f.thresholds.tau_keep, f.thresholds.tau_accept
    test_docs = [(t, k, s) for h in held.values() for t, k, s, c in zip(h.texts, h.kinds, h.sources, h.clean,
                                                                          strict=True) if c]
    report["compute"] = measure_saving(scorer, test_docs)
    plot(report, out / "calibration.png")
    def extra(run) -> None:
        log_reliability(run, held)
        for w in report["warnings"]:
            run.event("warning", w)

    report_stage(cfg, "calibrate", report, log_extra=extra)
    return report
