"""Router health: turn per-step router statistics into warnings the user sees early.

Why: small-batch MoE training fails quietly — one expert takes most tokens (MaxVio grows),
others starve (dead experts), or the router's distribution collapses (entropy falls) — and the
loss curve shows it only hundreds of steps later. Each condition must hold for a window of steps
before it fires (one noisy step is not a collapse), and each warning fires once per episode
(it re-arms when the condition clears), so the tracker's timeline shows episodes, not spam.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from shared.config.train import RouterHealthConfig


@dataclass
class HealthWarning:
    kind: str  # "maxvio" | "dead_experts" | "entropy_collapse"
    layer: int
    step: int
    message: str
    value: float


@dataclass
class _LayerState:
    maxvio_run: int = 0
    entropy_run: int = 0
    dead_run: list[int] = field(default_factory=list)
    active: set[str] = field(default_factory=set)


class RouterHealthMonitor:
    """Feed `observe(step, layer_stats)` once per step; it returns the warnings that fire now."""

    def __init__(self, cfg: RouterHealthConfig, n_experts: int):
        self.cfg = cfg
        self.n_experts = n_experts
        self.max_entropy = math.log(n_experts) if n_experts > 1 else 1.0
        self.layers: dict[int, _LayerState] = {}
        self.history: list[HealthWarning] = []

    def observe(self, step: int, layer_stats: dict[int, dict]) -> list[HealthWarning]:
        """`layer_stats[layer]` holds `maxvio` (float), `entropy` (float, nats) and `tokens_per_expert`."""
        fired: list[HealthWarning] = []
        for layer, stats in layer_stats.items():
            state = self.layers.setdefault(layer, _LayerState(dead_run=[0] * self.n_experts))
            maxvio = float(stats["maxvio"])
            state.maxvio_run = state.maxvio_run + 1 if maxvio > self.cfg.maxvio_threshold else 0
            if state.maxvio_run >= self.cfg.window:
                self._fire(fired, state, "maxvio", layer, step, maxvio,
                           f"layer {layer}: MaxVio {maxvio:.2f} above {self.cfg.maxvio_threshold} for "
                           f"{state.maxvio_run} steps (one expert takes {1 + maxvio:.1f}x its share)")
            else:
                state.active.discard("maxvio")

            ratio = float(stats["entropy"]) / self.max_entropy
            state.entropy_run = state.entropy_run + 1 if ratio < self.cfg.entropy_floor else 0
            if state.entropy_run >= self.cfg.window:
                self._fire(fired, state, "entropy_collapse", layer, step, ratio,
                           f"layer {layer}: router entropy at {ratio:.0%} of log(E) for {state.entropy_run} steps "
                           f"(floor {self.cfg.entropy_floor:.0%}): the router is collapsing")
            else:
                state.active.discard("entropy_collapse")

            counts = [float(c) for c in stats["tokens_per_expert"]]
            state.dead_run = [run + 1 if c == 0 else 0 for run, c in zip(state.dead_run, counts, strict=True)]
            dead = [e for e, run in enumerate(state.dead_run) if run >= self.cfg.dead_window]
            if dead:
                self._fire(fired, state, "dead_experts", layer, step, float(len(dead)),
                           f"layer {layer}: experts {dead} received no token for {self.cfg.dead_window}+ steps")
            else:
                state.active.discard("dead_experts")
        self.history.extend(fired)
        return fired

    @staticmethod
    def _fire(fired, state, kind, layer, step, value, message) -> None:
        if kind in state.active:
            return
        state.active.add(kind)
        fired.append(HealthWarning(kind, layer, step, message, value))
