"""Pairwise benchmark: does the scorer rank each clean document above its degraded copies?

Clean documents come from the committed demo corpus (data/demo/: text that Debian, npm and PyPI
packages ship; records with a planted problem skipped): English prose (Wikipedia sample),
German/French/Spanish prose (Debian handbook), Python and Go source. Prose is taken only when it
ends a sentence, so `truncation` is the only cut document of a pair. None of them is in the
stand-in oracle's reference share, the labelled sample or the calibration sample. Unseen code
comes from languages and projects the demo corpus lacks (services/scorer/shipped_code.py: Perl
modules, npm's JavaScript, C examples of -dev packages, Python of Debian's python3-* packages);
a group missing on the machine is reported under `missing_groups`, never replaced.

The scorer is built as `cluster.pipeline` builds it, with the recipe's scorer settings (default
configs/demo.yaml): label → distill → calibrate on the rest of the demo corpus. Then each clean
document and each of its degraded copies (services/scorer/degrade.py: order, spelling, spam,
truncation, repetition for prose; obfuscation, layout for code) are scored by the Probe alone, the
Judge alone and the calibrated cascade (a document the cascade drops ranks below every survivor).
Accuracy = fraction of pairs ordered right; ties count as errors. The oracle's own accuracy is
printed too (it is what the heads learn). Last line: one JSON object.

    .venv/bin/python benchmarks/scorer_pairs.py [--config configs/demo.yaml] [--per-group 40] [--quick] [--only-code]

`--only-code` labels, trains and calibrates on the demo's code alone and pairs only code, in a
fraction of the time: each rubric's heads learn from that rubric's labels alone, so prose changes
nothing for the code heads (set scorer.oracle.sample_size near a full run's code share, about 270
of the demo's 1,000). `--heads-only` skips calibration and the cascade: the Probe and the Judge
are measured alone (what the heads learnt does not depend on the thresholds). The result says
`only_code`/`heads_only` and names its overrides.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _repo_relative(path: str) -> str:
    """A path inside the repository as written from its root (results name no checkout)."""
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else path


GROUPS = {"prose-en": ("wiki", {"en"}), "prose-de-fr-es": ("handbook", {"de", "fr", "es"}),
          "code-python": ("python", {"python"}), "code-go": ("go", {"go"})}


def choose_pairs_docs(per_group: int, every: int, seed: int) -> dict[str, list[dict]]:
    from services.scorer.oracle.reference import in_reference
    from services.scorer.oracle.text_units import TERMINAL
    from services.scorer.sample_docs import DEMO_KINDS, demo_records

    rng = random.Random(seed)
    chosen = {}
    for group, (source, langs) in GROUPS.items():
        ok = [r for r in demo_records(source) if (r.get("meta") or {}).get("lang") in langs
              and not in_reference(r["id"], every) and len(r["text"]) >= 800
              and (DEMO_KINDS[source] == "code" or r["text"].rstrip().endswith(TERMINAL))]
        chosen[group] = rng.sample(ok, min(per_group, len(ok)))
    return chosen


def choose_unseen_code(per_group: int, seed: int) -> tuple[dict[str, list[dict]], dict[str, str]]:
    """Held-out code in languages and projects outside the demo corpus, and the groups missing here."""
    from services.scorer.shipped_code import SHIPPED_CODE, shipped_code

    chosen, missing = {}, {}
    for group in SHIPPED_CODE:
        try:
            chosen[group] = shipped_code(group, per_group, seed)
        except FileNotFoundError as e:
            missing[group] = str(e)
    return chosen, missing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "demo.yaml"))
    ap.add_argument("--per-group", type=int, default=40, help="clean documents per language group")
    ap.add_argument("--quick", action="store_true", help="smoke run: 300 labels, 2 epochs, 6 documents per group")
    ap.add_argument("--heads-only", action="store_true", help="no calibration, no cascade: the Probe and the Judge alone")
    ap.add_argument("--only-code", action="store_true", help="code documents and code pairs only (the code rubric's heads)")
    ap.add_argument("--out-dir", default="", help="scorer directory to work in; labels and heads already there "
                    "(from an earlier run with the same config) are reused instead of rebuilt")
    ap.add_argument("--out", default="", help="results JSON (default: benchmarks/results/scorer_pairs.json unless --quick)")
    ap.add_argument("overrides", nargs="*", help="dotted config overrides, e.g. scorer.probe_layer=3")
    args = ap.parse_args()
    import numpy as np

    from benchmarks.result_file import RESULTS, save_result
    from services.scorer import pipeline
    from services.scorer.cascade import CascadeScorer
    from services.scorer.degrade import degrade, kinds_for
    from services.scorer.oracle import make_oracle
    from services.scorer.sample_docs import demo_pool
    from services.scorer.shipped_code import SHIPPED_CODE
    from services.scorer.stage_support import benchmark_recipe
    from shared.kernels.blas_probe import machine_report

    cfg, overrides = benchmark_recipe(args.config, args.overrides, args.quick)
    cfg.scorer.out_dir = args.out_dir or tempfile.mkdtemp(prefix="bench-pairs-")
    per_group = 6 if args.quick else args.per_group
    held = choose_pairs_docs(per_group, cfg.scorer.oracle.heuristic.reference_every, seed=5)
    held_ids = {r["id"] for docs in held.values() for r in docs}
    unseen, missing = choose_unseen_code(per_group, seed=5)
    held.update(unseen)
    pool = demo_pool(held_ids)
    if args.only_code:
        held = {g: docs for g, docs in held.items() if g.startswith("code")}
        pool = [d for d in pool if d["kind"] == "code"]
    out = Path(cfg.scorer.out_dir)
    if not (out / "labels.parquet").exists():
        pipeline.label_stage(cfg, docs=pool)
    train = pipeline.train_stage(cfg) if not (out / "heads.pt").exists() else {"probe_layer": cfg.scorer.probe_layer,
                                                                              "judge_layer": cfg.scorer.judge_layer}
    calib = None if args.heads_only else pipeline.calibrate_stage(cfg, docs=pool)
    modes = ("probe", "judge") if args.heads_only else ("probe", "judge", "cascade")
    scorer = CascadeScorer.load(cfg.scorer.out_dir, cfg.scorer)
    oracle = make_oracle(cfg.scorer.oracle)

    acc: dict[str, dict[str, list[bool]]] = {m: {} for m in (*modes, "oracle")}
    by_group: dict[str, dict[str, dict[str, list[bool]]]] = {m: {} for m in acc}
    read = []
    for group, docs in held.items():
        kind = "code" if group.startswith("code") else "web"
        texts, meta = [], []
        for r in docs:
            texts.append(r["text"])
            meta.append((r["id"], ""))
            for k in kinds_for(kind):
                texts.append(degrade(r["text"], k, random.Random(f"pairs:{r['id']}:{k}")))
                meta.append((r["id"], k))
        kinds = [kind] * len(texts)
        res = {m: scorer.score(texts, kinds, mode=m) for m in modes}
        read += res["judge"]["read_fraction"].tolist()
        rank = {"probe": res["probe"]["probe_quality"], "judge": res["judge"]["judge_quality"],
                "oracle": np.array([sum(oracle.scores(t, kind).values()) for t in texts], dtype=float)}
        if "cascade" in res:
            # the cascade orders survivors by the Judge, what the Probe dropped below them and what it
            # kept on its own above them
            rank["cascade"] = res["cascade"]["quality"] + np.where(res["cascade"]["probe_kept"], 1.0,
                                                                   np.where(res["cascade"]["judge_skipped"], -1.0, 0.0))
        clean_at = {doc_id: i for i, (doc_id, k) in enumerate(meta) if not k}
        for i, (doc_id, k) in enumerate(meta):
            if not k:
                continue
            for m, q in rank.items():
                hit = bool(q[clean_at[doc_id]] > q[i])
                acc[m].setdefault(k, []).append(hit)
                by_group[m].setdefault(group, {}).setdefault(k, []).append(hit)
    summary = {m: {k: float(np.mean(v)) for k, v in kinds.items()} for m, kinds in acc.items()}
    for m in acc:
        print(f"{m:8s} " + "  ".join(f"{k} {v:.2f}" for k, v in summary[m].items()), flush=True)
    heads_min = min(min(summary[m].values()) for m in ("judge", "cascade") if m in summary)
    by_group_mean = {m: {g: {k: float(np.mean(v)) for k, v in ks.items()} for g, ks in groups.items()}
                     for m, groups in by_group.items()}
    unseen_obf = {m: float(np.mean([hit for g in unseen for hit in by_group[m][g]["obfuscation"]])) if unseen else None
                  for m in acc}
    print("unseen code, obfuscation: " + "  ".join(f"{m} {v:.2f}" for m, v in unseen_obf.items() if v is not None))
    result = {
        "accuracy": summary, "min_judge_cascade": heads_min,
        "cascade_by_group": by_group_mean.get("cascade"), "accuracy_by_group": by_group_mean,
        "unseen_code_obfuscation": unseen_obf, "missing_groups": missing,
        "unseen_code_sources": {g: {"packages": SHIPPED_CODE[g].packages, "documents": len(unseen[g]),
                                    "files": [r["meta"]["origin"] for r in unseen[g]]} for g in unseen},
        "pairs_per_kind": {k: len(v) for k, v in acc["judge"].items()},
        "read_fraction_mean": float(np.mean(read)),
        "held_out_spearman": {n: r["spearman_quality"] for n, r in calib["rubrics"].items()} if calib else None,
        "flops_saved_calibrate": calib["compute"]["flops_saved"] if calib else None,
        "layers": [train["probe_layer"], train["judge_layer"]],
        "config": _repo_relative(args.config), "overrides": overrides, "oracle": "heuristic (stand-in)", "quick": args.quick,
        "only_code": args.only_code, "heads_only": args.heads_only,
        "machine": machine_report(),  # its counts reproduce across machines, its seconds do not
    }
    if args.out or not args.quick:
        save_result(Path(args.out) if args.out else RESULTS / "scorer_pairs.json", result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
