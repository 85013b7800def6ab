"""Real documents shipped with Python, for tests, the benchmark and the offline demo.

Prose ("web" kind) comes from `pydoc_data.topics` (the language reference text behind `help()`),
cut into chunks of a few paragraphs; code comes from the standard library's own `.py` sources,
cut into chunks of lines. Deterministic for a given seed; needs no download and no data/ folder.
"""

from __future__ import annotations

import random
import sysconfig
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def _prose_chunks() -> list[str]:
    from pydoc_data.topics import topics

    chunks = []
    for name in sorted(topics):
        paras = [p.strip() for p in topics[name].split("\n\n") if p.strip()]
        step = 3
        for i in range(0, len(paras), step):
            text = "\n\n".join(paras[i : i + step])
            if len(text) >= 200:
                chunks.append(text)
    return chunks


@lru_cache(maxsize=1)
def _code_chunks(max_files: int = 400) -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.stat().st_size > 2000)[:max_files]
    chunks = []
    for f in files:
        lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
        for i in range(0, len(lines), 60):
            text = "\n".join(lines[i : i + 60])
            if len(text) >= 300:
                chunks.append(text)
    return chunks


def _cut(text: str, max_chars: int, sep: str) -> str:
    """The longest prefix of whole paragraphs/lines within max_chars (at least the first one, cut)."""
    if len(text) <= max_chars:
        return text
    parts, out = text.split(sep), ""
    for part in parts:
        if out and len(out) + len(sep) + len(part) > max_chars:
            break
        out = f"{out}{sep}{part}" if out else part
    return out[:max_chars]


def python_docs(n_web: int, n_code: int, seed: int = 0, max_chars: int = 0) -> list[dict]:
    """`n_web` prose chunks and `n_code` code chunks as dicts with id, text, source, kind.

    `max_chars` > 0 cuts each chunk at a paragraph (prose) or line (code) boundary, so a backbone
    with a small token budget sees the whole document the oracle rated.
    """
    rng = random.Random(seed)
    prose, code = _prose_chunks(), _code_chunks()
    if max_chars:
        prose = [_cut(t, max_chars, "\n\n") for t in prose]
        code = [_cut(t, max_chars, "\n") for t in code]
    if n_web > len(prose) or n_code > len(code):
        raise ValueError(f"asked for {n_web} prose/{n_code} code chunks; Python ships {len(prose)}/{len(code)}")
    docs = [{"id": f"web-{i:05d}", "text": t, "source": "pydoc", "kind": "web"}
            for i, t in enumerate(rng.sample(prose, n_web))]
    docs += [{"id": f"code-{i:05d}", "text": t, "source": "stdlib", "kind": "code"}
             for i, t in enumerate(rng.sample(code, n_code))]
    return docs


DEMO_KINDS = {"wiki": "web", "handbook": "web", "udhr": "web", "fortunes": "web", "python": "code", "go": "code",
              "metamath": "math", "sympy": "math", "sympy_physics": "science", "latex_science": "science"}


def demo_records(source: str) -> list[dict]:
    """The committed demo corpus's records of one source (data/demo/<source>.jsonl.gz), planted problems skipped.

    The benchmarks draw real multilingual prose and Python/Go code from it (text that Debian, npm
    and PyPI packages ship; data/demo/NOTICE) without running the data filter first.
    """
    import gzip
    import json

    path = Path(__file__).resolve().parents[2] / "data" / "demo" / f"{source}.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return [r for r in rows if isinstance(r.get("text"), str) and r["text"].strip()
            and not (r.get("meta") or {}).get("planted")]


def demo_pool(exclude: set[str] = frozenset()) -> list[dict]:
    """Every clean demo-corpus record not in `exclude`, as scorer documents (id, text, source, kind)."""
    return [{"id": r["id"], "text": r["text"], "source": s, "kind": k} for s, k in DEMO_KINDS.items()
            for r in demo_records(s) if r["id"] not in exclude]
