"""Whole documents are read as windows: every window up to the budget, spread over the document past it."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch

from services.scorer.windows import (
    DOC_STATS,
    END_BUCKET,
    WindowReader,
    mark_layout,
    per_document,
    pool_per_document,
    probe_subset,
    repeated_marks,
    window_starts,
    without_repeats,
)


def test_every_window_is_read_within_the_budget_and_spread_reaches_the_last_token_past_it():
    assert window_starts(300, 126, 4, "spread") == [0, 126, 252]  # 3 windows fit the budget of 4
    spread = window_starts(1000, 126, 3, "spread")
    assert spread[0] == 0 and spread[-1] + 126 == 1000 and len(spread) == 3  # first / middle / last
    assert window_starts(1000, 126, 3, "head") == [0, 126, 252]


def test_reader_reports_coverage_and_marks_the_documents_last_token(minilm):
    reader = WindowReader(minilm.tokenizer, 32, 64, "spread", layout_marks="none")
    long_text = " ".join(f"word{i} is here." for i in range(200))
    win = reader.read(["A short one.", long_text], ["web", "web"])
    assert win.doc.count(0) == 1 and win.doc.count(1) == 2  # the long one: 2 windows of the 64-token budget
    assert win.tokens_read[0] == win.tokens_total[0]
    assert 0 < win.tokens_read[1] < win.tokens_total[1]
    last_row = win.rows_of(1)[-1]
    n = int(win.attention_mask[last_row].sum())
    assert win.bucket[last_row, n - 2] == END_BUCKET  # the last content token before [SEP]


def test_a_defect_at_the_end_of_a_long_document_reaches_the_probes_input(minilm):
    reader = WindowReader(minilm.tokenizer, 64, 256, "spread", layout_marks="none")
    body = " ".join(f"Sentence number {i} talks about rivers and their banks." for i in range(60))
    spoiled = body + " CLICK HERE buy now cheap pills www.spam.example!!!"
    pooled = []
    for text in (body, spoiled):
        win = reader.read([text], ["web"])
        st = minilm.run(minilm.embed(win.input_ids, win.attention_mask), 2)
        pooled.append(pool_per_document(minilm.features(st), win.attention_mask, win.doc, 1))
    assert not torch.allclose(pooled[0], pooled[1], atol=1e-3)


def test_layout_marks_make_a_collapsed_file_and_a_heading_tokenise_differently(minilm):
    code = "def f(x):\n    if x:\n        return 1\n    return 2\n"
    collapsed = " ".join(line.strip() for line in code.splitlines())
    assert "¶" in mark_layout(code) and mark_layout(code).count("»") == 1 + 2 + 1
    on = WindowReader(minilm.tokenizer, 64, 64, layout_marks="code")
    off = WindowReader(minilm.tokenizer, 64, 64, layout_marks="none")
    assert not torch.equal(on.read([code], ["code"]).input_ids, on.read([collapsed], ["code"]).input_ids)
    assert torch.equal(off.read([code], ["code"]).input_ids, off.read([collapsed], ["code"]).input_ids)
    titled, run_in = "Rivers\n\nRivers flow to the sea.", "Rivers Rivers flow to the sea."
    every = WindowReader(minilm.tokenizer, 64, 64, layout_marks="all")
    assert torch.equal(on.read([titled], ["web"]).input_ids, on.read([run_in], ["web"]).input_ids)  # code only
    assert not torch.equal(every.read([titled], ["web"]).input_ids, every.read([run_in], ["web"]).input_ids)


def test_repeated_ngrams_are_marked_on_the_whole_document_even_where_no_window_reads():
    assert repeated_marks([1, 2, 3, 4, 9, 1, 2, 3, 4], n=4) == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert repeated_marks(list(range(20)), n=4) == [0] * 20


def test_reader_gives_each_document_its_repeated_fraction_and_marks_its_rows(minilm):
    para = "The river rises in the northern hills and flows south through three green valleys."
    other = " ".join(f"Line {i} says something new about farming." for i in range(30))
    reader = WindowReader(minilm.tokenizer, 32, 64, layout_marks="none")
    win = reader.read([other + " " + para, other + " " + " ".join([para] * 3)], ["web", "web"])
    assert win.repeated_fraction[0] == 0 and win.repeated_fraction[1] > 0.08  # 2 of 3 copies of 17 tokens
    stats = win.doc_stats()
    assert stats.shape == (2, DOC_STATS) and stats[1, 1] == pytest.approx(win.repeated_fraction[1])
    assert win.repeated[win.rows_of(1)].sum() > 0  # the spread windows reach the repeats at the end
    assert win.repeated[:, 0].sum() == 0  # special tokens are never marked


def test_probe_reads_a_spread_subset_of_the_windows():
    assert probe_subset(4, 0) == [0, 1, 2, 3] and probe_subset(4, 9) == [0, 1, 2, 3]
    assert probe_subset(4, 1) == [0] and probe_subset(4, 2) == [0, 3] and probe_subset(5, 3) == [0, 2, 4]


def test_per_document_concatenates_valid_tokens_of_each_documents_rows():
    x = torch.arange(3 * 4, dtype=torch.float32).reshape(3, 4, 1)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]])
    docs = per_document(x, mask, [0, 0, 1], 2)
    assert docs[0].squeeze(1).tolist() == [0, 1, 4, 5, 6] and docs[1].squeeze(1).tolist() == [8]
    pooled = pool_per_document(x, mask, [0, 0, 1], 2)
    torch.testing.assert_close(pooled.squeeze(1), torch.tensor([16 / 5, 8.0]))


def test_without_repeats_takes_the_marked_runs_out_and_flags_the_token_before_each():
    ids = [1, 2, 3, 4, 9, 1, 2, 3, 4, 7]
    kept, flags = without_repeats(ids, repeated_marks(ids, n=4))
    assert kept == [1, 2, 3, 4, 9, 7] and flags == [0, 0, 0, 0, 1, 0]
    assert without_repeats([5, 6], [0, 0]) == ([5, 6], [0, 0])


def test_with_skip_repeats_a_repeated_paragraph_copy_is_read_as_its_source(minilm):
    """Without it, the copy's extra length moves the spread windows onto other text (the sampling noise
    that outweighed the repeat in the pairs benchmark); with it only the document statistics differ."""
    rng = random.Random(0)
    vocab = rng.sample(sorted(w for w in minilm.tokenizer.get_vocab() if w.isalpha() and w.islower() and len(w) >= 5), 400)
    paras = [" ".join(" ".join(rng.choice(vocab) for _ in range(9)).capitalize() + "." for _ in range(6))
             for _ in range(5)]
    source = "\n\n".join(paras)
    copy = "\n\n".join(paras[:2] + [paras[1]] * 2 + paras[2:])
    def read_apart(win) -> int:
        """Tokens read in one document and not the other (a multiset difference)."""
        a, b = (Counter(win.input_ids[win.rows_of(d)][win.attention_mask[win.rows_of(d)].bool()].tolist()) for d in (0, 1))
        return sum(((a - b) + (b - a)).values())

    skip = WindowReader(minilm.tokenizer, 32, 96, "spread", skip_repeats=True)
    win = skip.read([source, copy], ["web", "web"])
    # the paragraph break at the join goes with the repeat (its 8-gram was seen before): a 3-token shift at most
    assert read_apart(win) <= 6
    assert win.tokens_total[1] > win.tokens_total[0] and win.repeated_fraction[1] > 0.2 > win.repeated_fraction[0]
    whole = WindowReader(minilm.tokenizer, 32, 640, skip_repeats=True).read([copy], ["web"])
    assert whole.repeated.sum() == 1  # read whole, the Judge sees where the repeat was taken out
    assert read_apart(WindowReader(minilm.tokenizer, 32, 96, "spread").read([source, copy], ["web", "web"])) > 20
