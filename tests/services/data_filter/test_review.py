"""Layout rules flag, the source's own model reviews: real list pages and listings stay, garbage goes.

Real documents are the committed demo corpus's Wikipedia pages; the order-free plants are their
own words shuffled. With review off, the same layout rules remove on their own (the published
behaviour), which is what the first test compares against.
"""

from __future__ import annotations

import json
import random

import pyarrow.parquet as pq

from services.data_filter.accounting import Chain
from services.data_filter.filters import Doc
from services.data_filter.filters.c4 import C4Filter
from services.data_filter.filters.repetition import RepetitionFilter
from services.data_filter.pipeline import run
from shared.config.chains import ChainConfig
from shared.config.data import DataConfig
from tests.services.data_filter import realtext


def _corpus(tmp_path):
    rng = random.Random(3)
    wiki = [(d["id"], d["text"]) for d in realtext.demo_documents("wiki") if len(d["text"].split()) > 60][:240]
    recs = [{"id": i, "text": t} for i, t in wiki]
    planted = []
    for i, t in wiki[:12]:
        planted.append(f"shuf-{i}")
        recs.append({"id": f"shuf-{i}", "text": realtext.shuffled(t, rng)})
    path = tmp_path / "wiki.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
    return path, planted


def _filter(tmp_path, src, name: str, review: bool):
    data = DataConfig.model_validate({
        "inputs": [{"name": "wiki", "kind": "web", "paths": [str(src)]}],
        "filter": {"workers": 0, "dedup": {"enabled": False}, "samples_per_reason": 10**6,
                   "chains": {"web": {"perplexity": {"review_layout": review}}}}})
    out = tmp_path / name
    stats = run(data, out)
    written = {r["id"]: json.loads(r["meta"]) for p in out.glob("part-*.parquet")
               for r in pq.read_table(p, columns=["id", "meta"]).to_pylist()}
    removed = {}
    for line in (out / "removed_samples.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        removed[r["id"]] = f"{r['filter']}:{r['reason']}"
    return stats, written, removed


def test_flagged_pages_the_model_vouches_for_are_kept_and_the_rest_removed_with_their_flag(tmp_path):
    src, planted = _corpus(tmp_path)
    stats, written, removed = _filter(tmp_path, src, "review", review=True)
    _, published, published_removed = _filter(tmp_path, src, "published", review=False)
    overturned = {i for i, m in written.items() if "layout_flag" in m}
    # real list pages and short sections the C4/FineWeb/Gopher layout rules remove are kept under review
    assert len(overturned) >= 10, sorted(overturned)
    assert not overturned & set(published) and all(i in published_removed for i in overturned)
    assert not any(p in written for p in planted), [p for p in planted if p in written]
    assert all(published_removed[i].split(":")[0] in ("c4", "fineweb", "gopher_quality", "repetition") for i in overturned)
    assert all("layout_flag" not in m for m in published.values())
    # accounting: every flag that reached the pass was either overturned (kept) or confirmed (removed with it)
    fitted = {s["name"]: s for s in stats["chains"]["web"]}["perplexity"]
    confirmed = {reason: n for reason, n in fitted["removed"].items() if ":" in reason}
    assert sum(fitted["flagged"].values()) == len(overturned) + sum(confirmed.values())
    assert all(stats["sources"]["wiki"]["removed"][reason] >= n for reason, n in confirmed.items())
    # the shuffled pages go to the word-order test, or with their layout flag when a layout rule saw them first
    assert all(removed[p] == "perplexity:no_word_order" or removed[p].split(":")[0] in ("c4", "fineweb", "gopher_quality",
                                                                                        "repetition") for p in planted)


def test_a_flag_never_hides_a_removal_later_in_the_same_filter():
    reviewing = ChainConfig.model_validate({})  # the default chain: perplexity reviews layout
    assert RepetitionFilter(ChainConfig.model_validate({})["repetition"], reviewing).reviewing
    rep = RepetitionFilter(reviewing["repetition"], reviewing)
    session = "\n".join([realtext.manual_paragraphs()[2]] + ["$ pwd", "/home/user", "$ ls"] * 4
                        + [realtext.manual_paragraphs()[3]])
    assert rep.check(Doc("s", session, "t", meta={"language": "en"})) == "dup_line_frac"  # a flag for review
    repeated = "\n".join([realtext.manual_paragraphs()[0], realtext.manual_paragraphs()[1]] * 4)
    assert rep.check(Doc("r", repeated, "t", meta={"language": "en"})) == "dup_line_char_frac"  # a removal
    c4 = C4Filter(reviewing["c4"], reviewing)
    page = "\n".join(["The function returns {x: 1} for an empty input, as documented."] * 2
                     + ["Lorem ipsum dolor sit amet, consectetur adipiscing elit."])
    assert c4.check(Doc("l", page, "t", meta={"language": "en"})) == "lorem_ipsum"  # found after the '{' flag
    doc = Doc("s2", session, "t", meta={"language": "en"})
    assert Chain([rep], review=True).run(doc) is None and doc.meta["layout_flag"] == "repetition:dup_line_frac"
    assert Chain([RepetitionFilter(reviewing["repetition"])]).run(Doc("s3", session, "t", meta={"language": "en"})) == (
        "repetition", "dup_line_frac")
