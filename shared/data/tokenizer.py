"""Tokenizer: train a byte-level BPE with Hugging Face `tokenizers`, or load any `tokenizer.json`.

Why HF `tokenizers`: it is the well-kept Rust implementation behind GPT-2-style byte-level BPE
(Radford et al. 2019: bytes mapped to 256 printable symbols, so every string round-trips and there
is no unknown token). We add one special token, `<|endoftext|>`, that packing puts between
documents. Documents are encoded with `encode_special_tokens=True`, so a document that happens to
contain the literal text `<|endoftext|>` is split as ordinary text and can never forge a boundary.

A saved tokenizer is a folder with `tokenizer.json` (the HF file, loadable by `transformers`) and
`moelab_tokenizer.json` (our config and the sha256 of `tokenizer.json`). Every token shard records
that hash, so shards and tokenizer cannot be silently mismatched.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shared.data.atomic import atomic_write_bytes

EOS_TOKEN = "<|endoftext|>"
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "moelab_tokenizer.json"
UINT16_LIMIT = 1 << 16


class TokenizerError(ValueError):
    """A tokenizer that cannot be used (missing file, hash mismatch, no separator token)."""


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 while every id fits (vocab ≤ 65,536), else uint32: halves shard size for small vocabularies."""
    return np.dtype(np.uint16) if vocab_size <= UINT16_LIMIT else np.dtype(np.uint32)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class MoeTokenizer:
    """A loaded tokenizer plus what shards need: its hash, the separator id and the token dtype."""

    tokenizer: object  # tokenizers.Tokenizer (kept untyped so importing this module stays light)
    hash: str
    eos_id: int
    eos_token: str
    path: Path

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size(with_added_tokens=True))

    @property
    def dtype(self) -> np.dtype:
        return token_dtype(self.vocab_size)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Batch-encode documents (Rust, multi-threaded); no offsets, no post-processor tokens."""
        return [e.ids for e in self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def describe(self) -> dict:
        return {
            "hash": self.hash,
            "path": str(self.path),
            "vocab_size": self.vocab_size,
            "eos_token": self.eos_token,
            "eos_id": self.eos_id,
            "dtype": self.dtype.name,
        }


def train_tokenizer(
    texts: Iterable[str],
    out_dir: str | Path,
    vocab_size: int = 4096,
    min_frequency: int = 2,
    eos_token: str = EOS_TOKEN,
    extra_special_tokens: tuple[str, ...] = (),
    extra_config: dict | None = None,
) -> MoeTokenizer:
    """Train a byte-level BPE (GPT-2 pre-tokenizer regex, full 256-byte initial alphabet) and save it.

    `vocab_size` counts the 256 byte symbols, the merges and the special tokens. The folder is
    written atomically file by file, `moelab_tokenizer.json` last, so a folder with that file is a
    finished tokenizer.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    specials = [eos_token, *[t for t in extra_special_tokens if t != eos_token]]
    if vocab_size < 256 + len(specials):
        raise TokenizerError(f"vocab_size={vocab_size} is below 256 bytes + {len(specials)} special tokens")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    config = {
        "kind": "byte_level_bpe",
        "vocab_size": vocab_size,
        "min_frequency": min_frequency,
        "eos_token": eos_token,
        "special_tokens": specials,
        **(extra_config or {}),
    }
    return save_tokenizer(tok, out_dir, config)


def save_tokenizer(tok, out_dir: str | Path, config: dict) -> MoeTokenizer:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = tok.to_str(pretty=True).encode("utf-8")
    digest = sha256_bytes(data)
    atomic_write_bytes(out / TOKENIZER_FILE, data)
    meta = {**config, "sha256": digest, "actual_vocab_size": tok.get_vocab_size(with_added_tokens=True)}
    atomic_write_bytes(out / CONFIG_FILE, (json.dumps(meta, indent=2) + "\n").encode("utf-8"))
    return load_tokenizer(out, eos_token=config["eos_token"])


def load_tokenizer(path: str | Path, eos_token: str = EOS_TOKEN) -> MoeTokenizer:
    """Load a saved tokenizer folder or any `tokenizer.json`; check its hash and its separator token.

    A folder written by `train_tokenizer` carries the expected sha256; a mismatch means the file
    was edited or replaced after training, and shards built with the old one would decode wrongly.
    """
    from tokenizers import Tokenizer

    p = Path(path)
    file = p / TOKENIZER_FILE if p.is_dir() else p
    if not file.is_file():
        raise TokenizerError(f"no tokenizer at {p}: expected a tokenizer.json file or a folder holding one")
    data = file.read_bytes()
    digest = sha256_bytes(data)
    meta_file = file.parent / CONFIG_FILE
    if meta_file.is_file():
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        if meta.get("sha256") != digest:
            raise TokenizerError(
                f"{file}: sha256 {digest[:12]}… does not match {meta_file.name} ({str(meta.get('sha256'))[:12]}…); "
                "the tokenizer changed after it was saved: retrain it or restore the original file"
            )
        eos_token = meta.get("eos_token", eos_token)
    tok = Tokenizer.from_str(data.decode("utf-8"))
    tok.encode_special_tokens = True
    eos_id = tok.token_to_id(eos_token)
    if eos_id is None:
        raise TokenizerError(
            f"{file}: the document separator {eos_token!r} is not in the vocabulary; "
            "set mixture.tokenizer.eos_token to one of its special tokens"
        )
    return MoeTokenizer(tokenizer=tok, hash=digest, eos_id=int(eos_id), eos_token=eos_token, path=file)
