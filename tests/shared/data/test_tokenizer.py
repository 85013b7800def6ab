"""Tokenizer: exact round-trips, a separator no document can forge, and a hash that catches edits."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shared.data.tokenizer import (
    CONFIG_FILE,
    TOKENIZER_FILE,
    TokenizerError,
    load_tokenizer,
    token_dtype,
    train_tokenizer,
)
from tests.shared.data.conftest import UNICODE_SAMPLES, WHITESPACE_SAMPLES


def test_round_trip_is_exact_on_unicode_code_and_whitespace(tokenizer, texts):
    samples = UNICODE_SAMPLES + WHITESPACE_SAMPLES + texts["code"][:10] + texts["web"][:5]
    for text in samples:
        assert tokenizer.decode(tokenizer.encode(text)) == text
    batch = tokenizer.encode_batch(samples)
    assert [tokenizer.decode(ids) for ids in batch] == samples


def test_unseen_scripts_round_trip_through_byte_fallback(tokenizer):
    # Scripts absent from the training text still encode: byte-level BPE has no unknown token.
    text = "ᚠᛇᚻ᛫ᛒᛦᚦ ⠁⠃⠉ ꦲꦏ꧀ꦱꦫ 𓀀𓁐 ☃︎"
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert len(ids) >= len(text.encode("utf-8")) // 4


def test_literal_separator_text_is_not_the_separator_token(tokenizer):
    ids = tokenizer.encode("before <|endoftext|> after")
    assert tokenizer.eos_id not in ids
    assert tokenizer.decode(ids) == "before <|endoftext|> after"


def test_saved_with_config_and_hash_and_reloads_identically(tokenizer, texts):
    folder = tokenizer.path.parent
    meta = json.loads((folder / CONFIG_FILE).read_text())
    assert meta["sha256"] == tokenizer.hash and meta["vocab_size"] == 1024 and meta["eos_token"] == "<|endoftext|>"
    again = load_tokenizer(folder)
    assert again.hash == tokenizer.hash and again.vocab_size == 1024 and again.eos_id == tokenizer.eos_id
    sample = texts["code"][3]
    assert again.encode(sample) == tokenizer.encode(sample)


def test_training_is_deterministic(tmp_path, texts):
    corpus = texts["web"][:30]
    a = train_tokenizer(corpus, tmp_path / "a", vocab_size=400)
    b = train_tokenizer(corpus, tmp_path / "b", vocab_size=400)
    assert a.hash == b.hash


def test_edited_tokenizer_file_fails_its_hash(tmp_path, texts):
    train_tokenizer(texts["web"][:20], tmp_path / "t", vocab_size=300)
    path = tmp_path / "t" / TOKENIZER_FILE
    path.write_text(path.read_text().replace('"<|endoftext|>"', '"<|eot|>"'))
    with pytest.raises(TokenizerError, match="does not match"):
        load_tokenizer(tmp_path / "t")


def test_foreign_tokenizer_json_loads_and_needs_its_separator(tmp_path, tokenizer):
    foreign = tmp_path / "foreign.json"
    foreign.write_bytes(tokenizer.path.read_bytes())  # a bare tokenizer.json without our config
    assert load_tokenizer(foreign).eos_id == tokenizer.eos_id
    with pytest.raises(TokenizerError, match="<\\|im_end\\|>"):
        load_tokenizer(foreign, eos_token="<|im_end|>")
    with pytest.raises(TokenizerError, match="no tokenizer"):
        load_tokenizer(tmp_path / "missing")


def test_token_dtype_is_uint16_until_the_vocabulary_outgrows_it():
    assert token_dtype(1024) == np.uint16
    assert token_dtype(65_536) == np.uint16
    assert token_dtype(65_537) == np.uint32
    assert token_dtype(200_019) == np.uint32
