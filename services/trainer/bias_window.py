"""When the router biases move: after every update's loads, or once loads summed over a token window.

Why a window: with one-sequence micro-batches the bias steps after every 128 tokens, chasing each
sequence's topic; the step loads look balanced, but the bias a run ends with is a snapshot of that
chase and routes a frozen model out of balance. Summing the loads over `bias_update_window_tokens`
(≥ 65k: what a large-batch recipe sees per step) before one step gives the bias the noise of a
big batch at small-batch cost. The loads are the ones the trainer has already summed over ranks,
so every rank holds the same window and applies the same step; the window (its loads and token
count) is saved in each checkpoint, so a resumed run moves its bias where the uninterrupted one does.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class BiasUpdates:
    """Called once per bias update with the tokens behind it (the loads already in each MoE layer's
    `load_accum_E`); with `window_tokens` 0 it moves the biases at once, otherwise it moves them when
    the summed loads cover the window, by one step from the sum."""

    def __init__(self, model: nn.Module, window_tokens: int) -> None:
        self.model, self.window = model, window_tokens
        self.tokens = 0.0
        self.loads: list[torch.Tensor] = [torch.zeros_like(layer.load_accum_E) for layer in model.moe_layers()] if window_tokens else []

    @torch.no_grad()
    def __call__(self, tokens: float) -> bool:
        """Take one update's loads (over `tokens` tokens); returns whether the biases moved."""
        if not self.window:
            self.model.update_router_biases(tokens)
            return True
        for summed, layer in zip(self.loads, self.model.moe_layers(), strict=True):
            summed += layer.load_accum_E
            layer.load_accum_E.zero_()
        self.tokens += tokens
        if self.tokens < self.window:
            return False
        for summed, layer in zip(self.loads, self.model.moe_layers(), strict=True):
            layer.load_accum_E.copy_(summed)
            summed.zero_()
        self.model.update_router_biases(self.tokens)  # the average weighs the step by the window's tokens
        self.tokens = 0.0
        return True

    def state_dict(self) -> dict[str, Any]:
        """The open window, for a checkpoint's meta (empty without a window)."""
        return {"tokens": self.tokens, "loads": [s.tolist() for s in self.loads]} if self.window else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not self.window:
            return
        if len(state.get("loads", [])) != len(self.loads):
            raise ValueError(f"checkpoint's bias window holds {len(state.get('loads', []))} layers' loads, the model "
                             f"has {len(self.loads)} MoE layers; was it written with another bias_update_window_tokens?")
        self.tokens = float(state["tokens"])
        for summed, saved in zip(self.loads, state["loads"], strict=True):
            summed.copy_(torch.tensor(saved, dtype=summed.dtype))
