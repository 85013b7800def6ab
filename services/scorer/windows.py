"""Whole documents as backbone windows: which tokens of a document the scorer reads, and where they sit.

A document is tokenised whole, then cut into windows of `window_tokens` (special tokens included)
that the backbone runs as separate rows. Up to the token budget (`heads.max_tokens`) every window
is read; past it, `spread` reads `budget // window_tokens` windows evenly from the first to one
ending on the document's last token (first/middle/last for three), `head` only the first ones.
So a defect anywhere reaches the heads: the Probe mean-pools every read token of every window, the
Judge attends over all of them, and each token carries a document-position bucket (eighths of the
document, plus one bucket for its final token) so the Judge can tell an ending from a middle.
`tokens_read / tokens_total` per document is what the reports call coverage.

Code layout: MiniLM's uncased WordPiece treats newlines and indentation as spaces, so a file and
its one-line collapse tokenise alike. With `code_layout`, code is rewritten before tokenising:
every line break becomes `¶` and each indentation level (4 spaces or a tab, at most 8) a `»`,
both ordinary tokens of the vocabulary, so layout becomes text the backbone reads.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

N_BUCKETS = 8
END_BUCKET = N_BUCKETS  # the document's last token (and the separator after it)
NEWLINE_MARK, INDENT_MARK = "¶", "»"
_LEADING = re.compile(r"^[ \t]+")


def mark_layout(code: str) -> str:
    """Newlines → ` ¶ `, leading indentation → one `»` per level (4 spaces or a tab, at most 8)."""
    out = []
    for line in code.split("\n"):
        m = _LEADING.match(line)
        lead = m.group(0) if m else ""
        levels = min(8, lead.count("\t") + (len(lead) - lead.count("\t")) // 4)
        out.append(f"{INDENT_MARK * levels} {line[len(lead):]}" if levels else line)
    return f" {NEWLINE_MARK} ".join(out)


def window_starts(n_tokens: int, content: int, budget_windows: int, policy: str) -> list[int]:
    """Start offsets (in content tokens) of the windows read from a document of `n_tokens` tokens."""
    available = max(1, math.ceil(n_tokens / content))
    if available <= budget_windows:
        return [i * content for i in range(available)]
    if policy == "head" or budget_windows == 1:
        return [i * content for i in range(budget_windows)]
    last = n_tokens - content
    return [round(i * last / (budget_windows - 1)) for i in range(budget_windows)]


@dataclass
class Windows:
    """Rows for the backbone and, per row, the document (index in the batch) it belongs to."""

    input_ids: torch.Tensor  # [R, W]
    attention_mask: torch.Tensor  # [R, W]
    bucket: torch.Tensor  # [R, W] document-position bucket of each token
    doc: list[int]  # per row
    tokens_read: list[int]  # per document (content tokens, overlaps counted once)
    tokens_total: list[int]  # per document

    def rows_of(self, d: int) -> list[int]:
        return [r for r, x in enumerate(self.doc) if x == d]


class WindowReader:
    """Tokenises documents whole and cuts them into the windows the scorer reads."""

    def __init__(self, tokenizer, window_tokens: int, max_tokens: int, policy: str = "spread",
                 code_layout: bool = True) -> None:
        self.tok = tokenizer
        self.window, self.content = window_tokens, window_tokens - 2
        self.budget_windows = max(1, max_tokens // window_tokens)
        self.policy, self.code_layout = policy, code_layout
        self.cls, self.sep, self.pad = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id
        if self.cls is None or self.sep is None:  # decoders: BOS/EOS in their place
            self.cls = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
            self.sep = tokenizer.eos_token_id
        self.pad = self.pad if self.pad is not None else self.sep

    def prepare(self, text: str, kind: str) -> str:
        return mark_layout(text) if self.code_layout and kind == "code" else text

    def read(self, texts: list[str], kinds: list[str]) -> Windows:
        prepared = [self.prepare(t, k) for t, k in zip(texts, kinds, strict=True)]
        ids_per_doc = self.tok(prepared, add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
        rows, buckets, docs, read, total = [], [], [], [], []
        for d, ids in enumerate(ids_per_doc):
            n = len(ids)
            starts = window_starts(n, self.content, self.budget_windows, self.policy)
            covered = set()
            for s in starts:
                chunk = list(range(s, min(n, s + self.content)))
                covered.update(chunk)
                pos = [END_BUCKET if i == n - 1 else min(N_BUCKETS - 1, i * N_BUCKETS // max(1, n)) for i in chunk]
                rows.append([self.cls, *(ids[i] for i in chunk), self.sep])
                first = pos[0] if pos else END_BUCKET
                buckets.append([first, *pos, pos[-1] if pos else END_BUCKET])
                docs.append(d)
            read.append(len(covered))
            total.append(n)
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        bucket = torch.zeros((len(rows), width), dtype=torch.long)
        for r, (row, b) in enumerate(zip(rows, buckets, strict=True)):
            input_ids[r, : len(row)] = torch.tensor(row)
            mask[r, : len(row)] = 1
            bucket[r, : len(row)] = torch.tensor(b)
        return Windows(input_ids, mask, bucket, docs, read, total)


def per_document(x_RTD: torch.Tensor, mask_RT: torch.Tensor, doc: list[int], n_docs: int) -> list[torch.Tensor]:
    """The valid positions of every row, concatenated per document: a list of [T_d, ...] tensors."""
    keep = mask_RT.bool()
    parts: list[list[torch.Tensor]] = [[] for _ in range(n_docs)]
    for r, d in enumerate(doc):
        parts[d].append(x_RTD[r][keep[r]])
    return [torch.cat(p) if p else x_RTD.new_zeros((0, *x_RTD.shape[2:])) for p in parts]


def log_length(tokens_total: list[int]) -> torch.Tensor:
    """log(1 + tokens) / 8 per document: the length input of both heads (≈ 1 at 3,000 tokens)."""
    return torch.log1p(torch.tensor(tokens_total, dtype=torch.float32)).unsqueeze(1) / 8.0


def pool_per_document(x_RTD: torch.Tensor, mask_RT: torch.Tensor, doc: list[int], n_docs: int) -> torch.Tensor:
    """Mean over every valid token of every row of a document: [n_docs, D] (the Probe's input)."""
    m = mask_RT.to(x_RTD.dtype).unsqueeze(-1)
    index = torch.as_tensor(doc, device=x_RTD.device)
    sums = torch.zeros(n_docs, x_RTD.shape[-1], dtype=x_RTD.dtype, device=x_RTD.device)
    sums.index_add_(0, index, (x_RTD * m).sum(1))
    counts = torch.zeros(n_docs, dtype=x_RTD.dtype, device=x_RTD.device).index_add_(0, index, m.sum((1, 2)))
    return sums / counts.clamp_min(1.0).unsqueeze(1)


def document_batches(texts: list[str], micro_batch: int, windows_per_doc: int) -> list[list[int]]:
    """Document indices in groups of similar length (sorted by characters), about `micro_batch` windows each."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    per = max(1, micro_batch // max(1, windows_per_doc))
    return [order[i : i + per] for i in range(0, len(order), per)]
