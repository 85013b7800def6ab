"""`moelab export CKPT OUT`: a trained checkpoint as a checked Hugging Face model folder.

Steps: load the checkpoint (`shared.checkpoint`, whole even when expert-parallel ranks wrote it),
choose the HF architecture or refuse (`mapping`), fold moelab's differences into the weights
(`weights`), write a temporary folder beside OUT (`hf_dir`), load it back with transformers and
compare (`roundtrip`), and only then rename it to OUT. A failure at any step leaves OUT as it was
and removes the temporary folder; an existing OUT is replaced only with `overwrite`.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.exporter.hf_dir import MAX_SHARD, build_hf_model, write_hf_folder
from services.exporter.lineage import record_export
from services.exporter.mapping import Architecture, choose_architecture, hf_config
from services.exporter.roundtrip import RoundTrip, check_round_trip
from services.exporter.weights import to_hf
from shared.checkpoint import load_trained_model
from shared.checkpoint.read import route_with_live_bias
from shared.data.atomic import atomic_write_json

log = logging.getLogger(__name__)


class ExportError(RuntimeError):
    """OUT cannot be written (exists without --overwrite, or lies inside the checkpoint)."""


@dataclass
class ExportResult:
    out: Path
    architecture: Architecture
    checkpoint: Path
    bias: str
    check: RoundTrip
    manifest: dict[str, Any]


def _replace(tmp: Path, out: Path) -> None:
    """Move the finished `tmp` to `out`; an old `out` is moved aside first and removed only after."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def export_checkpoint(ckpt: str | os.PathLike, out: str | os.PathLike, *, bias: str = "average",
                      overwrite: bool = False, greedy_tokens: int = 16, record: bool = True,
                      max_shard: str = MAX_SHARD) -> ExportResult:
    """Export `ckpt` (run folder or step_* folder) to `out`; see the module docstring."""
    out = Path(out).absolute()
    if out.exists() and not overwrite:
        raise ExportError(f"{out}: already exists; pass --overwrite to replace it or choose another OUT")
    if bias not in ("average", "live"):
        raise ExportError(f"bias must be 'average' or 'live', got {bias!r}")
    # read with the true average (the restore tensors keep both biases as saved); the check below
    # routes with the bias that was exported
    trained = load_trained_model(ckpt, bias="average", require_tokenizer=True)
    arch = choose_architecture(trained.cfg.model)
    tokenizer = trained.require_tokenizer()
    if tokenizer.vocab_size > trained.cfg.model.vocab_size:
        raise ExportError(f"{tokenizer.path}: {tokenizer.vocab_size} tokens, more than model.vocab_size "
                          f"{trained.cfg.model.vocab_size}; this tokenizer is not the model's")
    hf_state, restore = to_hf(trained.model.state_dict(), trained.cfg.model, arch, bias)
    if bias == "live":
        route_with_live_bias(trained.model)
    trained.bias = bias
    hf_model = build_hf_model(arch, hf_config(trained.cfg.model, arch), hf_state, tokenizer)
    manifest: dict[str, Any] = {
        "format": "hf", "architecture": arch.name, "source_checkpoint": str(trained.checkpoint.absolute()),
        "source_step": trained.step, "router_bias": bias, "eval_bias_in_config": trained.cfg.model.moe.balance.eval_bias,
        "tracker_run_id": trained.meta.get("tracker_run_id"), "restore_values": sum(
            v.numel() for k, v in restore.items() if k.endswith(".val")),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        write_hf_folder(tmp, hf_model, tokenizer, trained.cfg, restore, manifest, max_shard)
        del hf_model
        check = check_round_trip(trained.model, tmp, greedy_tokens=greedy_tokens)
        manifest["round_trip"] = check.figures()
        atomic_write_json(tmp / "moelab" / "export.json", manifest)
        _replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    result = ExportResult(out, arch, trained.checkpoint, bias, check, manifest)
    if record:
        record_export(trained, result)
    return result
