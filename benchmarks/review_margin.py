"""How far clean text and planted garbage fail the reviewed layout rules, to set the review margins.

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
too: a document above `margin_code_lines` is past no Gopher margin (code is left to the review), so
`removed_at_default_margin` counts only prose-shaped documents past their rule's margin, and
`past_margin_code_shaped` the code-shaped ones the margin would have removed.

The repetition, FineWeb and C4 layout rules are measured the same way (`<filter>:<reason>` keys;
Gopher's keep their bare names). Their plants fail them far: short lines repeated under every line
of prose (`Reply`, `Share`: the repetition line count), short paragraphs repeated between
paragraphs (`Advertisement`: the paragraph count), a boilerplate sentence every 6th-10th line
(FineWeb's duplicated-line characters), and prose broken after every 1-3 words (FineWeb's newlines
per word and short lines). For these rules `removed_by_margins` is what the chain with the configured margins
actually removes of the documents that chain without margins flagged and kept. The punctuated-line
minimum and C4's sentence count have no margin; their severities are recorded to show why.

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
# the other filters' layout rules, keyed `<filter>:<reason>`
OTHER_RULES = ("repetition:dup_para_frac", "repetition:dup_line_frac", "fineweb:line_punct_ratio", "fineweb:short_line_ratio",
               "fineweb:dup_line_char_ratio", "fineweb:newline_ratio", "c4:curly_bracket", "c4:too_few_sentences")
BOILERPLATE = "Subscribe to our newsletter to get the latest stories delivered to your inbox every week."


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
        "shell_sessions": shell_sessions(manual[:: max(1, len(manual) // n)][:n]),
    }


def shell_sessions(texts: list[str]) -> list[str]:
    """Handbook-style pages: prose around a shell session that repeats its commands 2-5 times, the layout
    the repetition rules' line count flags for review rather than removes."""
    out = []
    for i, t in enumerate(texts):
        lines = [ln for ln in t.splitlines() if ln.strip()]
        if len(lines) < 3:
            continue
        session = ["$ pwd", "/home/user", "$ ls"] * (2 + i % 4)
        out.append("\n".join(lines[:2] + session + lines[-1:]))
    return out


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
    return {"hashes": hashes, "ellipses": dots, "number_tables": tables, **plant_repeats(texts, rng)}


def _prose_lines(text: str, width: int = 12) -> list[str]:
    words = text.split()
    return [" ".join(words[i : i + width]) for i in range(0, len(words), width)]


def plant_repeats(texts: list[str], rng: random.Random) -> dict[str, list[str]]:
    """Plants far past the repetition and FineWeb layout limits, built from the same clean prose."""
    short_lines, short_paras, boiler, broken = [], [], [], []
    for t in texts:
        if len(t.split()) < 80:
            continue
        lines = _prose_lines(t)
        # two short lines under every prose line: about 2/3 of the lines repeat (2.2x the 0.3 limit)
        short_lines.append("\n".join(x for line in lines for x in (line, "Reply", "Share")))
        # a short paragraph or two between paragraphs of three lines
        paras = ["\n".join(lines[i : i + 3]) for i in range(0, len(lines), 3)]
        ads = ("Advertisement", "Continue reading below")
        short_paras.append("\n\n".join(x for para in paras for x in (para, *ads[: rng.choice((1, 2))])))
        # a boilerplate sentence after every 6th-10th line: 10-17% of the characters in repeated lines (10-17x
        # FineWeb's 1%, under the repetition rule's hard 20%)
        every = rng.choice((6, 8, 10))
        boiler.append("\n".join(x for i, line in enumerate(lines) for x in ((line, BOILERPLATE) if i % every == 0 else (line,))))
        # prose broken after every 1-3 words (1.1-3.3x the 0.3 newlines per word)
        k = rng.choice((1, 2, 3))
        words = t.split()
        broken.append("\n".join(" ".join(words[i : i + k]) for i in range(0, len(words), k)))
    return {"repeated_short_lines": short_lines, "repeated_short_paragraphs": short_paras, "boilerplate_lines": boiler,
            "word_per_line": broken}


def _chain(kind: str, margins: bool):
    from services.data_filter.accounting import Chain
    from services.data_filter.filters import build_chain
    from services.data_filter.filters.base import reviews_layout
    from shared.config.chains import ChainConfig, deep_merge, default_chain

    language = {"enabled": False} if kind == "web_no_language" else {"languages": ["en", "es"]}
    base = "web" if kind == "web_no_language" else kind
    off = {} if margins else {name: {"review_margin": {}} for name in ("gopher_quality", "repetition", "fineweb")}
    cfg = ChainConfig.model_validate(deep_merge(default_chain(base), {**off, "language": language}))
    return Chain(build_chain(cfg), review=reviews_layout(cfg)), base


def _key(flag: str) -> str:
    name, _, reason = flag.partition(":")
    return reason if name == "gopher_quality" else flag


def severities(texts: list[str], kind: str) -> list[tuple[str, float, float, bool]]:
    """(rule, severity, code-line share, removed with the margins on) of each document's first layout
    flag with the margins off; the margins-on chain is run only on the documents flagged and kept."""
    from services.data_filter.filters.base import Doc
    from services.data_filter.filters.gopher_quality import code_line_share

    without, base = _chain(kind, margins=False)
    with_margins, _ = _chain(kind, margins=True)
    out = []
    for i, t in enumerate(texts):
        d = Doc(str(i), t, "x", kind=base)
        hit = without.run(d)
        flag = d.meta.get("layout_flag", "")
        if hit is None and flag:
            removed = with_margins.run(Doc(str(i), t, "x", kind=base)) is not None
            out.append((_key(flag), d.meta.get("layout_severity") or 0.0, code_line_share(t), removed))
        elif hit is None:
            out.append(("not_flagged", 0.0, 0.0, False))
        else:
            out.append((f"removed:{hit[0]}:{hit[1]}", 0.0, 0.0, False))
    return out


def summarise(found: list[tuple[str, float, float, bool]], margins: dict[str, float], code_lines: float) -> dict:
    per_rule: dict[str, list[tuple[float, float, bool]]] = defaultdict(list)
    for rule, sev, share, removed in found:
        if rule in RULES or rule in OTHER_RULES:
            per_rule[rule].append((sev, share, removed))

    def past(sev: float, rule: str) -> bool:
        return sev > margins.get(rule, float("inf"))

    def gopher(r: str, v: list[tuple[float, float, bool]]) -> dict:
        return {"removed_at_default_margin": sum(1 for s, c, _ in v if past(s, r) and c <= code_lines),
                "past_margin_code_shaped": sum(1 for s, c, _ in v if past(s, r) and c > code_lines),
                "code_line_share_past_margin": sorted(round(c, 3) for s, c, _ in v if past(s, r))}

    return {"docs": len(found),
            "flagged": {r: {"n": len(v), "min_severity": round(min(s for s, _, _ in v), 3),
                            "max_severity": round(max(s for s, _, _ in v), 3),
                            "max_code_line_share": round(max(c for _, c, _ in v), 3),
                            "removed_by_margins": sum(1 for *_, removed in v if removed),
                            **(gopher(r, v) if r in RULES else {})}
                        for r, v in sorted(per_rule.items())},
            "other": dict(sorted((k, sum(1 for r, *_ in found if r == k))
                                 for k in {r for r, *_ in found if r not in RULES and r not in OTHER_RULES}))}


def main() -> None:
    from shared.config.filters import FineWebConfig, GopherQualityConfig, RepetitionConfig
    from shared.provenance import tree_commit

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-source", type=int, default=40)
    ap.add_argument("--out", type=Path, default=_HERE / "results" / "review_margin.json")
    args = ap.parse_args()
    margins, code_lines = GopherQualityConfig().review_margin, GopherQualityConfig().margin_code_lines
    margins = {**margins, **{f"repetition:{r}": m for r, m in RepetitionConfig().review_margin.items()},
               **{f"fineweb:{r}": m for r, m in FineWebConfig().review_margin.items()}}
    clean = clean_sources(args.per_source)
    rng = random.Random(7)
    planted = plant(clean["man_es"] + clean["readme_news"] + clean["python_manual"], rng)
    result: dict = {"benchmark": "review_margin", "commit": tree_commit(), "margins": margins, "margin_code_lines": code_lines,
                    "clean": {}, "planted": {}}
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
    planted_min: dict[str, float] = {}
    for r in result["planted"].values():
        for rule, d in r["flagged"].items():
            planted_min[rule] = min(planted_min.get(rule, float("inf")), d["min_severity"])
    result["planted_min_severity"] = dict(sorted(planted_min.items()))

    def total(section: str, key: str, rules: tuple[str, ...]) -> int:
        return sum(d.get(key, 0) for r in result[section].values() for rule, d in r["flagged"].items() if rule in rules)

    result["clean_removed_by_margin"] = total("clean", "removed_at_default_margin", RULES)
    result["planted_flagged"] = total("planted", "n", RULES)
    result["planted_removed_by_margin"] = total("planted", "removed_at_default_margin", RULES)
    result["clean_past_margin_code_shaped"] = total("clean", "past_margin_code_shaped", RULES)
    result["planted_max_code_line_share"] = max((d["max_code_line_share"] for r in result["planted"].values()
                                                 for rule, d in r["flagged"].items() if rule in RULES), default=0.0)
    result["clean_min_code_line_share_past_margin"] = min((c for r in result["clean"].values() for rule, d in r["flagged"].items()
                                                           if rule in RULES for c in d["code_line_share_past_margin"]), default=None)
    # the other filters' rules: what the chain with their margins removed of what it flagged and kept without
    result["other_clean_flagged"] = total("clean", "n", OTHER_RULES)
    result["other_clean_removed_by_margins"] = total("clean", "removed_by_margins", OTHER_RULES)
    result["other_planted_flagged"] = total("planted", "n", OTHER_RULES)
    result["other_planted_removed_by_margins"] = total("planted", "removed_by_margins", OTHER_RULES)
    for section in ("clean", "planted"):
        for name, r in result[section].items():
            print(f"{section:<8}{name:<26}{r['docs']:>5}  " + "  ".join(
                f"{k} n={d['n']} min={d['min_severity']} max={d['max_severity']} cut={d['removed_by_margins']}"
                for k, d in r["flagged"].items()))
    from shared.data.atomic import atomic_write_json

    atomic_write_json(args.out, result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
