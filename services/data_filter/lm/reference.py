"""A reference text the user names for the perplexity model (`perplexity.reference_text`).

By default the perplexity filter fits on each source's own documents; a named reference (any
UTF-8 text file, or JSONL with a `text` field) replaces the training text while the cut-offs stay
those of the source's own score distribution.
"""

from __future__ import annotations

import json
from pathlib import Path


def load_reference_texts(path: str) -> list[str]:
    """Documents of the reference: JSONL records' `text`, or blank-line-separated paragraphs."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"perplexity.reference_text {p} does not exist; give a UTF-8 text or JSONL file")
    raw = p.read_text(encoding="utf-8")
    if p.suffix == ".jsonl":
        texts = [json.loads(line).get("text", "") for line in raw.splitlines() if line.strip()]
    else:
        texts = [block.strip() for block in raw.split("\n\n")]
    texts = [t for t in texts if len(t.split()) >= 4]
    if len(texts) < 10:
        raise ValueError(f"perplexity.reference_text {p} has only {len(texts)} passages of 4+ words (need >= 10)")
    return texts
