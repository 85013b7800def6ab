"""The checkpoint reader loads what the trainer saved, picks the bias asked for, and names the file
of every way a checkpoint can be unusable."""

from __future__ import annotations

import shutil

import pytest
import torch

from shared.checkpoint import CheckpointError, load_trained_model, resolve_checkpoint
from tests.shared.checkpoint.fake_run import make_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ckpt")
    return make_run(tmp, "tiny", steps=(2, 5))


def test_run_folder_resolves_to_its_newest_complete_checkpoint(run):
    path, _ = run
    unfinished = path / "checkpoints" / "step_00000009.tmp"
    unfinished.mkdir()
    no_meta = path / "checkpoints" / "step_00000008"
    no_meta.mkdir()
    try:
        assert resolve_checkpoint(path).name == "step_00000005"
        assert resolve_checkpoint(path / "checkpoints").name == "step_00000005"
        assert resolve_checkpoint(path / "checkpoints" / "step_00000002").name == "step_00000002"
        with pytest.raises(CheckpointError, match="unfinished"):
            resolve_checkpoint(unfinished)
        with pytest.raises(CheckpointError, match="meta.json"):
            resolve_checkpoint(no_meta)
    finally:
        unfinished.rmdir()
        no_meta.rmdir()


def test_empty_or_missing_folder_is_an_error_naming_it(tmp_path):
    with pytest.raises(CheckpointError, match=str(tmp_path)):
        resolve_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="no such"):
        resolve_checkpoint(tmp_path / "nope")


def test_loaded_model_has_every_saved_tensor_and_the_average_bias(run):
    path, saved = run
    loaded = load_trained_model(path)
    assert not loaded.model.training and loaded.step == 5 and loaded.tokenizer is not None
    want = saved.state_dict()
    got = loaded.model.state_dict()
    assert set(got) == set(want)
    for key in want:
        assert torch.equal(got[key], want[key]), key
    tokens = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    saved.eval()
    with torch.no_grad():
        assert torch.equal(loaded.model(tokens)[0], saved(tokens)[0])


def test_live_bias_is_what_eval_mode_routes_with_when_asked(run):
    path, saved = run
    avg = load_trained_model(path, bias="average").model
    live = load_trained_model(path, bias="live").model
    for layer_avg, layer_live, layer_saved in zip(avg.moe_layers(), live.moe_layers(), saved.moe_layers(), strict=True):
        assert torch.equal(layer_live.router.selection_bias(), layer_saved.router.expert_bias_E)
        assert torch.equal(layer_avg.router.selection_bias(), layer_saved.router.expert_bias_avg_E)
    tokens = torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert not torch.equal(avg(tokens)[0], live(tokens)[0])


def _copy_run(run, tmp_path):
    path, _ = run
    copy = tmp_path / "runs" / "copy"
    shutil.copytree(path, copy)
    return copy


def test_truncated_tensor_file_is_an_error_naming_the_checkpoint(run, tmp_path):
    copy = _copy_run(run, tmp_path)
    ckpt = resolve_checkpoint(copy)
    data = next(ckpt.glob("*.distcp"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 3])
    with pytest.raises(CheckpointError, match=f"{ckpt}.*truncated or corrupt"):
        load_trained_model(copy)


def test_corrupt_metadata_is_an_error_naming_the_file(run, tmp_path):
    copy = _copy_run(run, tmp_path)
    ckpt = resolve_checkpoint(copy)
    (ckpt / ".metadata").write_bytes(b"not a pickle")
    with pytest.raises(CheckpointError, match=r"\.metadata: unreadable"):
        load_trained_model(copy)


def test_checkpoint_of_another_model_shape_is_an_error_naming_both_files(run, tmp_path):
    copy = _copy_run(run, tmp_path)
    cfg_file = copy / "config.yaml"
    cfg_file.write_text(cfg_file.read_text().replace("expert_hidden: 64", "expert_hidden: 32"))
    with pytest.raises(CheckpointError, match=r"another model config.*config.yaml.*shape mismatches.*w1_EFD"):
        load_trained_model(copy)


def test_missing_config_and_missing_tokenizer_are_errors_naming_the_file(run, tmp_path):
    copy = _copy_run(run, tmp_path)
    text = (copy / "config.yaml").read_text()
    (copy / "config.yaml").write_text(text.replace(str(tmp_path.parent), str(tmp_path / "gone")))
    loaded = load_trained_model(copy)
    assert loaded.tokenizer is None
    with pytest.raises(CheckpointError, match="tokenizer.*missing"):
        load_trained_model(copy, require_tokenizer=True)
    (copy / "config.yaml").unlink()
    with pytest.raises(CheckpointError, match="config.yaml: missing"):
        load_trained_model(copy)
