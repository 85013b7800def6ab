"""Training batches from a `Mixture`: `(inputs_BT, targets_BT, doc_ids_BT)` per data-parallel rank.

The global stream is one sequence index per slot; global step s covers slots
[s·B·W, (s+1)·B·W) for B sequences per rank and W ranks, and rank r takes every W-th slot
(r, r+W, …). Every rank runs the same cheap schedule arithmetic, so all ranks agree on counts,
epochs and the stopping step, and reads only its own sequences from the memory-mapped shards.

`state_dict()` is the step and one count per source (identical on every rank);
`load_state_dict()` continues with exactly the batches an uninterrupted run yields from that step.
A state holding only the step is accepted too: the counts are recomputed by the schedule.

`doc_ids_BT` (when `doc_boundaries=True`) numbers the documents inside each row: token t belongs
to document `doc_ids[t]`, which increases by one after every separator. Attention restricted to
equal ids (e.g. FlexAttention's document mask) keeps packed documents from seeing each other.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import numpy as np
import torch

from shared.data.mixture import Mixture, SourceExhausted

log = logging.getLogger(__name__)


class Batch(NamedTuple):
    inputs_BT: torch.Tensor
    targets_BT: torch.Tensor
    doc_ids_BT: torch.Tensor | None
    sources_B: tuple[str, ...]


def doc_ids(inputs_BT: np.ndarray, eos_id: int) -> np.ndarray:
    """Document number of each token within its row: the count of separators strictly before it."""
    is_sep = inputs_BT == eos_id
    ids = np.zeros(inputs_BT.shape, dtype=np.int32)
    np.cumsum(is_sep[:, :-1], axis=1, out=ids[:, 1:])
    return ids


class MixtureLoader:
    """Iterator over training batches for one data-parallel rank; resumable from a small state."""

    def __init__(
        self,
        mixture: Mixture,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        doc_boundaries: bool = False,
    ):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be ≥ 1, got {batch_size}")
        self.mixture = mixture
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.doc_boundaries = doc_boundaries
        self.step = 0
        self.counts = [0] * len(mixture.names)
        self.stopped: str | None = None

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    def __iter__(self) -> MixtureLoader:
        return self

    def __next__(self) -> Batch:
        if self.stopped is not None:
            raise StopIteration
        try:
            picks = self.mixture.plan(
                self.counts, self.step * self.global_batch, self.global_batch, announce=self.rank == 0
            )
        except SourceExhausted as exc:
            self.stopped = str(exc)
            if self.rank == 0:
                log.warning("mixture stream stopped at step %d: %s", self.step, exc)
            raise StopIteration from None
        mine = picks[self.rank :: self.world_size]
        rows = np.stack([self.mixture.sequence(i, k) for i, k in mine])
        self.step += 1
        inputs, targets = rows[:, :-1], rows[:, 1:]
        ids = torch.from_numpy(doc_ids(inputs, self.mixture.eos_id)) if self.doc_boundaries else None
        return Batch(
            torch.from_numpy(np.ascontiguousarray(inputs)),
            torch.from_numpy(np.ascontiguousarray(targets)),
            ids,
            tuple(self.mixture.names[i] for i, _ in mine),
        )

    def state_dict(self) -> dict:
        return {
            "step": self.step,
            "counts": dict(zip(self.mixture.names, self.counts, strict=True)),
            "global_batch": self.global_batch,
            "seq_len": self.mixture.seq_len,
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume at `state["step"]`; names what differs when the state came from another setup."""
        for key, mine in (("global_batch", self.global_batch), ("seq_len", self.mixture.seq_len)):
            if key in state and state[key] != mine:
                raise ValueError(f"loader state has {key}={state[key]}, this loader has {mine}; resume with the same setup")
        step = int(state["step"])
        if "counts" in state:
            counts = state["counts"]
            if sorted(counts) != self.mixture.names:
                raise ValueError(f"loader state has sources {sorted(counts)}, the mixture has {self.mixture.names}")
            self.counts = [int(counts[n]) for n in self.mixture.names]
            if sum(self.counts) != step * self.global_batch:
                raise ValueError(f"loader state counts sum to {sum(self.counts)}, expected step × global_batch")
        else:
            self.counts = self.mixture.schedule.counts_at(step * self.global_batch)
        self.step = step
        self.stopped = None
