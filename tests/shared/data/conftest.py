"""Real text for the data tests: the Python docs and stdlib sources that ship with Python, plus
hand-written unicode and whitespace-heavy samples; one tokenizer and one local shard build per session."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

UNICODE_SAMPLES = [
    "Grüße aus Köln — naïve café, façade, Æsir, ß, İstanbul.",
    "日本語のテキストと中文文本，还有한국어 문장입니다。",
    "Ελληνικά, русский текст, עברית מימין לשמאל, العربية أيضًا.",
    "emoji: 👩🏽‍🔬 🏳️‍🌈 🇯🇵 ❤️ 🙂 — combining: e\u0301 a\u0308 n\u0303; zero width: a\u200bb\u200dc",
    "math: ∀x∈ℝ, ∑ᵢ xᵢ² ≤ ∞; ℵ₀ ≠ 𝔠; 𝒜𝒷𝒸 𝟘𝟙𝟚",
    "control and odd: \x00\x01\x7f\ufeff\ufffd \U0010ffff end",
    "a literal separator in a document: <|endoftext|> must stay text",
]
WHITESPACE_SAMPLES = [
    "    indented\n\t\ttabs\n\n\n\n   trailing   \n",
    "\r\n\r\nwindows\r\nlines\r\n  \u00a0nbsp\u3000ideographic space\u2028line sep\u2029para",
    " " * 200 + "x" + "\t" * 50 + "\n" * 30,
    "",
]


def python_texts() -> dict[str, list[str]]:
    """Documentation topics from `pydoc_data` (prose) and stdlib modules (code)."""
    import json as json_mod
    import pydoc_data.topics as topics

    prose = [t for t in topics.topics.values() if t.strip()]
    stdlib = Path(json_mod.__file__).resolve().parent.parent
    code = [p.read_text(encoding="utf-8") for p in sorted(stdlib.glob("*.py"))[:60]]
    return {"web": prose, "code": code, "intl": UNICODE_SAMPLES * 3 + WHITESPACE_SAMPLES}


def write_docs(path: Path, texts: dict[str, list[str]], row_group_size: int = 25, extra_rows: list[dict] = ()) -> Path:
    rows = [
        {"id": f"{src}-{i}", "text": t, "source": src, "score": float(i % 5)}
        for src, docs in texts.items()
        for i, t in enumerate(docs)
    ]
    rows.extend(extra_rows)
    schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("source", pa.string()), ("score", pa.float64())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=row_group_size)
    return path


@pytest.fixture(scope="session")
def texts() -> dict[str, list[str]]:
    return python_texts()


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory, texts):
    from shared.data.tokenizer import train_tokenizer

    corpus = [t for docs in texts.values() for t in docs]
    return train_tokenizer(corpus, tmp_path_factory.mktemp("tok"), vocab_size=1024)


@pytest.fixture(scope="session")
def docs_path(tmp_path_factory, texts) -> Path:
    return write_docs(tmp_path_factory.mktemp("docs") / "docs.parquet", texts)


@pytest.fixture(scope="session")
def shards_root(tmp_path_factory, tokenizer, docs_path) -> Path:
    """A finished local build (no Ray) shared read-only by the mixture tests."""
    from shared.data.build import build_shards

    root = tmp_path_factory.mktemp("shards")
    build_shards([docs_path], tokenizer, root, docs_per_shard=40, use_ray=False, progress=False)
    assert json.loads((root / "manifest.json").read_text())["docs"] > 0
    return root
