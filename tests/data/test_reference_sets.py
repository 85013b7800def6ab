"""The committed evaluation data: reference sets and task files are well formed, match their manifest,
and share no text with any demo training source."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from shared.eval.reference_sets import (
    REFERENCE_DIR,
    ReferenceSetError,
    load_reference_sets,
    read_reference_set,
)

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo"
MIN_LINE = 30  # shorter lines ("return result", "Examples") are common to any two texts of a kind


def _long_lines(text: str) -> set[str]:
    return {" ".join(ln.split()) for ln in text.splitlines() if len(ln.strip()) >= MIN_LINE}


def _evaluation_texts() -> dict[str, list[str]]:
    out = dict(load_reference_sets())
    for path in sorted((REFERENCE_DIR / "tasks").glob("*.jsonl")):
        recs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        out[path.name] = [r["context"] + r["choices"][r["gold"]] for r in recs]
    return out


def test_prose_code_and_math_sets_are_committed_and_nonempty():
    sets = load_reference_sets()
    assert {"prose", "code", "math"} <= set(sets)
    assert all(len(texts) >= 40 for texts in sets.values())


def test_files_match_the_manifest():
    manifest = json.loads((REFERENCE_DIR / "manifest.json").read_text())
    for rel, entry in manifest["files"].items():
        data = (REFERENCE_DIR / rel).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], rel


def test_no_evaluation_text_appears_in_any_demo_training_source():
    demo_lines: set[str] = set()
    demo_docs: list[str] = []
    for path in sorted(DEMO.glob("*.jsonl*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as fh:  # bad.jsonl is broken on purpose
            for line in fh:
                try:
                    text = json.loads(line).get("text")
                except (json.JSONDecodeError, AttributeError):
                    continue
                if isinstance(text, str):
                    demo_lines |= _long_lines(text)
                    demo_docs.append(text)
    assert len(demo_docs) > 10_000
    shared = {name: sorted(set().union(*map(_long_lines, texts)) & demo_lines)
              for name, texts in _evaluation_texts().items()}
    assert not any(shared.values()), {k: v[:3] for k, v in shared.items() if v}


def test_malformed_reference_line_is_named_with_its_line_number(tmp_path):
    bad = tmp_path / "prose.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": \n', encoding="utf-8")
    with pytest.raises(ReferenceSetError, match=r"prose.jsonl:2: not valid JSON"):
        read_reference_set(bad)


def test_empty_or_unknown_reference_set_is_a_clear_error(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(ReferenceSetError, match="empty"):
        load_reference_sets(["empty"], root=tmp_path)
    with pytest.raises(ReferenceSetError, match=r"unknown reference set\(s\) \['nope'\]"):
        load_reference_sets(["nope"], root=tmp_path)
