"""The newcomer test: a corpus moelab was never tuned on, run through the CLI as the docs show it.

Builds, from text any Debian machine with Python has (package copyright files under
`/usr/share/doc`, man pages where the image keeps them, the Python standard library's sources),
a small corpus with planted bad input (invalid JSON, invalid UTF-8, missing, null, numeric and
empty text, a JSON list) and planted duplicates. Then runs, each as the `moelab` command a user
types: data filter → score label/train/calibrate/run → data tokenize → train → train again
(refused) → train --resume → data inspect, and asserts the pipeline's invariants:

- every input record is accounted for exactly once (rejected with its line, removed with a
  reason, a near duplicate, or written), and every written document is written once;
- no written document lost more of its characters to the filter's edits than its chain's
  `max_edit_loss` allows without being flagged (read from each row's meta);
- no stage reads another stage's work files: the scorer scored exactly the documents the filter
  declared in its manifest, once each, and the oracle labelled only those;
- a rerun skips everything (the filter's output unchanged, every score shard and token item skipped);
- a changed input rebuilds what depends on it, in place: a document appended to an input makes
  the filter say why and rebuild its output (accounting still exact), the scorer score the new
  output and nothing else, and the token shards rebuild;
- a used run name is refused without --resume, a schedule-changing resume without
  --allow-config-change, and an allowed change is recorded.

Usage: `.venv/bin/python scripts/newcomer_check.py [--keep DIR] [--docs N]`; prints one JSON line at
the end (with the seconds each step took) and exits non-zero on the first broken invariant. Every
step that offers an in-process path takes it (`data filter --workers 0`, `train --no-ray`,
`mixture.use_ray: false`); `score run` always starts a local Ray.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
MOELAB = [sys.executable, "-c", "from moelab.cli import main; main()"]


class Broken(AssertionError):
    """An invariant the newcomer run broke."""


def check(ok: bool, what: str) -> None:
    if not ok:
        raise Broken(what)


def moelab(*args: str, expect: int = 0) -> str:
    """Run `moelab ARGS` as a user would; return its output, failing on an unexpected exit code."""
    res = subprocess.run([*MOELAB, *args], cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "TQDM_DISABLE": "1"})
    out = res.stdout + res.stderr
    check(res.returncode == expect, f"moelab {' '.join(args)} exited {res.returncode}, expected {expect}:\n{out[-3000:]}")
    return out


def _roff_to_text(raw: str) -> str:
    """A man page's roff source as plain text, roughly: requests dropped, font escapes removed."""
    lines = []
    for line in raw.splitlines():
        if line.startswith((".\\\"", "'\\\"")):
            continue
        if line.startswith("."):
            line = re.sub(r"^\.\w+\s*", "", line)
        line = re.sub(r"\\f[BIRP]|\\\(\w\w|\\[-&e]|\\s[-+]?\d", "", line).replace("\\", "")
        lines.append(line.strip('"'))
    return "\n".join(lines).strip()


def debian_texts(limit: int) -> dict[str, list[str]]:
    """Per source, up to `limit` texts: licences (copyright files), man pages (if installed), Python sources."""
    out: dict[str, list[str]] = {"licences": [], "manpages": [], "pysrc": []}
    for path in sorted(Path("/usr/share/doc").glob("*/copyright")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if 400 < len(text) < 60_000 and len(out["licences"]) < limit:
            out["licences"].append(text)
    for path in sorted(Path("/usr/share/man").glob("man[158]/*.gz")):
        try:
            text = _roff_to_text(gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace"))
        except (OSError, EOFError):
            continue
        if 400 < len(text) < 60_000 and len(out["manpages"]) < limit:
            out["manpages"].append(text)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if 1000 < len(text) < 40_000 and len(out["pysrc"]) < limit:
            out["pysrc"].append(text)
    return {k: v for k, v in out.items() if v}


BAD_LINES = [b"{not json\n", b'{"id": "bad-utf8", "text": "caf\xe9"}\n', b'{"id": "no-text"}\n',
             b'{"id": "null-text", "text": null}\n', b'{"id": "num-text", "text": 42}\n', b'{"id": "empty", "text": "   "}\n',
             b'["a", "list"]\n']


def write_corpus(folder: Path, texts: dict[str, list[str]], n_dups: int) -> dict[str, Path]:
    """One JSONL per source; the first source also gets the bad lines; `n_dups` planted exact copies."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for i, (source, docs) in enumerate(texts.items()):
        path = folder / f"{source}.jsonl"
        with open(path, "wb") as fh:
            for j, text in enumerate(docs):
                fh.write((json.dumps({"id": f"{source}-{j}", "text": text}) + "\n").encode())
            for j, text in enumerate(docs[:n_dups]):
                fh.write((json.dumps({"id": f"{source}-copy-{j}", "text": text}) + "\n").encode())
            if i == 0:
                fh.writelines(BAD_LINES)
        files[source] = path
    return files


def recipe(work: Path, files: dict[str, Path], out_name: str = "filtered") -> dict:
    kinds = {"licences": "web", "manpages": "web", "pysrc": "code"}
    return {
        "base": str(ROOT / "configs" / "tiny.yaml"),
        "name": "newcomer",
        "tracker": {"mode": "disabled"},
        "data": {"inputs": [{"name": s, "kind": kinds[s], "paths": [str(p)]} for s, p in files.items()],
                 "out_dir": str(work / out_name), "filter": {"workers": 0, "shard_docs": 40}},
        "scorer": {"out_dir": str(work / "scorer"), "probe_layer": 1, "judge_layer": 2,
                   "oracle": {"sample_size": 60},
                   "heads": {"max_tokens": 64, "window_tokens": 32, "judge_dim": 32, "judge_heads": 2, "max_epochs": 2,
                             "patience": 1},
                   "calibration": {"sample_size": 60, "keeper_loss_confidence": 0},
                   "scoring": {"batch_size": 32, "micro_batch": 16, "actors_min": 1, "actors_max": 1}},
        "mixture": {"documents": [], "rates": {s: round(1 / len(files), 6) for s in files}, "use_ray": False,
                    "shard_dir": str(work / "tokens"), "tokenizer": {"out_dir": str(work / "tok"), "vocab_size": 512}},
        "model": {"vocab_size": 512, "max_seq_len": 64},
        "train": {"steps": 2, "seq_len": 64, "micro_batch_size": 2, "grad_accum": 1, "checkpoint_every": 2,
                  "eval_every": 100, "out_dir": str(work / "runs")},
        "optim": {"warmup_steps": 1},
    }


def count_lines(files: dict[str, Path]) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in files.values())


def written_ids(out: Path) -> list[str]:
    manifest = json.loads((out / "manifest.json").read_text())
    return [i for s in manifest["shards"] for i in pq.read_table(out / s["name"], columns=["id"]).column("id").to_pylist()]


def check_accounting(out: Path, n_lines: int) -> dict:
    stats = json.loads((out / "stats.json").read_text())
    check(stats["records"] == n_lines, f"stats.json counts {stats['records']} records, the inputs have {n_lines} lines")
    rejected = sum(stats["rejected"].values())
    rejects = (out / "rejects.jsonl").read_text().splitlines()
    check(len(rejects) == rejected == len(BAD_LINES), f"{len(rejects)} reject lines, {rejected} counted, "
          f"{len(BAD_LINES)} planted")
    removed_by_filters = stats["docs"] - stats["kept_after_filters"]
    fitted = sum(d["fitted_removed"] for d in stats["sources"].values())
    accounted = rejected + removed_by_filters + stats["near_duplicates"] + fitted + stats["written"]
    check(accounted == stats["records"], f"records {stats['records']} != rejected {rejected} + removed "
          f"{removed_by_filters} + near duplicates {stats['near_duplicates']} + fitted {fitted} + written {stats['written']}")
    ids = written_ids(out)
    check(len(ids) == len(set(ids)) == stats["written"], f"{len(ids)} rows written, {len(set(ids))} distinct ids, "
          f"stats say {stats['written']}")
    check(not any("-copy-" in i for i in ids), "a planted copy was written")
    return {"records": stats["records"], "rejected": rejected, "removed": removed_by_filters,
            "near_duplicates": stats["near_duplicates"], "fitted_removed": fitted, "written": stats["written"]}


def scored_ids(scorer_out: Path) -> list[str]:
    manifest = json.loads((scorer_out / "scores" / "manifest.json").read_text())
    return [i for s in manifest["shards"] for i in
            pq.read_table(scorer_out / "scores" / s["name"], columns=["id"]).column("id").to_pylist()]


def edit_limits(cfg_path: Path) -> dict[str, float]:
    """Per source, the largest share of a document's characters its chain may edit away unflagged:
    the largest `max_edit_loss` of the chain's enabled rewriting filters (language overrides included)."""
    from shared.config import load_config

    limits = {}
    for source, chain in load_config(cfg_path).data.resolved_chains().items():
        bounds = [v for f in chain.root.values() if f.enabled and hasattr(f, "max_edit_loss")
                  for v in (f.max_edit_loss, *(o.get("max_edit_loss", f.max_edit_loss) for o in f.by_language.values()))]
        limits[source] = max(bounds, default=0.0)
    return limits


def check_edits(out: Path, limits: dict[str, float]) -> dict:
    """No written document lost more than its chain's bound unflagged (from each row's meta)."""
    manifest = json.loads((out / "manifest.json").read_text())
    rows = flagged = edited = 0
    for shard in manifest["shards"]:
        table = pq.read_table(out / shard["name"], columns=["id", "source", "meta"])
        for doc_id, source, meta in zip(*(table.column(c).to_pylist() for c in ("id", "source", "meta")), strict=True):
            m = json.loads(meta)
            check("chars_original" in m and "chars_kept" in m, f"{doc_id}: its meta does not say what the filter kept")
            loss = 1 - m["chars_kept"] / m["chars_original"] if m["chars_original"] else 0.0
            rows += 1
            edited += m["chars_kept"] < m["chars_original"]
            flagged += "edit_flag" in m
            check(loss <= limits[source] + 1e-9 or "edit_flag" in m,
                  f"{doc_id} ({source}) lost {loss:.1%} of its characters unflagged; the bound is {limits[source]:.0%}")
    return {"rows": rows, "edited": edited, "edit_flagged": flagged}


class Steps:
    """Seconds per step, reported in the final JSON line (where the time goes)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str, *args: str, expect: int = 0) -> str:
        t0 = time.perf_counter()
        out = moelab(*args, expect=expect)
        self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - t0, 1)
        return out


STEPS = Steps()


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", default=None, help="Work in this folder and keep it (default: a temp folder, removed).")
    parser.add_argument("--docs", type=int, default=20, help="Documents per source.")
    args = parser.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="moelab-newcomer-"))
    t0 = time.perf_counter()
    step = STEPS
    try:
        texts = debian_texts(args.docs + 1)
        check(len(texts) >= 2, f"found text for only {list(texts)} on this machine")
        late = {s: docs.pop() for s, docs in texts.items() if len(docs) > args.docs}  # held back: the changed input
        files = write_corpus(work / "corpus", texts, n_dups=5)
        cfg_path = work / "newcomer.yaml"
        cfg_path.write_text(yaml.safe_dump(recipe(work, files)))
        cfg = str(cfg_path)
        step("config check", "config", "check", cfg)

        step("filter", "data", "filter", cfg, "--workers", "0")
        out = work / "filtered"
        accounting = check_accounting(out, count_lines(files))
        edits = check_edits(out, edit_limits(cfg_path))
        check(list((out / "work").rglob("*.parquet")) != [], "the filter left no work files; the next check means little")

        for stage in ("label", "train", "calibrate", "run"):
            step(f"score {stage}", "score", stage, cfg)
        scored = scored_ids(work / "scorer")
        check(sorted(scored) == sorted(written_ids(out)), f"the scorer scored {len(scored)} rows, {len(set(scored))} "
              f"distinct, for {accounting['written']} documents the filter declared")
        labels = pq.read_table(work / "scorer" / "labels.parquet", columns=["id"]).column("id").to_pylist()
        kept = set(written_ids(out))
        check(all(i in kept for i in labels), "the oracle labelled a document the filter did not keep")

        tok_out = step("tokenize", "data", "tokenize", cfg)
        check("items built" in tok_out, f"tokenize printed no build line:\n{tok_out}")
        step("train", "train", cfg, "--no-ray")
        refused = step("train refused", "train", cfg, "--no-ray", expect=2)
        check("already holds a run" in refused, f"a second run under the same name was not refused:\n{refused}")
        changed = step("train refused", "train", cfg, "--no-ray", "--resume", "train.steps=4", expect=2)
        check("--allow-config-change" in changed, f"a schedule-changing resume was not refused:\n{changed}")
        step("train resume", "train", cfg, "--no-ray", "--resume", "train.steps=4", "--allow-config-change")
        change_log = work / "runs" / "newcomer" / "config-changes.jsonl"
        check(change_log.is_file() and "train.steps" in change_log.read_text(), "the allowed change was not recorded")
        metrics = [json.loads(line) for line in (work / "runs" / "newcomer" / "metrics.jsonl").read_text().splitlines()]
        steps = [m["step"] for m in metrics if "step" in m and "loss" in m]
        check(steps == sorted(set(steps)), f"metrics hold overlapping steps (two runs mixed): {steps}")

        inspect = step("inspect", "data", "inspect", str(out))
        check("funnel:" in inspect and "ids:" in inspect, f"data inspect printed no funnel or id counts:\n{inspect}")

        # a rerun skips everything
        before = (out / "manifest.json").read_text()
        step("filter rerun", "data", "filter", cfg, "--workers", "0")
        check((out / "manifest.json").read_text() == before, "a filter rerun changed its output")
        rerun = _last_json(step("score rerun", "score", "run", cfg))
        check(rerun["shards_scored"] == 0 and rerun["shards_skipped_done"] >= 1, f"a score rerun scored again: {rerun}")
        check("items built 0" in step("tokenize rerun", "data", "tokenize", cfg), "a tokenize rerun built items again")

        # a changed input rebuilds, in place, what depends on it: the filter output, its scores, the tokens
        first, extra = next((files[s], late[s]) for s in files if s in late)
        with open(first, "ab") as fh:
            fh.write((json.dumps({"id": "late-addition", "text": extra}) + "\n").encode())
        rebuilt = step("filter changed input", "data", "filter", cfg, "--workers", "0")
        check("inputs changed" in rebuilt, f"the filter did not say why it rebuilt:\n{rebuilt[-2000:]}")
        check((out / "manifest.json").read_text() != before, "a changed input left the filter output as it was")
        check(json.loads((out / "stats.json").read_text()).get("rebuilt"), "stats.json does not record the rebuild")
        after = check_accounting(out, count_lines(files))
        check(after["records"] == accounting["records"] + 1, f"the rebuild read {after['records']} records, expected "
              f"{accounting['records'] + 1}")
        check_edits(out, edit_limits(cfg_path))
        again = _last_json(step("score changed input", "score", "run", cfg))
        check(again["shards_scored"] >= 1, f"the rebuilt filter output was not scored: {again}")
        check(sorted(scored_ids(work / "scorer")) == sorted(written_ids(out)),
              "the scores do not match the rebuilt filter output exactly")
        tokens = step("tokenize changed input", "data", "tokenize", cfg)
        check("items built 0" not in tokens, f"the token shards were not rebuilt from the new filter output:\n{tokens}")
        return {"ok": True, "sources": {k: len(v) for k, v in texts.items()}, "accounting": accounting,
                "edits": edits, "scored": len(scored), "labelled": len(labels), "rebuilt": after,
                "seconds": round(time.perf_counter() - t0, 1), "steps": step.seconds}
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def _last_json(output: str) -> dict:
    """The JSON object `moelab score run` prints last (it may follow progress lines)."""
    start = output.rfind("\n{")
    text = output[start + 1:] if start >= 0 else output[output.index("{"):]
    return json.JSONDecoder().raw_decode(text)[0]  # stderr may follow the object


if __name__ == "__main__":
    try:
        result = main()
    except Broken as exc:
        print(f"newcomer check FAILED: {exc}", file=sys.stderr)
        print(json.dumps({"ok": False, "broken": str(exc)[:2000], "steps": STEPS.seconds}))
        sys.exit(1)
    print(json.dumps(result))
