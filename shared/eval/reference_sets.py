"""The named reference sets bits per byte is measured on: `data/reference/<name>.jsonl`.

Why committed files and not a download: every run, on every machine, must score the same bytes,
or two BPB figures do not compare. The sets are built by scripts/build_reference_sets.py from
packages no training source uses (provenance and licences in data/reference/NOTICE). Records are
`{"id", "text", "meta"}`; a line that is not such a record is an error naming file and line, and
an empty set is an error, never a silent NaN.
"""

from __future__ import annotations

import json
from pathlib import Path

REFERENCE_DIR = Path(__file__).resolve().parents[2] / "data" / "reference"


class ReferenceSetError(ValueError):
    """A reference set that cannot be used (unknown name, malformed line, no texts)."""


def available_reference_sets(root: Path | None = None) -> list[str]:
    return sorted(p.stem for p in (root or REFERENCE_DIR).glob("*.jsonl"))


def read_reference_set(path: Path) -> list[str]:
    """The texts of one reference file, in order; errors name the file and line."""
    texts = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ReferenceSetError(f"{path}:{n}: not valid JSON ({e.msg}); rebuild with "
                                        "scripts/build_reference_sets.py") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("text"), str) or not rec["text"]:
                raise ReferenceSetError(f"{path}:{n}: a record needs a non-empty string field 'text'")
            texts.append(rec["text"])
    if not texts:
        raise ReferenceSetError(f"{path}: the reference set is empty; bits per byte needs at least one text")
    return texts


def load_reference_sets(names: list[str] | None = None, *, root: Path | None = None) -> dict[str, list[str]]:
    """name → texts for `names` (None: every set under `root`, default data/reference/)."""
    root = root or REFERENCE_DIR
    known = available_reference_sets(root)
    if names is None:
        names = known
        if not names:
            raise ReferenceSetError(f"no reference sets (*.jsonl) under {root}")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ReferenceSetError(f"unknown reference set(s) {unknown}; available under {root}: {known}")
    return {name: read_reference_set(root / f"{name}.jsonl") for name in names}
