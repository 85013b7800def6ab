"""One source of a mixture as an endless stream of tokens: documents + separators, epoch by epoch.

Each epoch is the source's documents in a fresh order (a permutation seeded by the mixture seed,
the source's name and the epoch number), each followed by the separator token. Sequence k of the
source is the window of seq_len + 1 tokens starting at position k·seq_len (inputs and shifted
targets, consecutive windows sharing one token, as in nanoGPT). Because every epoch has the same
length, position → (epoch, offset) is a division and offset → document is a binary search, so any
sequence is read directly from its index: nothing is replayed to resume.
"""

from __future__ import annotations

import zlib

import numpy as np

from shared.data.shards import Shard


class PackedSource:
    """A packed, epoch-shuffled view over a source's shards (all memory-mapped)."""

    def __init__(self, name: str, shards: list[Shard], eos_id: int, seed: int):
        if not shards:
            raise ValueError(f"source {name!r} has no shards")
        self.name = name
        self.shards = shards
        self.eos_id = int(eos_id)
        self.seed = int(seed)
        self.lengths = np.concatenate([s.lengths for s in shards]).astype(np.int64)
        self.shard_of = np.concatenate([np.full(s.info.docs, j, dtype=np.int32) for j, s in enumerate(shards)])
        self.local = np.concatenate([np.arange(s.info.docs, dtype=np.int64) for s in shards])
        self.docs = len(self.lengths)
        self.doc_tokens = int(self.lengths.sum())
        self.epoch_tokens = self.doc_tokens + self.docs  # one separator after every document
        self._orders: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def capacity(self, seq_len: int) -> int:
        """Sequences that fit in one epoch (window of seq_len + 1 tokens, stride seq_len)."""
        return max(0, (self.epoch_tokens - 1) // seq_len)

    def epochs(self, sequences: int, seq_len: int) -> float:
        """Epochs consumed by `sequences` sequences (tokens read / tokens per epoch)."""
        return sequences * seq_len / self.epoch_tokens

    def _order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        if epoch not in self._orders:
            seq = np.random.SeedSequence([self.seed, zlib.crc32(self.name.encode("utf-8")), epoch])
            perm = np.random.default_rng(seq).permutation(self.docs)
            ends = np.cumsum(self.lengths[perm] + 1)
            if len(self._orders) >= 4:  # keep the few epochs that one window can span
                self._orders.pop(min(self._orders))
            self._orders[epoch] = (perm, ends)
        return self._orders[epoch]

    def window(self, start: int, length: int) -> np.ndarray:
        """Tokens at stream positions [start, start + length), crossing documents and epochs."""
        out = np.empty(length, dtype=np.int64)
        filled, pos = 0, int(start)
        while filled < length:
            epoch, off = divmod(pos, self.epoch_tokens)
            perm, ends = self._order(epoch)
            j = int(np.searchsorted(ends, off, side="right"))
            doc = int(perm[j])
            doc_len = int(self.lengths[doc])
            within = off - (int(ends[j]) - doc_len - 1)  # 0..doc_len; doc_len is the separator
            take = min(length - filled, doc_len + 1 - within)
            n_tok = min(take, doc_len - within)
            if n_tok > 0:
                shard = self.shards[self.shard_of[doc]]
                out[filled : filled + n_tok] = shard.doc(int(self.local[doc]))[within : within + n_tok]
            if n_tok < take:
                out[filled + take - 1] = self.eos_id
            filled += take
            pos += take
        return out
