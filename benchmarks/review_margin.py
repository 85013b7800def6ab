"""How far clean text and planted garbage fail Gopher's layout rules, to set the review margins.

Why: under layout review (`perplexity.review_layout`) a Gopher symbol or alphabetic-word failure
only flags a document, and the source's model keeps any flagged document whose word order reads as
natural, however far it failed; so prose with a `#` on every other word (5x the limit) was kept.
A failure past the rule's `review_margin` (times over its limit, `filters/base.py:over/short`) now
removes outright. This measures the severity of every Gopher layout flag on clean text not used to
tune the filter, and on planted documents built from that text, with the margins off, and then the
share of each that the configured defaults remove.

Clean, held out (on a stock Debian machine with Python): Go sources anywhere on the machine,
LaTeX files shipped by Python packages, Spanish and English man pages (rendered by `man`),
README/NEWS files under /usr/share/doc, the Python manual (`pydoc_data.topics`, with its grammar
and option tables), each run through the web chain and the science chain (LaTeX and code stripped
from the prose, as that chain does), and code (Go, shell, C, JavaScript files on the machine) also
through the web chain without language ID, the only way code reaches Gopher's rules. Only documents
the chain keeps are counted: a margin changes nothing for a document another rule removes. Planted: the English and Spanish documents with `#` or `…`
before every 2nd to 4th word (2.5-6x Gopher's 0.1), and prose interleaved with rows of numbers to
an alphabetic-word share of about 0.62 (Gopher's minimum: 0.8).

Each flagged document's share of code-shaped lines (`gopher_quality.code_line_share`) is recorded
too: a document above `margin_code_lines` is past no margin (code is left to the review), so
`removed_at_default_margin` counts only prose-shaped documents past their rule's margin, and
`past_margin_code_shaped` the code-shaped ones the margin would have removed.

Run: `.venv/bin/python benchmarks/review_margin.py`; last line one JSON object, also written to
benchmarks/results/review_margin.json.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]  # benchmarks/tokenize.py shadows the stdlib
sys.path.insert(0, str(_HERE.parent))

from benchmarks.edit_loss import _every, _read, man_pages  # noqa: E402

RULES = ("too_many_hashes", "too_many_ellipses", "too_many_bullet_lines", "too_many_ellipsis_lines", "too_few_alpha_words")


def _find(pattern: str) -> list[Path]:
    found = subprocess.run(["find", "/", "(", "-path", "/proc", "-o", "-path", "/sys", "-o", "-path", "/work", ")", "-prune",
                            "-o", "-name", pattern, "-type", "f", "-print"], capture_output=True, text=True).stdout.split()
    return sorted(Path(p) for p in found)


def spanish_man_pages() -> list[str]:
    import os

    env = {**os.environ, "MANWIDTH": "80", "LC_ALL": "C.UTF-8"}
    out = []
    for p in sorted(Path("/usr/share/man/es").glob("man*/*.gz")):
        raw = subprocess.run(["man", "-l", str(p)], env=env, capture_output=True, timeout=30).stdout
        text = subprocess.run(["col", "-bx"], input=raw, capture_output=True).stdout.decode("utf-8", "replace")
        if len(text) > 1000:
            out.append(text)
    return out


def clean_sources(n: int) -> dict[str, list[str]]:
    import pydoc_data.topics as topics

    doc = Path("/usr/share/doc")
    readmes = [p for p in doc.glob("*/*") if p.is_file() and p.name.split(".")[0] in ("README", "NEWS")
               and p.suffix in ("", ".gz", ".txt")]
    manual = [topics.topics[k] for k in sorted(topics.topics) if len(topics.topics[k]) >= 1000]
    return {
        "go_code": _read(_find("*.go"), 200),
        "shell_code": _read(_every(_find("*.sh"), n), 200),
        "c_code": _read(_every(_find("*.c"), n), 200),
        "js_code": _read(_every(_find("*.js"), n), 200),
        "latex": _read(_find("*.tex"), 200),
        "man_es": spanish_man_pages(),
        "man_en": man_pages(n),
        "readme_news": _read(_every(readmes, n)),
        "python_manual": manual[:: max(1, len(manual) // n)][:n],
    }


def plant(texts: list[str], rng: random.Random) -> dict[str, list[str]]:
    """Symbol plants at 2.5-6x the limit and number-table plants at an alphabetic share near 0.62."""
    hashes, dots, tables = [], [], []
    for t in texts:
        words = t.split()
        if len(words) < 80:
            continue
        every = rng.choice((2, 3, 4))  # a mark before every 2nd-4th word: 0.5-0.25 per word, 5-2.5x the limit
        for marks, mark in ((hashes, "#"), (dots, "…")):
            marks.append(" ".join(f"{mark}{w}" if i % every == 0 else w for i, w in enumerate(words)))
        rows, out, alpha = [], [], 0
        for i in range(0, len(words), 12):
            out.append(" ".join(words[i : i + 12]))
            alpha += len(words[i : i + 12])
            rows = [f"{rng.randint(1, 9999)}" for _ in range(7)]
            out.append(" ".join(rows))
        tables.append("\n".join(out))
    return {"hashes": hashes, "ellipses": dots, "number_tables": tables}


def severities(texts: list[str], kind: str) -> list[tuple[str, float, float]]:
    """(rule, severity, code-line share) of each document's Gopher layout flag, margins off."""
    from services.data_filter.accounting import Chain
    from services.data_filter.filters import build_chain
    from services.data_filter.filters.base import Doc, reviews_layout
    from services.data_filter.filters.gopher_quality import code_line_share
    from shared.config.chains import ChainConfig, deep_merge, default_chain

    language = {"enabled": False} if kind == "web_no_language" else {"languages": ["en", "es"]}
    base = "web" if kind == "web_no_language" else kind
    cfg = ChainConfig.model_validate(deep_merge(default_chain(base), {"gopher_quality": {"review_margin": {}},
                                                                      "language": language}))
    chain = Chain(build_chain(cfg), review=reviews_layout(cfg))
    out = []
    for i, t in enumerate(texts):
        d = Doc(str(i), t, "x", kind=base)
        hit = chain.run(d)
        flag = d.meta.get("layout_flag", "")
        if hit is None and flag.startswith("gopher_quality:"):
            out.append((flag.split(":", 1)[1], d.meta.get("layout_severity"), code_line_share(t)))
        elif hit is None:
            out.append(("not_flagged", 0.0, 0.0))
        else:
            out.append((f"removed:{hit[0]}:{hit[1]}", 0.0, 0.0))
    return out


def summarise(found: list[tuple[str, float, float]], margins: dict[str, float], code_lines: float) -> dict:
    per_rule: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for rule, sev, share in found:
        if rule in RULES:
            per_rule[rule].append((sev, share))

    def past(sev: float, rule: str) -> bool:
        return sev > margins.get(rule, float("inf"))

    return {"docs": len(found),
            "flagged": {r: {"n": len(v), "min_severity": round(min(s for s, _ in v), 3),
                            "max_severity": round(max(s for s, _ in v), 3),
                            "max_code_line_share": round(max(c for _, c in v), 3),
                            "removed_at_default_margin": sum(1 for s, c in v if past(s, r) and c <= code_lines),
                            "past_margin_code_shaped": sum(1 for s, c in v if past(s, r) and c > code_lines),
                            "code_line_share_past_margin": sorted(round(c, 3) for s, c in v if past(s, r))}
                        for r, v in sorted(per_rule.items())},
            "other": dict(sorted((k, sum(1 for r, _, _ in found if r == k)) for k in {r for r, _, _ in found if r not in RULES}))}


def main() -> None:
    from shared.config.filters import GopherQualityConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-source", type=int, default=40)
    ap.add_argument("--out", type=Path, default=_HERE / "results" / "review_margin.json")
    args = ap.parse_args()
    margins, code_lines = GopherQualityConfig().review_margin, GopherQualityConfig().margin_code_lines
    clean = clean_sources(args.per_source)
    rng = random.Random(7)
    planted = plant(clean["man_es"] + clean["readme_news"] + clean["python_manual"], rng)
    result: dict = {"benchmark": "review_margin", "margins": margins, "margin_code_lines": code_lines, "clean": {}, "planted": {}}
    for name, texts in clean.items():
        # code reaches Gopher in a prose chain only without language ID (which removes it first)
        for kind in ("web", "science", "web_no_language"):
            result["clean"][f"{name}/{kind}"] = summarise(severities(texts, kind), margins, code_lines)
    for name, texts in planted.items():
        result["planted"][f"{name}/web"] = summarise(severities(texts, "web"), margins, code_lines)
    clean_max: dict[str, float] = defaultdict(float)
    for r in result["clean"].values():
        for rule, d in r["flagged"].items():
            clean_max[rule] = max(clean_max[rule], d["max_severity"])
    result["clean_max_severity"] = dict(sorted(clean_max.items()))
    result["clean_removed_by_margin"] = sum(d["removed_at_default_margin"] for r in result["clean"].values()
                                            for d in r["flagged"].values())
    planted_flagged = sum(d["n"] for r in result["planted"].values() for d in r["flagged"].values())
    result["planted_flagged"] = planted_flagged
    result["planted_removed_by_margin"] = sum(d["removed_at_default_margin"] for r in result["planted"].values()
                                              for d in r["flagged"].values())
    result["clean_past_margin_code_shaped"] = sum(d["past_margin_code_shaped"] for r in result["clean"].values()
                                                  for d in r["flagged"].values())
    result["planted_max_code_line_share"] = max((d["max_code_line_share"] for r in result["planted"].values()
                                                 for d in r["flagged"].values()), default=0.0)
    for section in ("clean", "planted"):
        for name, r in result[section].items():
            print(f"{section:<8}{name:<26}{r['docs']:>5}  " + "  ".join(
                f"{k} n={d['n']} max={d['max_severity']} cut={d['removed_at_default_margin']}" for k, d in r["flagged"].items()))
    from shared.data.atomic import atomic_write_json

    atomic_write_json(args.out, result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
