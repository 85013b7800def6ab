"""The demo's filter stage: its wall time and what it keeps and removes per source.

Runs `services.data_filter.pipeline.run` on the data section of `configs/demo.yaml` exactly as the
demo's first stage does (local Ray, the recipe's workers; tracker off), then reads the committed
corpus's own labels (`meta.planted`, see data/demo/PLANTED.md, which the filters never read) to
report per source: the funnel (read -> valid -> filters -> dedup -> perplexity -> written), the
removals by reason, how many unplanted documents were written, and per planted problem how many
planted records were not written; for duplicates (exact, and near per target Jaccard, where 0.5
is a negative control) whether one member of the pair, both or neither was written, since dedup
keeps whichever comes first; boilerplate plants that were written are checked for their planted
lines. The wall time is the stage's own, with the CPU load average before and after,
since on a shared machine it is a noisy absolute figure (there is no peer to interleave with).

Run: `.venv/bin/python benchmarks/demo_filter.py [--workers N]`; last line one JSON object, also
written to benchmarks/results/demo_filter.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]  # benchmarks/tokenize.py shadows the stdlib
ROOT = _HERE.parent
sys.path.insert(0, str(ROOT))

from benchmarks.result_file import save_result  # noqa: E402


def planted_labels(inputs) -> dict[str, tuple[str, dict | None]]:
    """id -> (source, meta.planted or None) for every JSON line of the demo inputs."""
    out: dict[str, tuple[str, dict | None]] = {}
    for src in inputs:
        for pattern in src.paths:
            path = ROOT / pattern
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if isinstance(rec, dict) and isinstance(rec.get("id"), str):
                        out[rec["id"]] = (src.name, (rec.get("meta") or {}).get("planted"))
    return out


def summarise(stats: dict, labels: dict, written: dict[str, str]) -> dict:
    per_source: dict[str, dict] = {}
    planted: dict[str, Counter] = defaultdict(Counter)
    clean: dict[str, Counter] = defaultdict(Counter)
    lines_left = 0
    for doc_id, (source, plant) in labels.items():
        kept = doc_id in written
        if plant is None:
            clean[source]["docs"] += 1
            clean[source]["written"] += kept
            continue
        problem = plant["problem"]
        if problem == "near_duplicate":
            problem = f"near_duplicate@{plant.get('target_jaccard')}"
        planted[problem]["records"] += 1
        planted[problem]["not_written"] += not kept
        if "of" in plant:
            planted[problem][("neither", "one", "both")[kept + (plant["of"] in written)] + "_written"] += 1
        if plant["problem"] == "boilerplate" and kept:
            lines_left += any(line in written[doc_id] for line in plant.get("lines", []))
    for name, s in stats["sources"].items():
        per_source[name] = {
            "kind": s["kind"], "funnel": {f["stage"]: f["docs"] for f in s["funnel"]},
            "removed": s["removed"], "unplanted_docs": clean[name]["docs"], "unplanted_written": clean[name]["written"],
            "unplanted_written_frac": round(clean[name]["written"] / max(clean[name]["docs"], 1), 4),
        }
    return {"sources": per_source,
            "planted_not_written": {p: {"records": c["records"], "frac": round(c["not_written"] / c["records"], 4),
                                        **{k: v for k, v in c.items() if k.endswith("_written") and k != "not_written"}}
                                    for p, c in sorted(planted.items())},
            "boilerplate_written_with_planted_lines": lines_left}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=None, help="data.filter.workers (default: the recipe's)")
    args = ap.parse_args()
    os.chdir(ROOT)  # the recipe's paths are relative to the repository root
    import pyarrow.parquet as pq

    from services.data_filter.pipeline import run
    from shared.config.loader import load_config

    overrides = ["tracker.mode=disabled"] + ([f"data.filter.workers={args.workers}"] if args.workers is not None else [])
    cfg = load_config("configs/demo.yaml", overrides)
    labels = planted_labels(cfg.data.inputs)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="moelab-demo-filter-") as tmp:
        t0 = time.perf_counter()
        stats = run(cfg.data, out_dir=tmp)
        seconds = time.perf_counter() - t0
        written = {r["id"]: r["text"] for p in sorted(Path(tmp).glob("part-*.parquet"))
                   for r in pq.read_table(p, columns=["id", "text"]).to_pylist()}
    load_after = os.getloadavg()
    result = {"seconds": round(seconds, 1), "stage_seconds": stats["seconds"], "fitted_seconds": stats["fitted"]["seconds"],
              "workers": cfg.data.filter.workers, "load_average_before_after": [round(load_before[0], 1), round(load_after[0], 1)],
              "records": stats["records"], "written": stats["written"], **summarise(stats, labels, written)}
    print(f"demo filter stage: {seconds:.1f} s ({cfg.data.filter.workers} workers, load {load_before[0]:.1f} -> {load_after[0]:.1f}); "
          f"{stats['records']} records -> {stats['written']} written")
    for name, s in result["sources"].items():
        f = s["funnel"]
        print(f"  {name:14s} {s['kind']:7s} read {f['read']:5d} valid {f['valid']:5d} filters {f['filters']:5d} "
              f"dedup {f['dedup']:5d} perplexity {f['perplexity']:5d} written {f['written']:5d}; "
              f"unplanted written {s['unplanted_written']}/{s['unplanted_docs']}")
    for problem, p in result["planted_not_written"].items():
        pairs = {k: v for k, v in p.items() if k.endswith("_written")}
        print(f"  planted {problem:22s} {p['records']:4d} records, not written {p['frac']:.3f} {pairs or ''}")
    save_result(_HERE / "results" / "demo_filter.json", result)
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
