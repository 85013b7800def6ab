"""heads.pt blobs back into heads: one head per state dict, an ensemble per list of them."""

from __future__ import annotations

import pytest
import torch

from services.scorer.cascade import build_heads
from services.scorer.heads import HEADS_VERSION, HeadEnsemble, Judge, Probe
from services.scorer.windows import DOC_STATS


def _blob(probe_state, judge_state, judge_cfg) -> dict:
    return {"meta": {"heads_version": HEADS_VERSION},
            "rubrics": {"general": {"dims": ["a", "b"], "probe": probe_state, "judge": judge_state, "judge_cfg": judge_cfg}}}


def test_build_heads_restores_single_heads_and_ensembles_exactly():
    judge_cfg = {"dim": 16, "layers": 1, "heads": 2, "pool": 1, "readout_queries": 2}
    probes = [Probe(8, 2) for _ in range(3)]
    judges = [Judge(8, 2, **judge_cfg) for _ in range(3)]
    pooled, stats = torch.randn(4, 8), torch.randn(4, DOC_STATS)

    probe, judge = build_heads(_blob(probes[0].state_dict(), judges[0].state_dict(), judge_cfg), 8)["general"]
    assert isinstance(probe, Probe) and isinstance(judge, Judge) and not judge.training
    torch.testing.assert_close(probe.forward_pooled(pooled, stats), probes[0].forward_pooled(pooled, stats))

    blob = _blob([p.state_dict() for p in probes], [j.state_dict() for j in judges], judge_cfg)
    probe, judge = build_heads(blob, 8)["general"]
    assert isinstance(probe, HeadEnsemble) and len(judge.members) == 3
    expected = torch.stack([p.forward_pooled(pooled, stats) for p in probes]).mean(0)
    torch.testing.assert_close(probe.forward_pooled(pooled, stats), expected)
    for restored, original in zip(judge.members, judges, strict=True):
        for (name, a), (_, b) in zip(restored.state_dict().items(), original.state_dict().items(), strict=True):
            assert torch.equal(a, b), name


def test_build_heads_refuses_another_heads_version():
    blob = _blob(Probe(8, 2).state_dict(), {}, {})
    blob["meta"]["heads_version"] = HEADS_VERSION - 1
    with pytest.raises(ValueError, match="rerun `moelab score train`"):
        build_heads(blob, 8)
