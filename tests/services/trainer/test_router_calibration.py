"""`moelab router calibrate|frozen` on a trained checkpoint: only the eval-time bias changes, the calibration is
recorded, and the frozen measure of a calibrated checkpoint routes past its calibration tokens."""

from __future__ import annotations

import json

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from typer.testing import CliRunner

from moelab.cli import app
from moelab.commands.demo_router import measure_frozen_router
from services.trainer.data import with_parquet_documents
from services.trainer.launch import run_local
from services.trainer.loop import run_dir
from services.trainer.router_calibration import (
    calibrate_checkpoint,
    frozen_report,
    held_out_stream,
    load_checkpoint,
)
from tests.services.trainer.conftest import tiny_cfg


def _flat(ckpt, tmp_path, name):
    dcp_to_torch_save(str(ckpt), str(tmp_path / name))
    return torch.load(tmp_path / name, weights_only=False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, doc_globs):
    tmp = tmp_path_factory.mktemp("calib")
    cfg = tiny_cfg(tmp, doc_globs)
    run_local(cfg)
    return run_dir(cfg)


def test_calibrated_checkpoint_differs_only_in_the_eval_time_bias(trained, tmp_path):
    result = calibrate_checkpoint(trained, tokens=4096, eval_tokens=2048, out=tmp_path / "cal", held_out=False, min_tokens=0)
    original = _flat(trained / "checkpoints" / "step_00000006", tmp_path, "a.pt")
    calibrated = _flat(result["checkpoint"], tmp_path, "b.pt")
    assert sorted(original["model"]) == sorted(calibrated["model"])
    changed = sorted(k for k in original["model"] if not torch.equal(original["model"][k], calibrated["model"][k]))
    assert changed and all(k.endswith("router.expert_bias_avg_E") for k in changed)
    flat_a, flat_b = original["optim"], calibrated["optim"]
    assert json.dumps(flat_a, default=str, sort_keys=True) == json.dumps(flat_b, default=str, sort_keys=True) or all(
        torch.equal(flat_a["state"][p][n], flat_b["state"][p][n]) for p in flat_a["state"] for n in flat_a["state"][p]
        if torch.is_tensor(flat_a["state"][p][n]))
    assert result["checkpoint"] == str(tmp_path / "cal" / "checkpoints" / "step_00000006")
    meta = json.loads((tmp_path / "cal" / "checkpoints" / "step_00000006" / "meta.json").read_text())
    record = meta["router_calibration"]
    assert record["data"]["tokens"] == 4096 and record["data"]["stream"] == "train"
    assert meta["data"] == json.loads((trained / "checkpoints" / "step_00000006" / "meta.json").read_text())["data"]
    # the written checkpoint loads like any other and routes with the calibrated bias
    _, model, _, _, _ = load_checkpoint(tmp_path / "cal")
    for k in changed:
        torch.testing.assert_close(model.state_dict()[k], calibrated["model"][k])
    assert set(record["after"]["train"]["maxvio"]) == set(record["layers"])


def test_router_calibrate_refuses_too_few_tokens_and_a_missing_checkpoint(trained, tmp_path):
    result = CliRunner().invoke(app, ["router", "calibrate", str(trained), "--tokens", "1000"])
    assert result.exit_code == 2 and "65536" in result.output
    result = CliRunner().invoke(app, ["router", "frozen", str(tmp_path)])
    assert result.exit_code == 2 and "neither a checkpoint folder" in result.output


def test_router_frozen_skips_the_tokens_a_calibrated_checkpoint_was_calibrated_on(trained, tmp_path):
    """The calibration tokens start at the checkpoint's loader position, where the frozen measure
    starts too: routing them would judge the bias on the sample it was fitted to."""
    calibrate_checkpoint(trained, tokens=4096, eval_tokens=1024, out=tmp_path / "cal", held_out=False, min_tokens=0)
    result = CliRunner().invoke(app, ["router", "frozen", str(tmp_path / "cal"), "--tokens", "1024", "--no-held-out"])
    assert result.exit_code == 0, result.output
    assert "skipped the 4,096 training-stream tokens" in result.output
    printed = json.loads(result.output.strip().splitlines()[-1])
    assert printed["calibration_tokens_skipped"] == 4096
    cfg, model, _, meta, _ = load_checkpoint(tmp_path / "cal")
    cfg = with_parquet_documents(cfg)
    after = frozen_report(model, cfg, meta["data"], 1024, skip_tokens=4096, held_out=False)["train"]
    fitted = frozen_report(model, cfg, meta["data"], 1024, held_out=False)["train"]
    assert printed["train"]["maxvio"] == after["maxvio"] != fitted["maxvio"]


def test_router_frozen_skips_nothing_on_an_uncalibrated_checkpoint(trained):
    result = CliRunner().invoke(app, ["router", "frozen", str(trained), "--tokens", "1024", "--no-held-out"])
    assert result.exit_code == 0, result.output
    assert "skipped the" not in result.output
    assert json.loads(result.output.strip().splitlines()[-1])["calibration_tokens_skipped"] == 0


def test_the_demo_prints_both_streams_of_a_calibrated_run_past_its_calibration_tokens(trained, tmp_path):
    calibrate_checkpoint(trained, tokens=4096, eval_tokens=1024, out=tmp_path / "cal", held_out=False, min_tokens=0)
    lines = measure_frozen_router(tmp_path / "cal", tokens=1024)
    assert [line.split(":")[0] for line in lines[2:]] == [
        "held-out", "held-out at the training stream's source mix", "training stream", "bias"], lines
    assert "1,024 tokens in" in lines[2] and "1,024 tokens in" in lines[4]
    assert lines[5].startswith("bias: calibrated at the end of training on 4,096") and "after them" in lines[5]


def test_the_held_out_stream_is_read_once_however_many_tokens_are_asked_for(trained):
    """A split smaller than the ask gives what it holds: a repeated document would enter the floor's
    bootstrap as a second, independent one."""
    cfg, _, _, _, _ = load_checkpoint(trained)
    cfg = with_parquet_documents(cfg)
    once = held_out_stream(cfg, 10**6)
    assert held_out_stream(cfg, 2 * 10**6).inputs_NT.shape == once.inputs_NT.shape
    rows = {tuple(r.tolist()) for r in once.inputs_NT}
    assert len(rows) == once.inputs_NT.shape[0]  # no sequence twice
    fewer = held_out_stream(cfg, 2 * cfg.train.seq_len)
    assert fewer.inputs_NT.shape[0] == 2 and torch.equal(fewer.inputs_NT, once.inputs_NT[:2])


def test_calibrations_on_different_sample_sizes_can_be_judged_on_the_same_tokens(trained, tmp_path):
    """`eval_after` moves the judged tokens past a larger sample; it may never reach back into the calibration's."""
    result = calibrate_checkpoint(trained, tokens=2048, eval_tokens=1024, out=tmp_path / "a", held_out=False, min_tokens=0,
                                  eval_after=4096)
    cfg, model, _, meta, _ = load_checkpoint(trained)
    judged = frozen_report(model, with_parquet_documents(cfg), meta["data"], 1024, skip_tokens=4096, held_out=False)["train"]
    assert result["eval_after"] == 4096 and result["before"]["train"]["maxvio"] == judged["maxvio"]
    with pytest.raises(ValueError, match="include calibration tokens"):
        calibrate_checkpoint(trained, tokens=4096, eval_tokens=1024, out=tmp_path / "b", held_out=False, min_tokens=0,
                             eval_after=2048)


def test_a_held_out_source_shorter_than_one_sequence_does_not_stop_the_held_out_stream(trained, tmp_path):
    """The demo's held-out split has such a source; the one-pass cap must not refuse the split."""
    from services.trainer.data import prepare_shards
    from tests.services.trainer.conftest import write_docs

    cfg, _, _, _, _ = load_checkpoint(trained)
    cfg = with_parquet_documents(cfg)
    tiny = write_docs(tmp_path / "tiny", ["A few words."], "tiny")
    mix = cfg.mixture.model_copy(update={"eval_documents": [*cfg.mixture.eval_documents, tiny],
                                         "shard_dir": str(tmp_path / "tokens")})
    cfg = cfg.model_copy(update={"mixture": mix})
    prepare_shards(cfg, 0)
    got = held_out_stream(cfg, 10**6)
    assert got is not None and 0 < got.inputs_NT.shape[0] < 10**6 // cfg.train.seq_len


@pytest.mark.slow
@pytest.mark.timeout(3600)  # six training steps, then three layer passes over 65,536 tokens
def test_calibrate_at_end_leaves_the_calibrated_bias_and_its_record_in_the_final_checkpoint(tmp_path, doc_globs):
    cfg = tiny_cfg(tmp_path, doc_globs, "model.moe.balance.calibrate_at_end=true",
                   "model.moe.balance.calibration_tokens=65536")
    result = run_local(cfg)
    final = run_dir(cfg) / "checkpoints" / "step_00000006"
    meta = json.loads((final / "meta.json").read_text())
    assert meta["router_calibration"]["data"]["tokens"] == 65536
    assert set(meta["router_calibration"]["layers"]) == {"layer1", "layer2", "layer3"}
    assert all(f"router_calibration/maxvio_after/layer{i}" in result for i in (1, 2, 3))
    assert all(result[f"router_calibration/maxvio_after/layer{i}"] < result[f"router_calibration/maxvio_before/layer{i}"]
               for i in (1, 2, 3))
    # the final checkpoint loads like any other, with its calibration record
    _, model, _, saved_meta, _ = load_checkpoint(final)
    assert saved_meta["router_calibration"]["layers"]["layer1"]["maxvio_after"] == result["router_calibration/maxvio_after/layer1"]
    assert all(layer.router.expert_bias_avg_E.abs().sum() > 0 for layer in model.moe_layers())
