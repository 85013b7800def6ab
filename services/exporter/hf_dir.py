"""Writing and reading the exported folder: HF weights and config, tokenizer, generation config, and
the `moelab/` sidecar that makes the export invertible.

Layout of OUT:
- `config.json`, `model.safetensors` (or `model-0000k-of-0000n.safetensors` + `model.safetensors.index.json`
  above 5 GB), written by `save_pretrained` in the hub's per-expert layout that transformers and
  vLLM read;
- `tokenizer.json`, `tokenizer_config.json`, `special_tokens_map.json` (a fast tokenizer around
  the run's own BPE), `generation_config.json`;
- `moelab/`: `config.yaml` (the run's resolved config), `restore.safetensors` (what HF has no place
  for: bungee scalars, both router biases, the values a division does not restore exactly) and
  `export.json` (source checkpoint, architecture, which bias was exported, the round-trip figures).
  It sits in a subfolder so engines that load every top-level `*.safetensors` never see it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors.torch import load_file, save_file

from services.exporter.mapping import Architecture
from shared.config import ExperimentConfig, save_resolved
from shared.data.atomic import atomic_write_json
from shared.data.tokenizer import MoeTokenizer

SIDECAR = "moelab"
RESTORE_FILE = "restore.safetensors"
MANIFEST_FILE = "export.json"
MAX_SHARD = "5GB"


def build_hf_model(arch: Architecture, fields: dict[str, Any], state: dict[str, torch.Tensor],
                   tokenizer: MoeTokenizer) -> transformers.PreTrainedModel:
    """The HF model of `arch` holding exactly `state` (every tensor present, no extra one), fp32."""
    config = transformers.AutoConfig.for_model(arch.model_type, **fields, eos_token_id=tokenizer.eos_id,
                                               bos_token_id=None, pad_token_id=None, architectures=[arch.name])
    config.dtype = torch.float32
    with torch.device("meta"):
        model = getattr(transformers, arch.name)(config)
    expected = set(model.state_dict())
    missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or extra:  # a mapping bug, never a user error: say exactly what does not line up
        raise RuntimeError(f"{arch.name}: mapped tensors do not match the HF model: missing {missing[:5]}, extra {extra[:5]}")
    model.load_state_dict({k: v.float().contiguous() for k, v in state.items()}, strict=True, assign=True)
    model.tie_weights()
    return model.eval()


def write_hf_folder(out: Path, model: transformers.PreTrainedModel, tokenizer: MoeTokenizer, cfg: ExperimentConfig,
                    restore: dict[str, torch.Tensor], manifest: dict[str, Any], max_shard: str = MAX_SHARD) -> None:
    """Write everything but the final manifest figures into `out` (a fresh temporary folder); weights above
    `max_shard` are split into shards with an index."""
    model.save_pretrained(out, max_shard_size=max_shard, safe_serialization=True)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tokenizer.path / "tokenizer.json")
                                                if tokenizer.path.is_dir() else str(tokenizer.path),
                                                eos_token=tokenizer.eos_token)
    fast.model_max_length = cfg.model.max_seq_len
    fast.save_pretrained(out)
    transformers.GenerationConfig(eos_token_id=tokenizer.eos_id, do_sample=False).save_pretrained(out)
    side = out / SIDECAR
    side.mkdir()
    save_resolved(cfg, side)
    save_file({k: v.contiguous() for k, v in restore.items()}, str(side / RESTORE_FILE))
    if tokenizer.path.is_dir():
        for name in ("moelab_tokenizer.json", "tokenizer.json"):
            if (tokenizer.path / name).is_file():
                (side / "tokenizer").mkdir(exist_ok=True)
                shutil.copy2(tokenizer.path / name, side / "tokenizer" / name)
    atomic_write_json(side / MANIFEST_FILE, manifest)


def read_sidecar(folder: Path) -> tuple[Path, dict[str, torch.Tensor], dict[str, Any]]:
    """(config.yaml path, restore tensors, manifest) of an export, or FileNotFoundError naming the file."""
    side = folder / SIDECAR
    for name in ("config.yaml", RESTORE_FILE, MANIFEST_FILE):
        if not (side / name).is_file():
            raise FileNotFoundError(f"{side / name}: missing; {folder} was not written by `moelab export` (or was "
                                    "copied without its moelab/ folder), so it cannot be read back bitwise")
    return side / "config.yaml", load_file(str(side / RESTORE_FILE)), json.loads((side / MANIFEST_FILE).read_text())
