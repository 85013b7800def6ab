"""A tokenizer trained in `tokenizer.out_dir` is reused only for the same settings *and* the same
training documents; other documents under the same file names retrain it, with the reason logged."""

from __future__ import annotations

from pathlib import Path

from shared.config import load_config
from shared.data.prepare import ensure_tokenizer
from tests.shared.data.conftest import python_texts, write_docs

ROOT = Path(__file__).resolve().parents[3]


def _cfg(tmp_path: Path, *overrides: str):
    return load_config(ROOT / "configs" / "tiny.yaml", [
        f"mixture.documents=[{tmp_path}/docs/*.parquet]", f"mixture.tokenizer.out_dir={tmp_path}/tok",
        "mixture.tokenizer.vocab_size=400", "model.vocab_size=512", "tracker.mode=disabled", *overrides])


def _docs(tmp_path: Path, texts: list[str]) -> None:
    (tmp_path / "docs").mkdir(exist_ok=True)
    write_docs(tmp_path / "docs" / "part-0.parquet", {"web": texts})


def test_same_settings_and_documents_reuse_the_trained_tokenizer(tmp_path):
    _docs(tmp_path, python_texts()["web"][:80])
    first = ensure_tokenizer(_cfg(tmp_path))
    stamp = (tmp_path / "tok" / "tokenizer.json").stat().st_mtime_ns
    again = ensure_tokenizer(_cfg(tmp_path))
    assert again.hash == first.hash
    assert (tmp_path / "tok" / "tokenizer.json").stat().st_mtime_ns == stamp, "retrained although nothing changed"


def test_other_documents_under_the_same_file_name_retrain_it_and_say_why(tmp_path, caplog):
    prose = python_texts()["web"]
    _docs(tmp_path, prose[:80])
    first = ensure_tokenizer(_cfg(tmp_path))
    _docs(tmp_path, python_texts()["code"][:40])  # same path, same settings, other texts
    with caplog.at_level("WARNING"):
        second = ensure_tokenizer(_cfg(tmp_path))
    assert second.hash != first.hash
    assert "training documents changed" in caplog.text


def test_changed_settings_retrain_it_naming_the_setting(tmp_path, caplog):
    _docs(tmp_path, python_texts()["web"][:80])
    ensure_tokenizer(_cfg(tmp_path))
    with caplog.at_level("WARNING"):
        tok = ensure_tokenizer(_cfg(tmp_path, "mixture.tokenizer.vocab_size=450"))
    assert tok.vocab_size <= 450 and "vocab_size: 400 -> 450" in caplog.text


def test_documents_beyond_train_docs_do_not_retrain_it(tmp_path):
    prose = python_texts()["web"]
    _docs(tmp_path, prose[:60])
    first = ensure_tokenizer(_cfg(tmp_path, "mixture.tokenizer.train_docs=50"))
    _docs(tmp_path, prose[:50] + prose[100:120])  # the first 50, which train it, are the same
    assert ensure_tokenizer(_cfg(tmp_path, "mixture.tokenizer.train_docs=50")).hash == first.hash
