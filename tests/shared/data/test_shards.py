"""Token shards: exact contents, manifest counts and checksums, atomic reruns that skip finished work."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from shared.data.build import ITEMS_DIR, build_shards
from shared.data.shards import (
    MANIFEST,
    Shard,
    ShardError,
    manifest_shards,
    pack_documents,
    read_manifest,
    verify_shards,
    write_shard,
)
from shared.data.tokenizer import train_tokenizer
from tests.shared.data.conftest import write_docs


def _docs_by_source(root):
    manifest = read_manifest(root)
    out: dict[str, list[np.ndarray]] = {}
    for info in manifest_shards(manifest):
        shard = Shard(root, info, verify="full")
        out.setdefault(info.source, []).extend(np.array(shard.doc(i)) for i in range(info.docs))
    return manifest, out


def test_shards_hold_every_document_exactly(shards_root, tokenizer, texts):
    manifest, docs = _docs_by_source(shards_root)
    for source, originals in texts.items():
        kept = [t for t in originals if t]
        assert sorted(tokenizer.decode(d) for d in docs[source]) == sorted(kept)
        assert manifest["sources"][source]["docs"] == len(kept)
        assert manifest["sources"][source]["tokens"] == sum(len(d) for d in docs[source])
    assert manifest["skipped"] == {"empty_after_tokenize": 1}  # the one empty sample, counted
    assert manifest["tokenizer"]["hash"] == tokenizer.hash
    assert manifest["tokenizer"]["dtype"] == "uint16"
    assert all(info.dtype == "uint16" for info in manifest_shards(manifest))


def test_shards_are_memory_mapped(shards_root):
    info = manifest_shards(read_manifest(shards_root))[0]
    shard = Shard(shards_root, info)
    assert isinstance(shard.tokens, np.memmap)
    assert shard.offsets[0] == 0 and shard.offsets[-1] == info.tokens and len(shard.offsets) == info.docs + 1


def test_checksum_detects_a_corrupted_bin(tmp_path, shards_root):
    root = tmp_path / "copy"
    shutil.copytree(shards_root, root)
    assert verify_shards(root) == []
    info = manifest_shards(read_manifest(root))[1]
    bin_path, _ = info.paths(root)
    data = bytearray(bin_path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit, same size
    bin_path.write_bytes(bytes(data))
    assert verify_shards(root, full=False) == []  # sizes cannot see it ...
    problems = verify_shards(root, full=True)  # ... the sha256 does
    assert len(problems) == 1 and "checksum mismatch" in problems[0] and str(bin_path) in problems[0]
    with pytest.raises(ShardError, match="checksum mismatch"):
        Shard(root, info, verify="full")


def test_truncated_bin_fails_even_the_cheap_check(tmp_path, shards_root):
    root = tmp_path / "copy"
    shutil.copytree(shards_root, root)
    info = manifest_shards(read_manifest(root))[0]
    bin_path, _ = info.paths(root)
    bin_path.write_bytes(bin_path.read_bytes()[:-2])
    with pytest.raises(ShardError, match="bytes, manifest says"):
        Shard(root, info)


def test_rerun_skips_finished_items_and_rebuilds_only_missing_or_corrupt_ones(tmp_path, tokenizer, docs_path):
    root = tmp_path / "shards"
    first = build_shards([docs_path], tokenizer, root, docs_per_shard=40, use_ray=False, progress=False)
    n = first["build"]["items"]
    assert n >= 3 and first["build"]["items_built"] == n
    again = build_shards([docs_path], tokenizer, root, docs_per_shard=40, use_ray=False, progress=False)
    assert again["build"]["items_built"] == 0 and again["shards"] == first["shards"]

    # A run killed before an item's record was written: only that item is redone.
    records = sorted((root / ITEMS_DIR).glob("*.json"))
    records[0].unlink()
    redo = build_shards([docs_path], tokenizer, root, docs_per_shard=40, use_ray=False, progress=False)
    assert redo["build"]["items_built"] == 1 and redo["shards"] == first["shards"]

    # A corrupted shard is rebuilt by a --verify rerun and checks clean afterwards.
    info = manifest_shards(redo)[0]
    bin_path, _ = info.paths(root)
    data = bytearray(bin_path.read_bytes())
    data[0] ^= 0xFF
    bin_path.write_bytes(bytes(data))
    fixed = build_shards([docs_path], tokenizer, root, docs_per_shard=40, use_ray=False, progress=False, verify=True)
    assert fixed["build"]["items_built"] == 1 and verify_shards(root) == []
    assert not list(root.rglob("*.tmp")), "no temp files may survive a build"


def test_shards_of_another_tokenizer_are_refused(tmp_path, texts, docs_path, shards_root):
    other = train_tokenizer(texts["web"][:20], tmp_path / "other", vocab_size=300)
    root = tmp_path / "copy"
    shutil.copytree(shards_root, root)
    with pytest.raises(ShardError, match="was built with tokenizer"):
        build_shards([docs_path], other, root, use_ray=False, progress=False)


def test_bad_rows_are_counted_with_their_reason(tmp_path, tokenizer):
    bad = [
        {"id": "n1", "text": None, "source": "web", "score": 0.0},
        {"id": "n2", "text": "no source", "source": None, "score": 0.0},
        {"id": "n3", "text": "bad name", "source": "we b/../x", "score": 0.0},
    ]
    path = write_docs(tmp_path / "bad.parquet", {"web": ["fine text"]}, extra_rows=bad)
    manifest = build_shards([path], tokenizer, tmp_path / "s", use_ray=False, progress=False)
    assert manifest["skipped"] == {"bad_source_name": 1, "null_source": 1, "null_text": 1}
    assert manifest["docs"] == 1 and manifest["rows"] == 4


def test_missing_text_column_is_a_clear_error(tmp_path, tokenizer):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": ["a"], "body": ["x"], "source": ["web"]}), tmp_path / "x.parquet")
    with pytest.raises(ShardError, match="missing column"):
        build_shards([tmp_path / "x.parquet"], tokenizer, tmp_path / "s", use_ray=False, progress=False)


def test_large_vocabularies_write_uint32_shards(tmp_path):
    docs = [[70_000, 1, 2], [], [65_535, 65_536]]
    tokens, offsets = pack_documents(docs, np.dtype(np.uint32))
    info = write_shard(tmp_path, "web/big", "web", tokens, offsets)
    (tmp_path / MANIFEST).write_text(json.dumps({"format": "moelab-tokens/1", "shards": [info.to_dict()]}))
    shard = Shard(tmp_path, info, verify="full")
    assert shard.tokens.dtype == np.uint32
    assert [shard.doc(i).tolist() for i in range(3)] == docs
    assert verify_shards(tmp_path) == []


def test_ray_data_build_matches_the_local_build(tmp_path, ray_local, tokenizer, docs_path, shards_root):
    manifest = build_shards([docs_path], tokenizer, tmp_path / "ray", docs_per_shard=40, use_ray=True, workers=2)
    local = read_manifest(shards_root)
    assert manifest["build"]["items_built"] == local["build"]["items"]
    assert manifest["shards"] == local["shards"]  # same names, counts and sha256
    assert verify_shards(tmp_path / "ray") == []


def test_every_shard_names_its_tokenizer_and_a_foreign_one_is_refused(tmp_path, shards_root, tokenizer):
    from shared.data.mixture import Mixture

    manifest = read_manifest(shards_root)
    assert {s["tokenizer_hash"] for s in manifest["shards"]} == {tokenizer.hash}
    root = tmp_path / "copy"
    shutil.copytree(shards_root, root)
    manifest["shards"][0]["tokenizer_hash"] = "0" * 64
    (root / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ShardError, match="was made by tokenizer 000000000000"):
        Mixture.from_shards(root, {}, 16)
