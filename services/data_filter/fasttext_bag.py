"""fastText classification as a bag of cached word vectors: lid.176's predictions at about a third of the cost.

A fastText classifier with word n-grams of length 1 (lid.176 is one) classifies the average of
its input rows: for every token of the line, the token's own row (when it is in the vocabulary)
and the rows of its hashed character n-grams, plus the end-of-line token's row. That average
depends on the tokens only through their counts, and each token's rows are the same in every
document, so a token's row sum and row count can be computed once and reused: language ID on a
corpus touches each distinct word once instead of re-hashing its n-grams in every document.
fastText itself (through `fasttext-predict`) recomputes them for every token of every document,
which made it a third of the data filter's time.

What is reproduced from fastText's model file and prediction code (format version 12):
- the file: arguments, dictionary (words, labels, counts, the pruned n-gram map of a quantized
  model), the input matrix dense or product-quantized (with quantized row norms), the output
  matrix dense or product-quantized; quantized rows are decoded once at load;
- tokens split on fastText's own whitespace (space, tab, LF, CR, VT, FF, NUL), tokens starting
  with `__label__` ignored, character n-grams of `<token>` counted in code points, hashed with
  FNV-1a over UTF-8 bytes taken as signed chars (as fastText does) modulo `bucket`;
- hierarchical softmax (the Huffman tree rebuilt from the label counts) and softmax outputs,
  each term `log(p + 1e-5)` as fastText's `std_log`, leaves under `log(1e-5)` dropped.
Models this does not cover (word n-grams > 1, whose rows depend on token order; one-vs-all or
negative-sampling losses) are refused by `BagClassifier.supports`, and the caller keeps fastText.
Probabilities agree with fastText's to float32 rounding (tested on real text in many scripts).
The cache holds `cache_tokens` distinct tokens per process (or one longer document's) and is cleared when full.
"""

from __future__ import annotations

import re
import struct
from itertools import repeat
from pathlib import Path

import numpy as np

from services.data_filter.fasttext_tree import top_labels

_MAGIC, _VERSION = 793712314, 12
_LOSS_HS, _LOSS_SOFTMAX = 1, 3
_KSUB = 256  # centroids per sub-quantizer in fastText's product quantizer
_FASTTEXT_SPACE = re.compile("[ \t\n\r\v\f\0]+")
# characters Python's str.split() breaks on that fastText keeps inside a token
_PY_ONLY_SPACE = re.compile("[\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\0]")
_LABEL = "__label__"
_LOG_FLOOR = float(np.log(1e-5))  # fastText drops predictions under std_log(threshold 0)
_EOS = "</s>"


class _Reader:
    """Little-endian reads over the file's bytes, in fastText's field order."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> tuple:
        try:
            values = struct.unpack_from("<" + fmt, self.data, self.pos)
        except struct.error as err:
            raise ValueError(f"the file ends inside the model ({err})") from err
        self.pos += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype: str, count: int) -> np.ndarray:
        try:
            out = np.frombuffer(self.data, dtype=dtype, count=count, offset=self.pos)
        except ValueError as err:
            raise ValueError(f"the file ends inside the model ({err})") from err
        self.pos += out.nbytes
        return out

    def cstring(self) -> bytes:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise ValueError("the file ends inside the model's dictionary")
        value = self.data[self.pos : end]
        self.pos = end + 1
        return value


def _product_quantizer(r: _Reader) -> tuple[int, int, int, np.ndarray]:
    dim, nsubq, dsub, lastdsub = r.take("iiii")
    return nsubq, dsub, lastdsub, r.array("<f4", dim * _KSUB).astype(np.float32)


def _decode(nsubq: int, dsub: int, lastdsub: int, centroids: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Rows of a product-quantized matrix: sub-vector m of a row is centroid codes[row, m] of quantizer m."""
    rows = np.empty((codes.shape[0], dsub * (nsubq - 1) + lastdsub), dtype=np.float32)
    for m in range(nsubq):
        width = lastdsub if m == nsubq - 1 else dsub
        table = centroids[m * _KSUB * dsub : m * _KSUB * dsub + _KSUB * width].reshape(_KSUB, width)
        rows[:, m * dsub : m * dsub + width] = table[codes[:, m]]
    return rows


def _matrix(r: _Reader, quantized: bool) -> np.ndarray:
    if not quantized:
        m, n = r.take("qq")
        return r.array("<f4", m * n).reshape(m, n).astype(np.float32)
    (qnorm,) = r.take("?")
    m, _n = r.take("qq")
    (codesize,) = r.take("i")
    codes = r.array("u1", codesize)
    nsubq, dsub, lastdsub, centroids = _product_quantizer(r)
    rows = _decode(nsubq, dsub, lastdsub, centroids, codes.reshape(m, nsubq))
    if qnorm:
        norm_codes = r.array("u1", m)
        _, _, _, norm_centroids = _product_quantizer(r)
        rows *= norm_centroids[norm_codes][:, None]
    return rows


def fnv1a(data: bytes) -> int:
    """fastText's 32-bit FNV-1a, each byte sign-extended first (it hashes `int8_t`)."""
    h = 2166136261
    for byte in data:
        h = ((h ^ (byte | 0xFFFFFF00 if byte >= 0x80 else byte)) * 16777619) & 0xFFFFFFFF
    return h


class BagClassifier:
    """A fastText supervised model read from its `.bin`/`.ftz` file, predicting from cached token vectors."""

    def __init__(self, path: str | Path, cache_tokens: int = 200_000):
        try:
            self._load(_Reader(Path(path).read_bytes()))
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from err
        self.cache_tokens = cache_tokens
        self._clear_cache()
        self.cache_clears = 0

    def _load(self, r: _Reader) -> None:
        magic, version = r.take("ii")
        if magic != _MAGIC or version != _VERSION:
            raise ValueError(f"not a fastText model file of format version {_VERSION}")
        (self.dim, _ws, _epoch, _min_count, _neg, self.word_ngrams, self.loss, _model, self.bucket,
         self.minn, self.maxn, _lr_update) = r.take("12i")
        r.take("d")
        size, self.nwords, nlabels = r.take("iii")
        _ntokens, prune_size = r.take("qq")
        words: list[str] = []
        label_counts: list[int] = []
        for _ in range(size):
            entry = r.cstring().decode("utf-8", errors="surrogateescape")
            count, kind = r.take("qb")
            words.append(entry)
            if kind != 0:
                label_counts.append(count)
        self.labels = [w.removeprefix(_LABEL) for w in words[self.nwords :]]
        self.word_ids = {w: i for i, w in enumerate(words[: self.nwords])}
        # a quantized model keeps some n-gram buckets: bucket -> its row, as a table over all buckets (-1: pruned)
        self._pruned_row: np.ndarray | None = None
        pairs = r.array("<i4", 2 * prune_size).reshape(-1, 2) if prune_size >= 0 else None
        (quant_input,) = r.take("?")
        self.input = _matrix(r, quant_input)
        if pairs is not None:
            self._pruned_row = np.full(self.bucket, -1, dtype=np.int32)
            keep = (pairs[:, 0] >= 0) & (pairs[:, 0] < self.bucket)
            self._pruned_row[pairs[keep, 0]] = pairs[keep, 1]
        (quant_output,) = r.take("?")
        self.output = _matrix(r, quant_output)
        if r.pos != len(r.data):
            raise ValueError(f"{len(r.data) - r.pos} bytes left after the model; not a fastText model")
        if nlabels != len(self.labels) or self.output.shape[0] != nlabels:
            raise ValueError(f"{nlabels} labels in the dictionary, {self.output.shape[0]} output rows")
        if self.loss == _LOSS_HS:
            self._build_tree(label_counts)

    # the model's structure -------------------------------------------------------------------

    @property
    def supports(self) -> bool:
        """Whether prediction is a bag of tokens this class reproduces (else use fastText itself)."""
        return self.word_ngrams <= 1 and self.loss in (_LOSS_HS, _LOSS_SOFTMAX)

    def _build_tree(self, counts: list[int]) -> None:
        """fastText's Huffman tree over the labels; each leaf's path as (inner node row, went right)."""
        n = len(counts)
        count = list(counts) + [10**15] * (n - 1)
        parent, right = [-1] * (2 * n - 1), [False] * (2 * n - 1)
        leaf, node = n - 1, n
        children: list[list[int]] = []  # inner node i's (left, right), in fastText's node numbering
        for i in range(n, 2 * n - 1):
            pick = []
            for _ in range(2):
                if leaf >= 0 and count[leaf] < count[node]:
                    pick.append(leaf)
                    leaf -= 1
                else:
                    pick.append(node)
                    node += 1
            count[i] = count[pick[0]] + count[pick[1]]
            parent[pick[0]] = parent[pick[1]] = i
            right[pick[1]] = True
            children.append(pick)
        rows, dirs, starts = [], [], []
        for label in range(n):
            starts.append(len(rows))
            child = label
            while parent[child] != -1:
                rows.append(parent[child] - n)
                dirs.append(right[child])
                child = parent[child]
        # leaf scores gather from [log(1 - p + 1e-5) of every inner node, log(p + 1e-5) of every inner node]
        self._path_terms = np.asarray(rows, dtype=np.intp) + (n - 1) * np.asarray(dirs, dtype=np.intp)
        self._path_starts = np.asarray(starts, dtype=np.intp)
        inner = self.output[: n - 1].astype(np.float64)
        self._inner = np.ascontiguousarray(inner)
        self._children = np.asarray(children, dtype=np.int64).reshape(n - 1, 2)
        self._depth = int(np.diff(np.append(self._path_starts, len(rows))).max())
        # one product gives both branches: exp(-x) over [-inner; inner] h is 1 / (1 - p) - 1 and 1 / p - 1
        self._branches = np.concatenate((inner, -inner))

    # token vectors ----------------------------------------------------------------------------

    def _clear_cache(self) -> None:
        self._slot: dict[str, int] = {}
        # per cached token: the sum of its input rows, then how many rows it has (one gather per document)
        self._sums = np.zeros((min(self.cache_tokens, 4096) + 1, self.dim + 1), dtype=np.float64)

    def token_rows(self, tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(rows, owner): the input rows fastText adds for each token, and the index of the token each belongs to.

        A token's rows are its word row when it is in the vocabulary, then its character n-grams'
        (none for a label, none for a known end-of-line token); their order does not matter, they are summed.
        """
        rows, owner, gram_tokens, gram_owner = [], [], [], []
        for i, token in enumerate(tokens):
            if token.startswith(_LABEL):
                continue
            wid = self.word_ids.get(token)
            if wid is not None:
                rows.append(wid)
                owner.append(i)
                if token == _EOS:
                    continue
            if self.maxn > 0:
                gram_tokens.append(token)
                gram_owner.append(i)
        grams, of = self._gram_rows(gram_tokens)
        return (np.concatenate((np.asarray(rows, dtype=np.int64), grams)),
                np.concatenate((np.asarray(owner, dtype=np.int64), np.asarray(gram_owner, dtype=np.int64)[of])))

    def _gram_rows(self, tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(rows, owner) of the character n-grams of `<token>` for every token, in one numpy pass.

        n-grams are taken over code points (UTF-8 sequences, as fastText steps over continuation
        bytes), single characters only inside the markers, each hashed with FNV-1a over its bytes
        sign-extended (`fnv1a`, the scalar reference) modulo `bucket`; a quantized model's pruned
        n-grams have no row and are left out.
        """
        if not tokens:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        wrapped = ["<" + t + ">" for t in tokens]
        data = np.frombuffer("".join(wrapped).encode("utf-8", errors="surrogatepass"), dtype=np.uint8)
        bounds = np.append(np.flatnonzero((data & 0xC0) != 0x80), len(data))  # character c is bounds[c]:bounds[c + 1]
        chars = np.fromiter(map(len, wrapped), dtype=np.int64, count=len(wrapped))
        first_char = np.cumsum(chars) - chars
        starts, lengths, owner = [], [], []
        for n in range(max(self.minn, 1), self.maxn + 1):
            skip = 1 if n == 1 else 0  # a single character, but not the boundary markers alone
            per_token = np.maximum(chars - n + 1 - 2 * skip, 0)
            total = int(per_token.sum())
            if not total:
                continue
            token_of = np.repeat(np.arange(len(tokens)), per_token)
            offset = np.arange(total) - np.repeat(np.cumsum(per_token) - per_token, per_token)
            c = first_char[token_of] + skip + offset
            starts.append(bounds[c])
            lengths.append(bounds[c + n] - bounds[c])
            owner.append(token_of)
        if not starts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        start, length, owner_of = np.concatenate(starts), np.concatenate(lengths), np.concatenate(owner)
        h = np.full(len(start), 2166136261, dtype=np.uint32)
        last = len(data) - 1
        for k in range(int(length.max())):
            byte = data[np.minimum(start + k, last)].astype(np.uint32)
            byte |= np.where(byte >= 0x80, np.uint32(0xFFFFFF00), np.uint32(0))
            h = np.where(length > k, (h ^ byte) * np.uint32(16777619), h)
        row = h.astype(np.int64) % self.bucket
        if self._pruned_row is not None:
            row = self._pruned_row[row].astype(np.int64)
        keep = row >= 0
        return self.nwords + row[keep], owner_of[keep]

    def _slots(self, tokens: list[str]) -> np.ndarray:
        """Cache slots of a document's tokens, computing the missing ones (the cache is cleared when full)."""
        slots = np.fromiter(map(self._slot.get, tokens, repeat(0)), dtype=np.intp, count=len(tokens))
        if slots.all():  # slot 0 is never used: a 0 is a token not cached yet
            return slots
        missing = list(set(tokens).difference(self._slot))
        if len(self._slot) + len(missing) > self.cache_tokens:
            self._clear_cache()
            self.cache_clears += 1
            missing = list(set(tokens))
        self._add(missing)
        return np.fromiter(map(self._slot.__getitem__, tokens), dtype=np.intp, count=len(tokens))

    def _add(self, tokens: list[str]) -> None:
        """Sum each token's input rows into the next free cache slots (one gather for them all)."""
        first = len(self._slot) + 1  # slot 0 stays empty
        need = first + len(tokens)
        if need > self._sums.shape[0]:
            grow = max(need, min(2 * self._sums.shape[0], self.cache_tokens + 1))  # one document may overfill it
            self._sums = np.resize(self._sums, (grow, self.dim + 1))
        rows, owner = self.token_rows(tokens)
        counts = np.bincount(owner, minlength=len(tokens))
        stacked = np.zeros((len(rows) + 1, self.dim), dtype=np.float64)  # a zero row closes the last segment
        stacked[:-1] = self.input[rows[np.argsort(owner, kind="stable")]]
        sums = np.add.reduceat(stacked, np.cumsum(counts) - counts)
        block = self._sums[first:need]
        block[:, -1] = counts
        block[:, :-1] = np.where(block[:, -1:] > 0, sums, 0.0)  # reduceat gives a row, not 0, for an empty token
        self._slot.update(zip(tokens, range(first, need), strict=True))

    # prediction -------------------------------------------------------------------------------

    def _doc_slots(self, text: str, words: list[str] | None) -> np.ndarray:
        """Cache slots of the text's tokens read as one line, the end-of-line token last.

        fastText predicts one line at a time, so callers replace newlines by spaces; splitting on
        them here gives the same tokens without that copy of the text. `words`, when the caller
        has it, is `text.split()`: it is fastText's tokens unless the text holds a character one
        splits on and the other does not.
        """
        if text.isascii():
            odd = "\x1c" in text or "\x1d" in text or "\x1e" in text or "\x1f" in text or "\0" in text
        else:
            odd = _PY_ONLY_SPACE.search(text) is not None
        if odd:
            tokens = list(filter(None, _FASTTEXT_SPACE.split(text)))
        else:
            tokens = text.split() if words is None else words.copy()
        tokens.append(_EOS)  # fastText reads the line's end as one more token
        return self._slots(tokens)  # before anyone reads self._sums: filling the cache may grow it

    def hidden(self, text: str, words: list[str] | None = None) -> np.ndarray | None:
        """The average input row of the text read as one line (None when it has no row at all)."""
        total = self._sums[self._doc_slots(text, words)].sum(axis=0)
        if total[-1] == 0:
            return None
        return total[:-1] / total[-1]

    def log_probs(self, text: str, words: list[str] | None = None) -> np.ndarray | None:
        """Every label's log-probability as fastText scores it (each term log(p + 1e-5))."""
        h = self.hidden(text, words)
        if h is None:
            return None
        if self.loss == _LOSS_SOFTMAX:
            scores = self.output @ h.astype(np.float32)
            e = np.exp(scores - scores.max())
            return np.log(e / e.sum() + 1e-5)
        if not self._path_terms.size:  # one label: the tree is a single leaf
            return np.zeros(1)
        branch = np.exp(self._branches @ h)  # [(1 - p) / p, p / (1 - p)] per inner node, p = sigmoid(inner . h)
        branch += 1.0
        terms = np.log(np.reciprocal(branch, out=branch) + 1e-5)  # [log(1 - p + 1e-5), log(p + 1e-5)]
        return np.add.reduceat(terms[self._path_terms], self._path_starts)

    def predict(self, text: str, k: int = 1, words: list[str] | None = None) -> list[tuple[str, float]]:
        """The k most probable labels with their probabilities, best first, as fastText's predict gives them.

        `words` is `text.split()` when the caller already has it (see `hidden`).
        """
        if self.loss == _LOSS_HS:  # the compiled form of log_probs and the sort (fasttext_tree.py)
            slots = self._doc_slots(text, words)
            top, scores = top_labels(self._sums, slots, self._inner, self._children, self._depth, k, _LOG_FLOOR)
            return [(self.labels[i], float(np.exp(s))) for i, s in zip(top.tolist(), scores.tolist(), strict=True)]
        scores = self.log_probs(text, words)
        if scores is None:
            return []
        if k == 1:
            top = [int(scores.argmax())]
        else:
            top = np.argsort(-scores, kind="stable")[:k].tolist()
        return [(self.labels[i], float(np.exp(scores[i]))) for i in top if scores[i] >= _LOG_FLOOR]
