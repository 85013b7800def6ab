"""How much of each kept document the web chain's edits take, on hard-wrapped text and on web prose.

Why: C4's line rule (keep lines ending in terminal punctuation) was written for web pages, where a
paragraph is one line; in hard-wrapped text (man pages, licences, Debian copyright files, the
Python manual's plain-text build, README/NEWS files) most lines end mid-sentence and are cut. The
chain bounds an edit (`max_edit_loss`, `large_edit` in the settings of every rewriting filter);
this measures where the bound falls and what each action would do, to choose the defaults.

Text (all shipped on a stock Debian machine with Python, nothing downloaded): English man pages
rendered by `man` at 80 columns, `/usr/share/common-licenses`, `/usr/share/doc/*/copyright`,
`/usr/share/doc/*/README*|NEWS*` (plain text), the Python manual (`pydoc_data.topics`), and as
web prose the demo corpus's Wikipedia and Debian handbook pages (data/demo). Each document runs
through the default web chain's streaming filters with the bound off (`max_edit_loss: 1`), so
the loss it reports is C4's and normalisation's unbounded edit; perplexity (fitted on a corpus)
is not run. Reported per source: documents, kept, the loss quantiles of kept documents, the
share of kept documents past 0.3/0.5/0.7, and the characters a reader gets under the published
rule (no bound), under `remove` and under `flag` at 0.5. The peer is the published C4 rule.

Run: `.venv/bin/python benchmarks/edit_loss.py [--per-source N]`; the last line is one JSON object,
also written to benchmarks/results/edit_loss.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]  # benchmarks/tokenize.py shadows the stdlib
sys.path.insert(0, str(_HERE.parent))

DEMO = _HERE.parent / "data" / "demo"
BOUNDS = (0.3, 0.5, 0.7)
HARD_WRAPPED = ("man_pages", "licences", "copyright", "python_manual", "readme_news")


def _every(paths: list[Path], n: int) -> list[Path]:
    """`n` paths at an even stride over the sorted list (a fixed, spread-out sample)."""
    paths = sorted(paths)
    if len(paths) <= n:
        return paths
    step = len(paths) / n
    return [paths[int(i * step)] for i in range(n)]


def man_pages(n: int) -> list[str]:
    env = {**os.environ, "MANWIDTH": "80", "MAN_KEEP_FORMATTING": "0", "LC_ALL": "C.UTF-8"}
    out = []
    for path in _every([p for p in Path("/usr/share/man/man1").glob("*.1.gz") if p.stat().st_size > 2500], n):
        try:
            raw = subprocess.run(["man", "-l", str(path)], env=env, capture_output=True, timeout=30, check=True).stdout
        except (subprocess.SubprocessError, OSError):
            continue
        text = subprocess.run(["col", "-bx"], input=raw, capture_output=True, check=True).stdout.decode("utf-8", "replace")
        if len(text) > 1000:
            out.append(text)
    return out


def _read(paths: list[Path], min_chars: int = 1000) -> list[str]:
    out = []
    for p in paths:
        try:
            data = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError, gzip.BadGzipFile):
            continue
        if len(text) >= min_chars:
            out.append(text)
    return out


def sources(n: int) -> dict[str, list[str]]:
    import pydoc_data.topics as topics

    doc = Path("/usr/share/doc")
    readmes = [p for p in doc.glob("*/*") if p.is_file() and p.name.split(".")[0] in ("README", "NEWS")
               and p.suffix in ("", ".gz", ".txt")]
    manual = [topics.topics[k] for k in sorted(topics.topics) if len(topics.topics[k]) >= 1000]
    step = max(1, len(manual) // n)

    def demo(name: str) -> list[str]:
        with gzip.open(DEMO / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
            docs = [json.loads(line)["text"] for line in f]
        docs = [d for d in docs if len(d) >= 1000]
        return docs[:: max(1, len(docs) // n)][:n]

    return {
        "man_pages": man_pages(n),
        "licences": _read(sorted(Path("/usr/share/common-licenses").iterdir())),
        "copyright": _read(_every(list(doc.glob("*/copyright")), n)),
        "python_manual": manual[::step][:n],
        "readme_news": _read(_every(readmes, n)),
        "web_wiki": demo("wiki"),
        "web_handbook": demo("handbook"),
    }


def measure(texts: list[str]) -> dict:
    from services.data_filter.accounting import Chain
    from services.data_filter.filters import build_chain
    from services.data_filter.filters.base import Doc, reviews_layout
    from shared.config.chains import ChainConfig, deep_merge, default_chain

    unbounded = {"max_edit_loss": 1.0}
    cfg = ChainConfig.model_validate(deep_merge(default_chain("web"), {"normalize": unbounded, "c4": unbounded}))
    chain = Chain(build_chain(cfg), review=reviews_layout(cfg))
    losses, originals, kept_chars = [], [], []
    for i, text in enumerate(texts):
        d = Doc(str(i), text, "x")
        if chain.run(d) is None:
            losses.append(1 - d.meta["chars_kept"] / d.meta["chars_original"])
            originals.append(d.meta["chars_original"])
            kept_chars.append(d.meta["chars_kept"])
    n = len(losses)
    order = sorted(losses)

    def q(p: float) -> float | None:
        return round(order[min(n - 1, int(p * n))], 3) if n else None

    total = sum(originals) or 1
    at = 0.5
    under = [k for k, loss in zip(kept_chars, losses, strict=True) if loss <= at]
    over_orig = [o for o, loss in zip(originals, losses, strict=True) if loss > at]
    return {
        "docs": len(texts), "kept": n, "loss_p10": q(0.1), "loss_p50": q(0.5), "loss_p90": q(0.9),
        **{f"past_{b}": round(sum(1 for x in losses if x > b) / n, 3) if n else None for b in BOUNDS},
        "chars_kept_published": round(sum(kept_chars) / total, 3),
        "chars_kept_remove_0.5": round(sum(under) / total, 3),
        "chars_kept_flag_0.5_whole": round((sum(under) + sum(over_orig)) / total, 3),
        "docs_removed_remove_0.5": len(over_orig),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-source", type=int, default=60, help="Documents sampled per source (licences: all).")
    ap.add_argument("--out", type=Path, default=_HERE / "results" / "edit_loss.json")
    args = ap.parse_args()
    texts = sources(args.per_source)
    rows = {name: measure(docs) for name, docs in texts.items()}
    print(f"{'source':<15}{'docs':>6}{'kept':>6}{'p10':>7}{'p50':>7}{'p90':>7}{'>0.3':>7}{'>0.5':>7}{'>0.7':>7}"
          f"{'chars:C4':>10}{'remove':>8}{'flag':>8}")
    for name, r in rows.items():
        print(f"{name:<15}{r['docs']:>6}{r['kept']:>6}{r['loss_p10']!s:>7}{r['loss_p50']!s:>7}{r['loss_p90']!s:>7}"
              f"{r['past_0.3']!s:>7}{r['past_0.5']!s:>7}{r['past_0.7']!s:>7}{r['chars_kept_published']:>10}"
              f"{r['chars_kept_remove_0.5']:>8}{r['chars_kept_flag_0.5_whole']:>8}")
    hard = [rows[s] for s in HARD_WRAPPED if rows[s]["kept"]]
    web = [rows[s] for s in rows if s.startswith("web_") and rows[s]["kept"]]
    result = {"benchmark": "edit_loss", "sources": rows,
              "hard_wrapped_past_0.5": round(sum(r["past_0.5"] * r["kept"] for r in hard) / sum(r["kept"] for r in hard), 3),
              "web_past_0.5": round(sum(r["past_0.5"] * r["kept"] for r in web) / sum(r["kept"] for r in web), 3)}
    from benchmarks.result_file import save_result

    save_result(args.out, result)  # with the commit, the machine, its threads and load
    print(json.dumps(result))


if __name__ == "__main__":
    main()
