"""One SP Muon step moves a first matrix's outputs by what the RMS-matched update predicts, ∝ √width."""

from __future__ import annotations

import math
from pydoc_data.topics import topics

import pytest

from scripts.muon_sp_prediction import FIRST_MATRIX, measure, predicted_rms
from tests.services.trainer.conftest import tiny_cfg, write_docs


def test_prediction_is_the_rms_matched_step_felt_by_a_unit_input():
    # square n × n: 0.2·√n·‖x‖/√n per coordinate of a unit-RMS x of n coordinates = 0.2·√n
    assert predicted_rms(256, 256, 1.0) == pytest.approx(0.2 * 16)
    # wide up-projection (4n × n): the same √n per coordinate
    assert predicted_rms(1024, 256, 1.0) == pytest.approx(0.2 * 16)
    assert FIRST_MATRIX.search("layers.0.attn.wq.weight") and FIRST_MATRIX.search("layers.1.ffn.experts.w1_EFD")
    assert not FIRST_MATRIX.search("layers.0.attn.wo.weight") and not FIRST_MATRIX.search("layers.1.ffn.experts.w2_EDF")


@pytest.mark.slow
def test_every_first_matrix_grows_as_the_update_predicts(tmp_path):
    """Layer 0 and the MoE layer after it: the deeper one's input is read as the start weights saw it,
    so the upstream step does not move it out of the row space its own update was built from."""
    texts = [t for _, t in sorted(topics.items()) if len(t) > 200]
    globs = (write_docs(tmp_path / "train", texts[:-8], "web"), write_docs(tmp_path / "eval", texts[-8:], "web"))
    cfg = tiny_cfg(tmp_path, globs, "model.n_layers=2")
    res = measure(cfg, [32, 128], seeds=3)
    assert {n.split(".")[1] for n in res} == {"0", "1"} and any("experts" in n for n in res), sorted(res)
    for name, by_width in res.items():
        ratios = [m / p for m, p in by_width.values()]
        assert all(0.5 < r < 1.5 for r in ratios), (name, ratios)  # the input lies in the update's row space
        growth = math.log(by_width[128][0] / by_width[32][0]) / math.log(4)
        # √width up to Newton-Schulz's inexact singular values (measured / P falls to ~0.75 by width 256
        # in the MoE layer): between muP's 0 and Adam's 1, wherever the matrix sits
        assert 0.25 < growth < 0.75, (name, growth)
