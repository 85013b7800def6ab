"""The demo's ablation step for real: submitted with `ray job submit` to the demo's kind of Ray head,
from a working dir whose .gitignore leaves runs/ out of the upload, as `make demo` does."""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from moelab.commands import demo
from moelab.commands.demo_processes import RECORD_FILE, stop_recorded
from moelab.commands.demo_transcript import DemoTranscript
from shared.net import free_port
from tests.cluster.ablation_corpus import make_corpus

REPO = Path(__file__).resolve().parents[3]
TINY = ["model.vocab_size=512", "model.d_model=32", "model.n_layers=2", "model.max_seq_len=64",
        "mixture.tokenizer.vocab_size=512", "train.steps=3", "train.seq_len=32", "train.micro_batch_size=2",
        "train.grad_accum=1", "train.eval_batches=2", "optim.warmup_steps=1", "ablation.seeds=2",
        "ablation.suite=false", "ablation.tokenizer_docs_per_arm=40"]


def _checkout(root: Path) -> Path:
    """A repository copy: configs, .gitignore, committed raw data, and the pipeline's kept set under runs/."""
    shutil.copytree(REPO / "configs", root / "configs")
    shutil.copytree(REPO / "data" / "reference", root / "data" / "reference")
    shutil.copy(REPO / ".gitignore", root / ".gitignore")
    corpus = make_corpus(root / "corpus")
    (root / "data" / "demo").mkdir(parents=True)
    for name in ("clean", "noisy"):
        with gzip.open(root / "data" / "demo" / f"{name}.jsonl.gz", "wb") as fh:
            fh.write(corpus[name].read_bytes())
    clean = [line for line in corpus["clean"].read_text().splitlines() if line.startswith("{\"id\"")]
    kept = root / "runs" / "pipeline" / "demo" / "kept" / "train"
    kept.mkdir(parents=True)
    rows = [json.loads(line) for line in clean]
    pq.write_table(pa.Table.from_pylist([{k: r[k] for k in ("id", "text", "source")} for r in rows]), kept / "prose.parquet")
    shutil.rmtree(root / "corpus")
    return root / "runs"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_demos_ablation_job_finds_the_kept_set_and_writes_its_report_under_runs(tmp_path, monkeypatch, capsys):
    root = tmp_path / "repo"
    runs = _checkout(root)
    monkeypatch.chdir(root)
    monkeypatch.setattr(demo, "DEMO_ABLATION_SIZE", TINY)
    # Ray's session sockets live under the temp dir and a socket path must stay under 108 bytes
    head = demo.RayHead(temp_dir=tempfile.mkdtemp(prefix="mla-", dir="/tmp"), dashboard_port=free_port(),
                        gcs_port=free_port(), agent_port=free_port(), client_port=free_port())
    monkeypatch.setattr(demo, "DEMO_HEAD", head)
    env = {"MOELAB_TRACKER_TOKEN": "", "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    try:
        demo.ensure_ray(root, 2, head)
        transcript = DemoTranscript(root, 2, runs / "demo-transcript.txt")
        demo.run_demo_ablation(root, runs, f"http://127.0.0.1:{free_port()}", env, transcript)
    finally:
        stop_recorded(root / RECORD_FILE, grace_s=10.0)
        shutil.rmtree(head.temp_dir, ignore_errors=True)
    out = capsys.readouterr().out
    assert "== data ablation (raw vs curated, 2 seeds)" in out
    report = runs / "ablation" / "demo-small" / "report.md"
    assert report.is_file() and f"report: {report}" in out
    verdicts = json.loads(report.with_suffix(".json").read_text())["verdicts"]
    assert len(verdicts) == 1 and "eval/loss" in verdicts[0]  # one metric (suite off), one non-baseline arm
    assert f"verdict: {verdicts[0]}" in out
    assert "| curated |" in report.read_text()
