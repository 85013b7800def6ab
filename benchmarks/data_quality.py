"""Data quality on a planted corpus: what each filter removes, what clean text it keeps, per language.

The corpus (benchmarks/quality_corpus.py) is real package-shipped text in 32 languages plus Python
and Go code, with planted shuffled text, word salad, gibberish, boilerplate, repetition, profanity
at 5/10/20% of tokens, other languages and near-duplicates at Jaccard 0.5-1.0. It runs through
the whole data filter stage (`services.data_filter.pipeline.run`) with the default chains, only
`languages` set. Reported:
- per planted kind, the fraction removed (profanity also per level, and how much toxicity caught);
- per (source, language), the fraction of clean documents kept, and clean documents lost per
  filter (toxicity in particular). A clean document removed by dedup whose kept representative
  shares >= 0.5 of its word 5-grams is a real duplicate in the package text, counted apart;
- near-duplicate detection per Jaccard level against 1 - (1 - s^8)^14 (our LSH: 14 bands x 8 rows,
  `data.filter.dedup`), on a separate set of 2,000 pairs per level with the dedup's own signer,
  predicted at each pair's exact Jaccard; and in the corpus, pairs whose members dedup both removed
  with no member of their cluster kept (a base that is itself a real duplicate has a third member);
- pair-aware F1: every planted bad document and every near-duplicate pair at s >= 0.8 is a
  positive (a pair is found when exactly one member goes; both going is a hit plus a false
  alarm); clean documents and pairs at s = 0.5 are negatives; pairs at 0.6 and 0.7 sit on the
  curve's slope (P = 0.22, 0.60) and are judged by the curve only;
- the alt-profanity-check classifier against the word list on the English profanity plants and
  clean English documents.

Run: `.venv/bin/python benchmarks/data_quality.py [--quick]`; last line one JSON object, also
written to benchmarks/results/data_quality.json (not by --quick).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]  # benchmarks/tokenize.py shadows the stdlib
sys.path.insert(0, str(_HERE.parent))

from benchmarks import quality_corpus as Q  # noqa: E402
from benchmarks.result_file import save_result  # noqa: E402

BAD_KINDS = ("shuffled", "word_salad", "gibberish", "boilerplate", "repetition", "profanity", "other_language")


def run_pipeline(records: dict[str, list[dict]], truth: dict[str, dict], work: Path, workers: int) -> tuple[dict, dict]:
    from services.data_filter.pipeline import run
    from shared.config.data import DataConfig

    kinds = {"python": "code", "go": "code"}
    inputs = []
    for source, recs in sorted(records.items()):
        path = work / f"{source}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
        inputs.append({"name": source, "kind": kinds.get(source, "web"), "paths": [str(path)]})
    data = DataConfig.model_validate({"inputs": inputs, "out_dir": str(work / "out"), "filter": {
        "workers": workers, "samples_per_reason": 10**9, "chains": {"web": {"language": {"languages": Q.KEPT}}}}})
    t0 = time.perf_counter()
    stats = run(data)
    seconds = time.perf_counter() - t0
    import pyarrow.parquet as pq

    out = work / "out"
    kept = {i for p in out.glob("part-*.parquet") for i in pq.read_table(p, columns=["id"]).column("id").to_pylist()}
    fate = {i: "kept" for i in kept}
    rep_of: dict[str, str] = {}
    for line in (out / "removed_samples.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        fate[r["id"]] = f"{r['filter']}:{r['reason']}"
        if r["filter"] == "dedup":
            rep_of[r["id"]] = r["duplicate_of"]
    missing = [i for i in truth if i not in fate]
    assert not missing, f"{len(missing)} documents neither kept nor accounted for: {missing[:5]}"
    return {"fate": fate, "rep_of": rep_of, "seconds": seconds, "docs": len(truth)}, stats


def curve(seed: int, pairs_per_level: int) -> list[dict]:
    """Detection (any band key shared) per Jaccard level vs 1 - (1 - s^r)^b at each pair's exact Jaccard."""
    from services.data_filter.dedup.minhash import Signer, lsh_probability
    from shared.config.filters import DedupConfig

    d = DedupConfig()
    signer = Signer(d.ngram, d.bands, d.rows, d.seed)
    rng = random.Random(seed)
    bases = [r for g, docs in Q.real_groups().items() if g[0] in ("wiki", "handbook") and g[2] != "ja" for r in docs]
    vocab = [w for r in bases[:200] for w in r["text"].split()]
    rows = []
    for level in Q.LEVELS:
        texts, js = [], []
        for i in range(pairs_per_level):
            base = bases[i % len(bases)]["text"]
            variant, j = Q.near_duplicate(base, level, vocab, rng)
            texts += [base, variant]
            js.append(j)
        keys = signer.band_keys(texts)
        hit = (keys[0::2] == keys[1::2]).any(axis=1)
        predicted = sum(lsh_probability(j, d.bands, d.rows) for j in js) / len(js)
        rows.append({"level": level, "pairs": len(js), "mean_jaccard": round(sum(js) / len(js), 4),
                     "measured": round(float(hit.mean()), 4), "predicted": round(predicted, 4),
                     "diff": round(float(hit.mean()) - predicted, 4)})
    return rows


def metrics(res: dict, truth: dict[str, dict]) -> dict:
    fate, rep_of = res["fate"], res["rep_of"]
    removed = {i for i, f in fate.items() if f != "kept"}
    texts = res["texts"]
    by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    profanity: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for i, t in truth.items():
        if t["kind"] in BAD_KINDS:
            by_kind[t["kind"]][0] += 1
            by_kind[t["kind"]][1] += i in removed
        if t["kind"] == "profanity":
            row = profanity[str(t["level"])]
            row[0] += 1
            row[1] += i in removed
            row[2] += fate[i].startswith("toxicity:")
    clean: dict[str, Counter] = defaultdict(Counter)
    natural_dups = 0
    for i, t in truth.items():
        if t["kind"] != "clean":
            continue
        group = f"{t['source']}/{t['lang']}"
        f = fate[i]
        if f == "dedup:near_duplicate" and Q.jaccard(texts[i], texts[rep_of[i]]) >= 0.5:
            natural_dups += 1
            clean[group]["real_duplicate"] += 1
            continue
        clean[group]["docs"] += 1
        clean[group]["kept" if f == "kept" else f] += 1
    clean_kept = {g: round(c["kept"] / c["docs"], 4) for g, c in sorted(clean.items()) if c["docs"]}
    n_clean = sum(c["docs"] for c in clean.values())
    toxic_loss = sum(n for c in clean.values() for k, n in c.items() if k.startswith("toxicity:"))
    pairs: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    tp = fp = fn = 0
    for i, t in truth.items():
        if t["kind"] == "near_duplicate":
            members = (i in removed) + (t["of"] in removed)
            row = pairs[str(t["level"])]
            row[0] += 1
            row[1] += fate[i] == "dedup:near_duplicate" or fate[t["of"]] == "dedup:near_duplicate"
            both = fate[i] == fate[t["of"]] == "dedup:near_duplicate"
            row[2] += both and fate.get(rep_of[i]) != "kept"  # a whole cluster lost, not a third member kept
            if t["level"] >= 0.8:
                tp, fn, fp = tp + (members >= 1), fn + (members == 0), fp + (members == 2)
            elif t["level"] <= 0.5:
                fp += i in removed
        elif t["kind"] in BAD_KINDS:
            tp, fn = tp + (i in removed), fn + (i not in removed)
        elif i in removed and not (fate[i] == "dedup:near_duplicate" and Q.jaccard(texts[i], texts[rep_of[i]]) >= 0.5):
            fp += 1
    precision, recall = tp / max(tp + fp, 1), tp / max(tp + fn, 1)
    return {
        "removed_by_kind": {k: round(v[1] / v[0], 4) for k, v in sorted(by_kind.items())},
        "planted": {k: v[0] for k, v in sorted(by_kind.items())},
        "profanity_by_level": {k: {"docs": v[0], "removed": round(v[1] / v[0], 4), "by_toxicity": round(v[2] / v[0], 4)}
                               for k, v in sorted(profanity.items())},
        "clean_kept": clean_kept, "clean_kept_min": min(clean_kept.values()),
        "clean_docs": n_clean, "clean_real_duplicates": natural_dups,
        "clean_lost": {g: {k: n for k, n in c.items() if k not in ("docs", "kept")} for g, c in sorted(clean.items())
                       if c["docs"] != c["kept"]},
        "clean_lost_to_toxicity": round(toxic_loss / max(n_clean, 1), 4),
        "pairs_by_level": {k: {"pairs": v[0], "dedup_found": round(v[1] / v[0], 4), "clusters_lost": v[2]}
                           for k, v in sorted(pairs.items())},
        "f1": round(2 * precision * recall / max(precision + recall, 1e-9), 4),
        "precision": round(precision, 4), "recall": round(recall, 4),
    }


def classifier_vs_list(records: dict[str, list[dict]], truth: dict[str, dict]) -> dict:
    """alt-profanity-check (p > 0.9) against the word-list rule, on English profanity plants and clean English."""
    from profanity_check import predict_prob

    from services.data_filter.filters import Doc
    from services.data_filter.filters.toxicity import ToxicityFilter
    from shared.config.filters import ToxicityConfig

    wordlist = ToxicityFilter(ToxicityConfig())
    out = {}
    for kind in ("profanity", "clean"):
        texts = [r["text"] for recs in records.values() for r in recs
                 if truth[r["id"]]["kind"] == kind and truth[r["id"]]["lang"] == "en"]
        probs = predict_prob(texts)
        by_list = sum(wordlist.check(Doc("x", t, "s", meta={"language": "en"})) is not None for t in texts)
        out[kind] = {"docs": len(texts), "classifier_removed": round(float((probs > 0.9).mean()), 4),
                     "word_list_removed": round(by_list / len(texts), 4)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a third of the corpus and 300 pairs per level (a smoke run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=0, help="data.filter.workers (0 = in-process)")
    ap.add_argument("--dump", default=None, help="write every document's fate, truth and text to this JSON file")
    args = ap.parse_args()
    records, truth = Q.build(args.seed, scale=0.35 if args.quick else 1.0)
    texts = {r["id"]: r["text"] for recs in records.values() for r in recs}
    print(f"corpus: {len(truth)} documents in {len(records)} sources; planted {dict(Q.kinds_of(truth))}")
    with tempfile.TemporaryDirectory(prefix="moelab-quality-") as tmp:
        res, stats = run_pipeline(records, truth, Path(tmp), args.workers)
    res["texts"] = texts
    if args.dump:
        Path(args.dump).write_text(json.dumps({"fate": res["fate"], "truth": truth, "texts": texts}))
    m = metrics(res, truth)
    curve_rows = curve(args.seed, 300 if args.quick else 2000)
    clf = classifier_vs_list(records, truth)
    print(f"pipeline: {res['docs']} docs in {res['seconds']:.1f} s ({res['docs'] / res['seconds']:.0f} docs/s, workers={args.workers})")
    for k, v in m["removed_by_kind"].items():
        print(f"  planted {k:15s} {m['planted'][k]:5d}  removed {v:.3f}")
    for k, v in m["profanity_by_level"].items():
        print(f"  profanity at {float(k):.0%}: removed {v['removed']:.3f} (toxicity {v['by_toxicity']:.3f}) of {v['docs']}")
    for g, v in m["clean_kept"].items():
        print(f"  clean {g:14s} kept {v:.3f}  {m['clean_lost'].get(g, '')}")
    print(f"  clean lost to toxicity {m['clean_lost_to_toxicity']:.4f}; real duplicates in the package text {m['clean_real_duplicates']}")
    for row in curve_rows:
        print(f"  near-dup s={row['level']:.1f} ({row['pairs']} pairs, mean J {row['mean_jaccard']:.3f}): "
              f"measured {row['measured']:.3f} predicted {row['predicted']:.3f} diff {row['diff']:+.3f}")
    for k, v in m["pairs_by_level"].items():
        print(f"  corpus pairs s={k}: {v}")
    print(f"  classifier vs list: {clf}")
    print(f"  F1 {m['f1']:.4f} (precision {m['precision']:.4f}, recall {m['recall']:.4f})")
    result = {
        "f1": m["f1"], "clean_kept_min": m["clean_kept_min"], "clean_lost_to_toxicity": m["clean_lost_to_toxicity"],
        "removed_by_kind": m["removed_by_kind"], "profanity_by_level": m["profanity_by_level"],
        "clean_kept": m["clean_kept"], "clean_lost": m["clean_lost"], "clean_real_duplicates": m["clean_real_duplicates"],
        "near_dup_curve": curve_rows, "near_dup_max_abs_diff": max(abs(r["diff"]) for r in curve_rows),
        "corpus_pairs": m["pairs_by_level"],
        "clusters_lost_by_dedup": sum(v["clusters_lost"] for v in m["pairs_by_level"].values()),
        "classifier_vs_list": clf, "precision": m["precision"], "recall": m["recall"],
        "docs": res["docs"], "seconds": round(res["seconds"], 2), "fitted_groups": len(stats["fitted"]["groups"]),
        "quick": args.quick, "seed": args.seed,
    }
    if not args.quick:  # a smoke run leaves the committed figures alone
        save_result(_HERE / "results" / "data_quality.json", result)
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
