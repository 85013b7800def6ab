"""The whole stage: readers, bad input, per-source chains, accounting, determinism and resume."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from services.data_filter.filters.c4 import C4Filter
from services.data_filter.filters.fineweb import FineWebFilter
from services.data_filter.filters.gopher_quality import GopherQualityFilter
from services.data_filter.filters.language import LanguageFilter
from services.data_filter.filters.repetition import RepetitionFilter
from services.data_filter.pipeline import run
from shared.config.data import DataConfig
from tests.services.data_filter import realtext

ROOT = Path(__file__).resolve().parents[3]


def prose_records(n: int = 120) -> list[dict]:
    recs = [{"id": f"manual-{i}", "text": realtext.prose_doc(3, start=i * 3), "url": f"https://docs/{i}"} for i in range(n)]
    recs += [{"id": f"dup-{i}", "text": recs[i]["text"]} for i in range(0, n, 10)]  # exact duplicates
    recs += [{"id": f"udhr-{lang}", "text": "\n\n".join(realtext.udhr(lang))} for lang in ("de", "fr", "es", "ru")]
    return recs


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def config(paths, kind="web", **filt) -> DataConfig:
    return DataConfig.model_validate({
        "inputs": [{"name": "src", "kind": kind, "paths": [str(p) for p in paths]}],
        "filter": {"workers": 0, **filt},
    })


def shard_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("part-*.parquet"))}


def read_out(out: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))])


def test_corrupt_input_passes_with_every_bad_line_counted_in_rejects(tmp_path):
    good = prose_records(20)
    bad_lines = [
        (b"this is not json", "malformed_json"),
        (b'{"text": "broken', "malformed_json"),
        (b'{"text": "caf\xe9 latin-1 byte"}', "invalid_utf8"),
        (b"\xff\xfe\x00garbage", "invalid_utf8"),
        (b'{"id": 7}', "missing_text"),
        (b'{"text": null}', "missing_text"),
        (b'{"text": 42}', "text_not_string"),
        (b'{"text": ["a", "list"]}', "text_not_string"),
        (b'{"text": "   "}', "empty_text"),
        (b'["an", "array"]', "not_an_object"),
        (b'{"text": "lone \\ud800 surrogate"}', "invalid_unicode"),
        (b"", "blank_line"),
    ]
    big = json.dumps({"id": "huge", "text": ("All work and no play makes a dull document. " * 1_200_000)}).encode()
    assert len(big) > 50_000_000
    lines = [json.dumps(r).encode() for r in good[:10]]
    for raw, _ in bad_lines[:6]:
        lines.append(raw)
    lines.append(big)
    for raw, _ in bad_lines[6:]:
        lines.append(raw)
    lines += [json.dumps(r).encode() for r in good[10:]]
    path = tmp_path / "corrupt.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    stats = run(config([path], max_doc_bytes=8 * 1024 * 1024, unit_bytes=4096), tmp_path / "out")
    rejects = [json.loads(x) for x in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    want = sorted([r for _, r in bad_lines] + ["too_large"])
    assert sorted(r["reason"] for r in rejects) == want
    assert stats["records"] == len(lines)
    assert stats["docs"] == len(good)
    assert sum(stats["rejected"].values()) == len(want)
    huge = next(r for r in rejects if r["reason"] == "too_large")
    assert huge["line"] == 17 and huge["path"] == str(path)
    # nothing vanished: every valid document is either written, removed by a filter, or a duplicate
    removed = sum(sum(st["removed"].values()) for st in stats["chains"]["web"])
    assert stats["written"] + removed + stats["near_duplicates"] == stats["docs"]


def test_jsonl_gz_zst_and_parquet_inputs_give_the_same_output(tmp_path):
    recs = prose_records(30)
    plain = write_jsonl(tmp_path / "a.jsonl", recs)
    body = plain.read_bytes()
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(body, mtime=0))
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(body))
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "d.parquet", row_group_size=7)
    texts = {}
    for name in ("a.jsonl", "b.jsonl.gz", "c.jsonl.zst", "d.parquet"):
        run(config([tmp_path / name]), tmp_path / f"out-{name}")
        texts[name] = read_out(tmp_path / f"out-{name}").column("text").to_pylist()
    assert texts["a.jsonl"], "nothing kept"
    assert texts["a.jsonl"] == texts["b.jsonl.gz"] == texts["c.jsonl.zst"] == texts["d.parquet"]


def test_output_schema_manifest_stats_and_samples(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", prose_records(60))
    stats = run(config([src]), tmp_path / "out")
    out = tmp_path / "out"
    table = read_out(out)
    assert table.schema.names == ["id", "text", "source", "meta"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert sum(s["rows"] for s in manifest["shards"]) == table.num_rows == stats["written"]
    meta = json.loads(table.column("meta")[0].as_py())
    assert meta["kind"] == "web" and meta["language"] == "en" and meta["url"].startswith("https://docs/")
    assert stats["near_duplicates"] >= 4  # the planted exact copies of documents the filters kept
    ids = set(table.column("id").to_pylist())
    assert not any(i.startswith("dup-") for i in ids)
    samples = [json.loads(x) for x in (out / "removed_samples.jsonl").read_text().splitlines()]
    reasons = {(s["filter"], s["reason"]) for s in samples}
    assert ("language", "language_not_kept") in reasons and ("dedup", "near_duplicate") in reasons
    stage = stats["chains"]["web"][0]
    assert {"name", "in", "kept", "removed", "bytes_in", "bytes_kept", "seconds"} <= set(stage)
    funnel = [f["docs"] for f in stats["funnel"]]
    assert funnel == sorted(funnel, reverse=True)
    assert "not reported" in stats["tracker"]


def test_code_chain_keeps_real_sources_and_never_runs_prose_rules(tmp_path, monkeypatch):
    for cls in (LanguageFilter, GopherQualityFilter, RepetitionFilter, C4Filter, FineWebFilter):
        monkeypatch.setattr(cls, "check", lambda self, doc: pytest.fail(f"prose rule {self.name} saw code"))
    files = realtext.code_files()
    src = write_jsonl(tmp_path / "code.jsonl", [{"id": k, "text": v} for k, v in files.items()])
    stats = run(config([src], kind="code"), tmp_path / "out")
    assert stats["written"] == len(files)
    assert [s["name"] for s in stats["chains"]["code"]] == ["normalize", "length", "code"]
    kept = read_out(tmp_path / "out")
    assert dict(zip(kept.column("id").to_pylist(), kept.column("text").to_pylist(), strict=True)).keys() == files.keys()


def test_math_chain_keeps_latex_that_the_web_chain_removes(tmp_path):
    docs = realtext.math_docs()
    assert len(docs) >= 3
    src = write_jsonl(tmp_path / "math.jsonl", [{"id": k, "text": v} for k, v in docs.items()])
    web = run(config([src], kind="web"), tmp_path / "web")
    math = run(config([src], kind="math"), tmp_path / "math")
    assert math["written"] == len(docs)
    assert web["written"] < len(docs)


def test_killed_run_resumed_gives_byte_identical_output(tmp_path):
    records = prose_records(150) * 4
    for i, r in enumerate(records):
        r["id"] = f"doc-{i}"
    src = write_jsonl(tmp_path / "in.jsonl", records)
    settings = {"unit_bytes": 16_384, "shard_docs": 40}
    run(config([src], **settings), tmp_path / "straight")
    recipe = tmp_path / "cfg.yaml"
    recipe.write_text(json.dumps({"tracker": {"mode": "disabled"},
                                  "data": config([src], **settings).model_dump(mode="json")}))
    proc = subprocess.Popen([sys.executable, "-m", "moelab.cli", "data", "filter", str(recipe), "--out",
                             str(tmp_path / "killed")], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    units = tmp_path / "killed" / "work" / "units"
    deadline = time.time() + 120
    while time.time() < deadline and len(list(units.glob("u*.json"))) < 3:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "killed" / "manifest.json").exists(), "the run finished before it could be killed"
    finished = len(list(units.glob("u*.json")))
    stats = run(config([src], **settings), tmp_path / "killed")
    assert stats["units"] > finished
    assert shard_bytes(tmp_path / "killed") == shard_bytes(tmp_path / "straight")
    assert len(shard_bytes(tmp_path / "straight")) > 1
    # a finished run reruns as a no-op with the same bytes
    before = {p: os.stat(p).st_mtime_ns for p in (tmp_path / "straight").glob("part-*.parquet")}
    run(config([src], **settings), tmp_path / "straight")
    assert {p: os.stat(p).st_mtime_ns for p in before} == before


@pytest.mark.slow
def test_two_ray_workers_give_the_same_output_as_one(tmp_path, ray_local):
    src = write_jsonl(tmp_path / "in.jsonl", prose_records(80))
    settings = {"unit_bytes": 40_000, "shard_docs": 25}
    run(config([src], workers=1, **settings), tmp_path / "one")
    run(config([src], workers=2, **settings), tmp_path / "two")
    run(config([src], workers=0, **settings), tmp_path / "local")
    one = shard_bytes(tmp_path / "one")
    assert one and one == shard_bytes(tmp_path / "two") == shard_bytes(tmp_path / "local")


def test_truncated_gzip_is_reported_not_fatal(tmp_path):
    body = "".join(json.dumps(r) + "\n" for r in prose_records(40)).encode()
    blob = gzip.compress(body, mtime=0)
    (tmp_path / "cut.jsonl.gz").write_bytes(blob[: len(blob) // 2])
    stats = run(config([tmp_path / "cut.jsonl.gz"]), tmp_path / "out")
    assert stats["rejected"].get("unreadable_file") == 1
    assert 0 < stats["docs"] < 40


def test_funnel_is_reported_through_shared_tracking_for_the_corpus_and_each_source(tmp_path):
    from services.data_filter.report import report_funnel
    from shared.config import load_config

    a = write_jsonl(tmp_path / "a.jsonl", prose_records(10))
    b = write_jsonl(tmp_path / "b.jsonl", prose_records(6))
    data = DataConfig.model_validate({"inputs": [{"name": "alpha", "paths": [str(a)]}, {"name": "beta", "paths": [str(b)]}],
                                      "filter": {"workers": 0}})
    stats = run(data, tmp_path / "out")
    exp = load_config(None, ["tracker.mode=offline", f"tracker.spool_dir={tmp_path / 'spool'}"])
    status = report_funnel(stats, exp, timeout=5)
    assert "reported to the tracker" in status
    spooled = "".join(p.read_text() for p in (tmp_path / "spool").glob("*.jsonl"))
    assert "funnel" in spooled and "data_filter/records" in spooled
    for name in ("documents", "documents/alpha", "documents/beta"):
        assert f'"{name}"' in spooled, name
    per_source = [f["docs"] for f in stats["sources"]["alpha"]["funnel"]]
    assert per_source[0] == 10 + 1 + 4 and per_source == sorted(per_source, reverse=True)
    assert sum(s["funnel"][-1]["docs"] for s in stats["sources"].values()) == stats["written"]


def test_our_output_reads_back_as_input_with_its_meta(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", prose_records(12))
    run(config([src]), tmp_path / "first")
    shard = sorted((tmp_path / "first").glob("part-*.parquet"))[0]
    run(config([shard]), tmp_path / "second")
    again = read_out(tmp_path / "second")
    meta = json.loads(again.column("meta")[0].as_py())
    assert meta["url"].startswith("https://docs/") and again.num_rows == pq.read_table(shard).num_rows
