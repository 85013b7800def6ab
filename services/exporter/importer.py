"""`moelab import HF_DIR OUT_RUN`: a Hugging Face folder back into a moelab run folder.

Two kinds of folder are read:
- one written by `moelab export` (it has `moelab/`): the run's config comes from `moelab/config.yaml`
  and the tensors are mapped back with `weights.from_hf` and `moelab/restore.safetensors`, so they
  equal the exported checkpoint's bit for bit (tested);
- a compatible third-party folder (GLM-4-MoE, DeepSeek-V3 or Llama, e.g. saved by `transformers`):
  its `config.json` becomes a moelab model config (`foreign_config`, which refuses what moelab cannot
  represent exactly, naming the field), its `tokenizer.json` the run's tokenizer, and before anything
  is written moelab's model of it is checked against transformers' the way an export is (logits within
  1e-4 on a fixed batch, greedy continuations equal). Weights the folder lacks are refused, never
  left at transformers' random init.

Either way the HF tensors are read through transformers (`from_pretrained`, so the per-expert hub
layout is stacked back the way transformers stacks it) and written as a model-only DCP checkpoint
under `OUT_RUN/checkpoints/step_<step>/` with `OUT_RUN/config.yaml` and `OUT_RUN/tokenizer/`, in a
temporary folder renamed at the end. `shared.checkpoint.load_trained_model(OUT_RUN)` then reads it,
and `train.init_from=OUT_RUN` continues pretraining from it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
import transformers
import yaml

from services.exporter.foreign_config import ImportRefused, read_foreign_config
from services.exporter.hf_dir import SIDECAR, read_sidecar
from services.exporter.mapping import ARCHITECTURES
from services.exporter.roundtrip import RoundTripFailed, check_round_trip, load_hf
from services.exporter.weights import from_hf
from shared.config import ExperimentConfig, save_resolved
from shared.config.loader import validate
from shared.data.tokenizer import TokenizerError, load_tokenizer, save_tokenizer
from shared.model import MoETransformer

__all__ = ["ImportRefused", "import_hf"]


def import_hf(folder: str | os.PathLike, out_run: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write the moelab run folder for the HF folder at `folder`; returns its checkpoint folder."""
    folder, out_run = Path(folder), Path(out_run).absolute()
    if out_run.exists() and not overwrite:
        raise ImportRefused(f"{out_run}: already exists; pass --overwrite to replace it or choose another folder")
    if not folder.is_dir():
        raise ImportRefused(f"{folder}: no such folder")
    read = _read_export if (folder / SIDECAR).is_dir() else _read_foreign
    cfg, state, meta, write_tokenizer = read(folder)
    expected = MoETransformer(cfg.model).state_dict()  # names and shapes only
    wrong = sorted(set(expected) ^ set(state)) + [k for k in expected if k in state and state[k].shape != expected[k].shape]
    if wrong:
        raise ImportRefused(f"{folder}: the tensors do not form the model of its config: {wrong[:5]}")
    return _write_run(out_run, cfg, state, meta, write_tokenizer)


Read = tuple[ExperimentConfig, dict[str, torch.Tensor], dict[str, Any], Callable[[Path], None]]


def _read_export(folder: Path) -> Read:
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

    def write_tokenizer(out: Path) -> None:
        out.mkdir(parents=True)
        src = folder / SIDECAR / "tokenizer"
        for f in (src.iterdir() if src.is_dir() else [folder / "tokenizer.json"]):
            shutil.copy2(f, out / f.name)
        load_tokenizer(out)

    meta = {"step": int(manifest.get("source_step", 0)), "imported_from": str(folder.absolute()),
            "source_checkpoint": manifest.get("source_checkpoint"), "tracker_run_id": manifest.get("tracker_run_id")}
    return cfg, state, meta, write_tokenizer


def _eos_token(folder: Path, tokenizer) -> str | None:
    """The end-of-text token of a third-party folder: tokenizer_config.json's `eos_token`, else the id in
    generation_config.json or config.json."""
    tok_config = folder / "tokenizer_config.json"
    if tok_config.is_file():
        eos = json.loads(tok_config.read_text(encoding="utf-8")).get("eos_token")
        eos = eos.get("content") if isinstance(eos, dict) else eos
        if eos:
            return eos
    for name in ("generation_config.json", "config.json"):
        if (folder / name).is_file():
            ids = json.loads((folder / name).read_text(encoding="utf-8")).get("eos_token_id")
            ids = ids[0] if isinstance(ids, list) and ids else ids
            if isinstance(ids, int) and tokenizer.id_to_token(ids) is not None:
                return tokenizer.id_to_token(ids)
    return None


def _foreign_tokenizer(folder: Path, vocab_size: int) -> Callable[[Path], None]:
    """Check the folder's tokenizer and return the writer of the run's copy; `ImportRefused` naming the file."""
    from tokenizers import Tokenizer

    file = folder / "tokenizer.json"
    if not file.is_file():
        raise ImportRefused(f"{file}: missing; moelab needs the model's fast tokenizer (a tokenizer.json; a "
                            "slow-only one can be converted with transformers' AutoTokenizer and save_pretrained)")
    try:
        tok = Tokenizer.from_file(str(file))
    except Exception as exc:  # the tokenizers library raises a bare Exception for a malformed file
        raise ImportRefused(f"{file}: not a readable tokenizer.json: {exc}") from None
    eos = _eos_token(folder, tok)
    if eos is None or tok.token_to_id(eos) is None:
        raise ImportRefused(f"{folder / 'tokenizer_config.json'}: no eos_token in the tokenizer's vocabulary (nor an "
                            "eos_token_id in generation_config.json or config.json); moelab separates documents with it")
    size = tok.get_vocab_size(with_added_tokens=True)
    if size > vocab_size:
        raise ImportRefused(f"{file}: {size} tokens, more than the model's vocab_size {vocab_size}; not the model's tokenizer")

    def write(out: Path) -> None:
        try:
            save_tokenizer(tok, out, {"kind": "imported", "eos_token": eos, "imported_from": str(file.absolute())})
        except TokenizerError as exc:
            raise ImportRefused(str(exc)) from None

    return write


def _next_token_layer(key: str, n_layers: int) -> bool:
    """A weight of a multi-token-prediction layer past the last block (transformers does not run those either)."""
    m = re.match(r"model\.layers\.(\d+)\.", key)
    return m is not None and int(m.group(1)) >= n_layers


def _read_foreign(folder: Path) -> Read:
    foreign = read_foreign_config(folder)
    write_tokenizer = _foreign_tokenizer(folder, foreign.model.vocab_size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf, info = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                                      output_loading_info=True)
    unexpected = [k for k in info.get("unexpected_keys", []) if not _next_token_layer(k, foreign.model.n_layers)]
    for kind, keys in (("missing", info.get("missing_keys", [])), ("unexpected", unexpected),
                       ("of another shape", info.get("mismatched_keys", []))):
        if keys:
            raise ImportRefused(f"{folder}: weights {kind} for {foreign.architecture.name}: {sorted(map(str, keys))[:5]} "
                                "(transformers would fill or drop them; moelab imports only a complete model)")
    hf = hf.eval()
    hf_state = {k: v.detach().float() for k, v in hf.state_dict().items()}
    state = from_hf(hf_state, foreign.model, foreign.architecture, {}, rope_interleave=foreign.rope_interleave)
    cfg = validate({"model": foreign.model.model_dump(mode="json")}, source=str(folder / "config.json"))
    model = MoETransformer(cfg.model)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ImportRefused(f"{folder}: the tensors do not form the model of its config.json: {exc}") from None
    try:
        check = check_round_trip(model.eval(), folder, greedy_tokens=16, hf=hf, subject="transformers' model")
    except RoundTripFailed as exc:
        raise ImportRefused(f"{exc} (a setting of {folder / 'config.json'} moelab does not read)") from None
    meta = {"step": 0, "imported_from": str(folder.absolute()), "source_checkpoint": None, "tracker_run_id": None,
            "architecture": foreign.architecture.name, "round_trip": check.figures()}
    return cfg, state, meta, write_tokenizer


def _write_run(out_run: Path, cfg: ExperimentConfig, state: dict[str, torch.Tensor], meta: dict[str, Any],
               write_tokenizer: Callable[[Path], None]) -> Path:
    """config.yaml, tokenizer/ and checkpoints/step_<step>/ in a temporary folder renamed to `out_run`."""
    step = meta["step"]
    tmp = out_run.with_name(f".{out_run.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        write_tokenizer(tmp / "tokenizer")
        cfg.mixture.tokenizer.out_dir = str(out_run / "tokenizer")
        cfg.mixture.tokenizer.path = None
        save_resolved(cfg, tmp)
        ckpt = tmp / "checkpoints" / f"step_{step:08d}"
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.save({"model": {k: v.contiguous() for k, v in state.items()}}, checkpoint_id=str(ckpt))
        (ckpt / "meta.json").write_text(json.dumps(meta, indent=2))
        if out_run.exists():
            shutil.rmtree(out_run)
        out_run.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, out_run)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_run / "checkpoints" / f"step_{step:08d}"
