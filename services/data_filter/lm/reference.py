"""Reference prose for the perplexity filter: the text the embedded model and the cutoffs come from.

Default: the Python reference manual's prose that ships with CPython (`pydoc_data.topics`,
~465k characters of edited English) until the demo corpus's encyclopedic slice exists; any UTF-8
text file (or a JSONL file with a `text` field) can be given by path (`perplexity.reference_text`).
"""

from __future__ import annotations

import json
from pathlib import Path


def load_reference_lines(path: str | None = None) -> list[str]:
    """Lines of real prose (4+ words each), in a fixed order."""
    if path is None:
        import pydoc_data.topics as topics

        text = "\n".join(topics.topics[k] for k in sorted(topics.topics))
    else:
        p = Path(path).expanduser()
        if not p.is_file():
            raise FileNotFoundError(f"perplexity.reference_text {p} does not exist; give a UTF-8 text or JSONL file")
        raw = p.read_text(encoding="utf-8")
        if p.suffix == ".jsonl":
            raw = "\n".join(json.loads(line).get("text", "") for line in raw.splitlines() if line.strip())
        text = raw
    lines = [line.strip() for line in text.split("\n")]
    out = [line for line in lines if len(line.split()) >= 4]
    if len(out) < 50:
        raise ValueError(f"reference text has only {len(out)} prose lines (need >= 50) to estimate a model and cutoffs")
    return out


def windows(lines: list[str], size: int = 8) -> list[list[str]]:
    """Consecutive groups of `size` lines: the document-sized units the cutoffs are measured on."""
    return [lines[i : i + size] for i in range(0, len(lines), size)]
