"""Whole documents as backbone windows: which tokens of a document the scorer reads, and where they sit.

A document is tokenised whole, then cut into windows of `window_tokens` (special tokens included)
that the backbone runs as separate rows. Up to the token budget (`heads.max_tokens`) every window
is read; past it, `spread` reads `budget // window_tokens` windows evenly from the first to one
ending on the document's last token (first/middle/last for three), `head` only the first ones.
So a defect anywhere reaches the heads: the Probe mean-pools every token of the windows it reads,
the Judge attends over all of them, and each token carries a document-position bucket (eighths of
the document, plus one bucket for its final token) so the Judge can tell an ending from a middle.
`tokens_read / tokens_total` per document is what the reports call coverage. The Probe may read
fewer windows than the Judge (`heads.probe_windows`, spread the same way): a document it drops
then costs only those windows' first layers.

Repetition across windows: each window is a separate row, so the backbone cannot see that a
paragraph in one window repeats one in another, and a mean over tokens is the same whether a
passage occurs once or three times. The reader marks every token that belongs to an 8-token
n-gram already seen earlier in the document (on the whole document's tokens, read or not; the
token-level form of Gopher's duplicate n-gram fraction, Rae et al. 2021): the Judge gets the mark
per token, both heads get the document's marked fraction next to its log length (`doc_stats`).
Measured on 100 wiki/handbook documents: clean median 0%, 90th percentile 6%; a paragraph
repeated twice more: 10% or more in 95 of 100.

With `skip_repeats` the marked tokens of prose are not read at all (code keeps its repeats, which
are mostly its own structure: imports, error checks): windows are cut from the document with
its repeats taken out, and the token just before each removed run carries the mark instead (the
Judge sees where a repeat was). Why: with a fixed budget the extra length of a repeated passage
moves every spread window onto other text, so a document and its repeated copy were read as
different samples of their text, and that sampling noise (±0.05 of Judge quality) outweighed
what the repeat costs them; read without the repeats, the copy is read as its source was and
differs only by the repeated fraction and length in `doc_stats`.

Layout: MiniLM's uncased WordPiece treats newlines and indentation as spaces, so a file and its
one-line collapse tokenise alike, and a heading looks like the start of its first sentence. With
`layout_marks` (`code`, or `all` documents), the text is rewritten before tokenising: every line
break becomes `¶` and each indentation level (4 spaces or a tab, at most 8) a `»`, both ordinary
tokens of the vocabulary, so layout becomes text the backbone reads.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from services.scorer.token_stats import TokenStats, cohesion_input

N_BUCKETS = 8
END_BUCKET = N_BUCKETS  # the document's last token (and the separator after it)
REPEAT_NGRAM = 8  # tokens; n-grams of this length seen earlier in the document mark a repetition
DOC_STATS = 5  # per-document inputs of both heads: log length, repeated fraction, unfinished end, cohesion, heading
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


def repeated_marks(ids: list[int], n: int = REPEAT_NGRAM) -> list[int]:
    """1 for every token inside an n-gram that already occurred earlier in `ids`, else 0."""
    marks = [0] * len(ids)
    seen: set[tuple[int, ...]] = set()
    for i in range(len(ids) - n + 1):
        gram = tuple(ids[i : i + n])
        if gram in seen:
            marks[i : i + n] = [1] * n
        seen.add(gram)
    return marks


def without_repeats(ids: list[int], marks: list[int]) -> tuple[list[int], list[int]]:
    """The tokens left when every marked (repeated) token is taken out, and per kept token 1 where a
    removed run follows it. A document's first token is never marked (a repeat needs an earlier
    occurrence), so every removed run has a kept token before it."""
    kept, flags = [], []
    for tok, mark in zip(ids, marks, strict=True):
        if mark:
            flags[-1] = 1
            continue
        kept.append(tok)
        flags.append(0)
    return kept, flags


def probe_subset(n_windows: int, probe_windows: int) -> list[int]:
    """Which of a document's read windows the Probe reads: all (0 or enough), else spread first → last."""
    if probe_windows <= 0 or probe_windows >= n_windows:
        return list(range(n_windows))
    if probe_windows == 1:
        return [0]
    return sorted({round(i * (n_windows - 1) / (probe_windows - 1)) for i in range(probe_windows)})


@dataclass
class Windows:
    """Rows for the backbone and, per row, the document (index in the batch) it belongs to."""

    input_ids: torch.Tensor  # [R, W]
    attention_mask: torch.Tensor  # [R, W]
    bucket: torch.Tensor  # [R, W] document-position bucket of each token
    repeated: torch.Tensor  # [R, W] 1 = the token is part of an n-gram seen earlier in its document
    doc: list[int]  # per row
    probe_row: list[bool]  # per row: the Probe reads it
    tokens_read: list[int]  # per document (content tokens through the backbone, overlaps counted once)
    tokens_total: list[int]  # per document
    repeated_fraction: list[float]  # per document, over all its tokens
    unfinished: list[float]  # per document: 1 = its last token ends no sentence (token_stats.py)
    cohesion: list[float]  # per document: token_stats.cohesion_input of its (repeat-free when skipped) tokens
    heading: list[float]  # per document: 1 = it opens with a heading (token_stats.py)

    def rows_of(self, d: int) -> list[int]:
        return [r for r, x in enumerate(self.doc) if x == d]

    def doc_stats(self) -> torch.Tensor:
        """[n_docs, DOC_STATS]: log length (windows.log_length), repeated fraction, unfinished end,
        sentence cohesion and opening heading (token_stats.py) of each document."""
        per_doc = torch.tensor([self.repeated_fraction, self.unfinished, self.cohesion, self.heading],
                               dtype=torch.float32).T
        return torch.cat([log_length(self.tokens_total), per_doc], 1)


class WindowReader:
    """Tokenises documents whole and cuts them into the windows the scorer reads."""

    def __init__(self, tokenizer, window_tokens: int, max_tokens: int, policy: str = "spread",
                 layout_marks: str = "all", probe_windows: int = 0, skip_repeats: bool = False) -> None:
        if layout_marks not in ("none", "code", "all"):
            raise ValueError(f"layout_marks={layout_marks!r}; expected none, code or all")
        self.tok = tokenizer
        self.window, self.content = window_tokens, window_tokens - 2
        self.budget_windows = max(1, max_tokens // window_tokens)
        self.policy, self.layout_marks, self.probe_windows = policy, layout_marks, probe_windows
        self.skip_repeats = skip_repeats
        self.stats = TokenStats(tokenizer, (NEWLINE_MARK, INDENT_MARK))
        self.cls, self.sep, self.pad = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id
        if self.cls is None or self.sep is None:  # decoders: BOS/EOS in their place
            self.cls = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
            self.sep = tokenizer.eos_token_id
        self.pad = self.pad if self.pad is not None else self.sep

    @classmethod
    def from_meta(cls, tokenizer, meta: dict) -> WindowReader:
        """The reader a heads.pt was trained with (its meta records the windowing)."""
        return cls(tokenizer, meta["window_tokens"], meta["max_tokens"], meta["window_policy"], meta["layout_marks"],
                   meta["probe_windows"], meta.get("skip_repeats", False))

    def prepare(self, text: str, kind: str) -> str:
        marks = self.layout_marks == "all" or (self.layout_marks == "code" and kind == "code")
        return mark_layout(text) if marks else text

    def read(self, texts: list[str], kinds: list[str]) -> Windows:
        prepared = [self.prepare(t, k) for t, k in zip(texts, kinds, strict=True)]
        ids_per_doc = self.tok(prepared, add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
        rows, buckets, reps, docs, probe_rows, read, total, rep_frac = [], [], [], [], [], [], [], []
        unfinished, cohesion, heading = [], [], []
        for d, ids in enumerate(ids_per_doc):
            prose = kinds[d] != "code"  # sentences and their ends are prose notions; 0 for code
            total.append(len(ids))
            marks = repeated_marks(ids)
            rep_frac.append(sum(marks) / max(1, len(ids)))
            unfinished.append(self.stats.unfinished_end(ids) if prose else 0.0)
            heading.append(self.stats.opens_with_heading(ids) if prose else 0.0)
            if self.skip_repeats and prose:
                ids, marks = without_repeats(ids, marks)
            cohesion.append(cohesion_input(self.stats.sentence_cohesion(ids)) if prose else 0.0)
            n = len(ids)
            starts = window_starts(n, self.content, self.budget_windows, self.policy)
            in_probe = set(probe_subset(len(starts), self.probe_windows))
            covered = set()
            for w, s in enumerate(starts):
                chunk = list(range(s, min(n, s + self.content)))
                covered.update(chunk)
                pos = [END_BUCKET if i == n - 1 else min(N_BUCKETS - 1, i * N_BUCKETS // max(1, n)) for i in chunk]
                rows.append([self.cls, *(ids[i] for i in chunk), self.sep])
                first = pos[0] if pos else END_BUCKET
                buckets.append([first, *pos, pos[-1] if pos else END_BUCKET])
                reps.append([0, *(marks[i] for i in chunk), 0])
                docs.append(d)
                probe_rows.append(w in in_probe)
            read.append(len(covered))
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        bucket = torch.zeros((len(rows), width), dtype=torch.long)
        repeated = torch.zeros((len(rows), width), dtype=torch.float32)
        for r, (row, b, rp) in enumerate(zip(rows, buckets, reps, strict=True)):
            input_ids[r, : len(row)] = torch.tensor(row)
            mask[r, : len(row)] = 1
            bucket[r, : len(row)] = torch.tensor(b)
            repeated[r, : len(row)] = torch.tensor(rp, dtype=torch.float32)
        return Windows(input_ids, mask, bucket, repeated, docs, probe_rows, read, total, rep_frac, unfinished, cohesion,
                       heading)


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
