"""No text lost unreported: a rewriting filter's edit is counted, and past its bound removes or flags.

Hard-wrapped prose (the Python reference manual wrapped at 72 columns, as man pages, licences and
plain-text books are) loses most of its lines to C4's terminal-punctuation rule; the same
paragraphs one per line lose nothing.
"""

from __future__ import annotations

import json
import textwrap

import pyarrow.parquet as pq
import pytest

from services.data_filter.accounting import Chain
from services.data_filter.filters import build_chain
from services.data_filter.filters.base import Doc
from services.data_filter.pipeline import run
from shared.config.chains import ChainConfig, deep_merge, default_chain
from shared.config.data import DataConfig
from tests.services.data_filter import realtext


def _paragraphs(n: int, start: int) -> list[str]:
    """Manual paragraphs with single spaces, so normalising leaves them as they are."""
    return [" ".join(p.split()) for p in realtext.manual_paragraphs()[start : start + n]]


def _wrapped(n: int, start: int = 0) -> str:
    return "\n\n".join(textwrap.fill(p, 72) for p in _paragraphs(n, start))


def _unwrapped(n: int, start: int = 0) -> str:
    return "\n\n".join(_paragraphs(n, start))


def _chain(**c4) -> Chain:
    raw = deep_merge(default_chain("web"), {"language": {"enabled": False}, "gopher_quality": {"enabled": False},
                                           "fineweb": {"enabled": False}, "repetition": {"enabled": False},
                                           "toxicity": {"enabled": False}, "perplexity": {"review_layout": False},
                                           "c4": c4})
    cfg = ChainConfig.model_validate(raw)
    return Chain(build_chain(cfg))


def test_hard_wrapped_text_past_the_bound_is_kept_whole_and_flagged_by_default():
    text = _wrapped(12)
    d = Doc("man", text, "src")
    assert _chain().run(d) is None
    assert d.text == text  # kept whole, not as fragments
    assert d.meta["edit_flag"] == "c4"
    assert d.meta["edit_loss"] > 0.5
    assert d.meta["chars_original"] == d.meta["chars_kept"] == len(text)


def test_hard_wrapped_text_past_the_bound_is_removed_when_the_chain_says_remove():
    chain = _chain(large_edit="remove")
    assert chain.run(Doc("man", _wrapped(12), "src")) == ("c4", "edit_over_limit")
    c4 = next(s for s in chain.stats if s.name == "c4")
    assert c4.edit_removed == 1 and c4.removed["edit_over_limit"] == 1 and c4.kept == 0


def test_an_edit_within_the_bound_is_kept_edited_and_its_bytes_counted():
    text = _unwrapped(12) + "\nMenu Home About\nSkip to main content"
    chain = _chain()
    d = Doc("web", text, "src")
    assert chain.run(d) is None
    assert "edit_flag" not in d.meta
    assert d.meta["chars_original"] == len(text) and d.meta["chars_kept"] == len(d.text) < len(text)
    c4 = next(s for s in chain.stats if s.name == "c4")
    assert c4.edited == 1
    assert c4.bytes_edited == len(text.encode()) - len(d.text.encode())
    assert c4.bytes_in - c4.bytes_kept == c4.bytes_edited


def test_edits_add_up_over_the_chain_from_the_text_as_read():
    """Normalising away 30% and cutting lines away 30% more is past a 50% bound, though neither edit is."""
    body = _unwrapped(6)
    lines = body.split("\n")
    tail = "\n".join(f"fragment number {i} of a list" for i in range(len(body) // 60))
    text = "\n".join(line + " " * (len(line) // 2) for line in lines) + "\n" + tail
    d = Doc("x", text, "src")
    assert _chain(large_edit="remove").run(d) == ("c4", "edit_over_limit")


@pytest.mark.parametrize("bad", [{"max_edit_loss": 0}, {"max_edit_loss": 1.5}, {"large_edit": "drop"}])
def test_bad_edit_bound_settings_fail_validation(bad):
    with pytest.raises(ValueError):
        ChainConfig.model_validate({"c4": bad})


def test_pipeline_rows_carry_char_counts_and_stats_report_edits_per_source(tmp_path):
    recs = [{"id": f"w{i}", "text": _wrapped(12, i * 12)} for i in range(4)]
    recs += [{"id": f"p{i}", "text": _unwrapped(8, 60 + i * 8) + "\nSkip to main content"} for i in range(4)]
    src = tmp_path / "mixed.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    data = DataConfig.model_validate({
        "inputs": [{"name": "manual", "kind": "web", "paths": [str(src)]}],
        "filter": {"workers": 0, "dedup": {"enabled": False},
                   "chains": {"web": {"language": {"enabled": False}, "perplexity": {"enabled": False},
                                      "fineweb": {"enabled": False}, "gopher_quality": {"enabled": False}}}}})
    stats = run(data, tmp_path / "out")
    rows = [r for p in sorted((tmp_path / "out").glob("part-*.parquet")) for r in pq.read_table(p).to_pylist()]
    metas = {r["id"]: json.loads(r["meta"]) for r in rows}
    removed = [json.loads(line) for line in (tmp_path / "out" / "removed_samples.jsonl").read_text().splitlines()]
    assert not removed, removed
    assert set(metas) == {r["id"] for r in recs}
    for r in rows:
        m = metas[r["id"]]
        assert m["chars_kept"] == len(r["text"])
        loss = 1 - m["chars_kept"] / m["chars_original"]
        assert loss <= 0.5 or "edit_flag" in m
    assert all(metas[f"w{i}"]["edit_flag"] == "c4" for i in range(4))
    assert not any("edit_flag" in metas[f"p{i}"] for i in range(4))
    c4 = next(s for s in stats["sources"]["manual"]["stages"] if s["name"] == "c4")
    assert c4["edit_flagged"] == 4 and c4["edited"] == 8 and c4["bytes_edited"] > 0
    # the tracker gets each source's bytes through the chain and the bytes edits took
    from services.data_filter.report import report_funnel
    from shared.config import load_config

    exp = load_config(None, ["tracker.mode=offline", f"tracker.spool_dir={tmp_path / 'spool'}"])
    assert "reported to the tracker" in report_funnel(stats, exp, timeout=5)
    spooled = "".join(p.read_text() for p in (tmp_path / "spool").glob("*.jsonl"))
    assert '"bytes/manual"' in spooled and "data_filter/web/c4/bytes_edited" in spooled
    assert "data_filter/web/c4/edit_flagged" in spooled
