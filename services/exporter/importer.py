"""`moelab import HF_DIR OUT_RUN`: an exported folder back into a moelab run folder.

The HF tensors are read through transformers (`from_pretrained`, so the per-expert hub layout is
stacked back the way transformers stacks it), mapped back with `weights.from_hf` and the export's
`moelab/restore.safetensors`, and written as a model-only DCP checkpoint under
`OUT_RUN/checkpoints/step_<step>/` with `OUT_RUN/config.yaml` and the tokenizer copied to
`OUT_RUN/tokenizer/`. `shared.checkpoint.load_trained_model(OUT_RUN)` then reads it; its tensors
equal the exported checkpoint's bit for bit (tested). Only folders written by `moelab export` are
read: a foreign HF model has no moelab config to restore.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
import warnings
from pathlib import Path

import torch.distributed.checkpoint as dcp
import yaml

from services.exporter.hf_dir import SIDECAR, read_sidecar
from services.exporter.mapping import ARCHITECTURES
from services.exporter.roundtrip import load_hf
from services.exporter.weights import from_hf
from shared.config import save_resolved
from shared.config.loader import validate
from shared.data.tokenizer import load_tokenizer
from shared.model import MoETransformer


class ImportRefused(ValueError):
    """The folder cannot be imported; the message names the file."""


def import_hf(folder: str | os.PathLike, out_run: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write the moelab run folder for the export at `folder`; returns its checkpoint folder."""
    folder, out_run = Path(folder), Path(out_run).absolute()
    if out_run.exists() and not overwrite:
        raise ImportRefused(f"{out_run}: already exists; pass --overwrite to replace it or choose another folder")
    try:
        config_file, restore, manifest = read_sidecar(folder)
    except FileNotFoundError as exc:
        raise ImportRefused(str(exc)) from None
    cfg = validate(yaml.safe_load(config_file.read_text(encoding="utf-8")) or {}, source=str(config_file))
    arch = next((a for a in ARCHITECTURES if a.name == manifest.get("architecture")), None)
    if arch is None:
        raise ImportRefused(f"{folder / SIDECAR / 'export.json'}: unknown architecture {manifest.get('architecture')!r}")
    hf_state = {k: v.detach().float() for k, v in load_hf(folder).state_dict().items()}
    state = from_hf(hf_state, cfg.model, arch, restore)
    expected = MoETransformer(cfg.model).state_dict()  # names and shapes only
    wrong = sorted(set(expected) ^ set(state)) + [k for k in expected if k in state and state[k].shape != expected[k].shape]
    if wrong:
        raise ImportRefused(f"{folder}: the tensors do not form {config_file}'s model: {wrong[:5]}")
    tmp = out_run.with_name(f".{out_run.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        tokenizer_dir = tmp / "tokenizer"
        tokenizer_dir.mkdir(parents=True)
        src_tok = folder / SIDECAR / "tokenizer"
        for f in (src_tok.iterdir() if src_tok.is_dir() else [folder / "tokenizer.json"]):
            shutil.copy2(f, tokenizer_dir / f.name)
        load_tokenizer(tokenizer_dir)
        cfg.mixture.tokenizer.out_dir = str(out_run / "tokenizer")
        cfg.mixture.tokenizer.path = None
        save_resolved(cfg, tmp)
        step = int(manifest.get("source_step", 0))
        ckpt = tmp / "checkpoints" / f"step_{step:08d}"
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.save({"model": {k: v.contiguous() for k, v in state.items()}}, checkpoint_id=str(ckpt))
        meta = {"step": step, "imported_from": str(folder.absolute()), "source_checkpoint": manifest.get("source_checkpoint"),
                "tracker_run_id": manifest.get("tracker_run_id")}
        (ckpt / "meta.json").write_text(json.dumps(meta, indent=2))
        if out_run.exists():
            shutil.rmtree(out_run)
        out_run.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, out_run)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_run / "checkpoints" / f"step_{step:08d}"


