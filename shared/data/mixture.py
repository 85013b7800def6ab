"""SeqIO-style mixtures: sources with target token rates, packed into fixed-length sequences.

In the spirit of SeqIO's `Mixture` (Roberts et al. 2022, "Scaling Up Models and Data with t5x
and seqio"): a mixture is a set of sources (each a set of token shards) with target rates. Unlike
SeqIO's random sampling, the order is a deterministic schedule (`RateSchedule`, Tijdeman 1980) so
the realised proportions stay within one sequence of target at every prefix, which matters for
short proxy runs. Every sequence holds tokens of one source only, so the share of sequences is the
share of tokens.

When a source runs out before the budget, `on_exhausted` decides: `repeat` starts a new epoch with
a new shuffle (and logs a warning naming the source and the epoch), `stop` ends the stream before
the first sequence that would need a second epoch (and logs why). Epochs per source are reported
by `report` and by `simulate` (the `moelab data mixture-stats` numbers).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from shared.data.schedule import RateSchedule
from shared.data.shards import Shard, ShardError, manifest_shards, read_manifest
from shared.data.source import PackedSource

log = logging.getLogger(__name__)


class SourceExhausted(RuntimeError):
    """A source ran out in `stop` mode; the message names it and the step."""


class Mixture:
    """Sources + normalised target rates + sequence length + exhaustion policy.

    `sequence(i, k)` is the k-th sequence (seq_len + 1 tokens) of the i-th source, read directly;
    `plan(counts, t, n)` extends the schedule by n slots and says which (source, k) fills each.
    """

    def __init__(
        self,
        sources: Mapping[str, PackedSource],
        rates: Mapping[str, float],
        seq_len: int,
        on_exhausted: str = "repeat",
    ):
        if on_exhausted not in ("repeat", "stop"):
            raise ValueError(f"on_exhausted must be 'repeat' or 'stop', got {on_exhausted!r}")
        if seq_len < 1:
            raise ValueError(f"seq_len must be ≥ 1, got {seq_len}")
        missing = sorted(k for k, v in rates.items() if v > 0 and k not in sources)
        if missing:
            raise ShardError(
                f"mixture.rates names source(s) {missing} that have no shards; available: {sorted(sources)}"
            )
        if not rates:  # natural mixture: proportional to each source's tokens
            rates = {name: float(src.doc_tokens) for name, src in sources.items()}
        self.names = sorted(k for k, v in rates.items() if v > 0)
        if not self.names:
            raise ValueError("mixture rates are all zero")
        total = sum(rates[k] for k in self.names)
        self.rates = [rates[k] / total for k in self.names]
        self.sources = [sources[k] for k in self.names]
        self.unused = sorted(set(sources) - set(self.names))
        self.seq_len = int(seq_len)
        self.on_exhausted = on_exhausted
        self.schedule = RateSchedule(self.rates)
        self.eos_id = self.sources[0].eos_id
        self.capacities = [s.capacity(self.seq_len) for s in self.sources]
        empty = [n for n, c in zip(self.names, self.capacities, strict=True) if c == 0]
        if empty and on_exhausted == "stop":
            raise ShardError(
                f"source(s) {empty} hold fewer than seq_len + 1 = {self.seq_len + 1} tokens, so "
                "mixture.on_exhausted=stop could not yield a single sequence; use repeat or more data"
            )

    @classmethod
    def from_shards(
        cls,
        root: str | Path,
        rates: Mapping[str, float],
        seq_len: int,
        seed: int = 0,
        on_exhausted: str = "repeat",
        verify: str = "size",
    ) -> Mixture:
        """Open every shard of a manifest (memory-mapped; `verify="full"` checks all sha256 first)."""
        manifest = read_manifest(root)
        by_source: dict[str, list[Shard]] = {}
        tok_hash = manifest["tokenizer"]["hash"]
        for info in manifest_shards(manifest):
            if info.tokenizer_hash != tok_hash:
                raise ShardError(
                    f"shard {info.name} was made by tokenizer {info.tokenizer_hash[:12] or '?'}…, the manifest "
                    f"names {tok_hash[:12]}…; rebuild {root} with one tokenizer"
                )
            by_source.setdefault(info.source, []).append(Shard(root, info, verify=verify))
        eos = manifest["tokenizer"]["eos_id"]
        sources = {name: PackedSource(name, shards, eos, seed) for name, shards in by_source.items()}
        return cls(sources, rates, seq_len, on_exhausted)

    def sequence(self, i: int, k: int) -> np.ndarray:
        return self.sources[i].window(k * self.seq_len, self.seq_len + 1)

    def epoch_of(self, i: int, k: int) -> int:
        """0-based epoch in which sequence k of source i ends."""
        return (k * self.seq_len + self.seq_len) // self.sources[i].epoch_tokens

    def plan(self, counts: list[int], t: int, n: int, announce: bool = True) -> list[tuple[int, int]]:
        """Extend the stream by slots t..t+n-1: (source index, its sequence number) per slot.

        Updates `counts` in place. In `stop` mode raises `SourceExhausted` (counts untouched) if a
        slot would need a source beyond its first epoch; in `repeat` mode logs each new epoch
        (when `announce`: data-parallel ranks other than 0 stay quiet).
        """
        trial = list(counts)
        picks = []
        for slot in range(t, t + n):
            i = self.schedule.pick(trial, slot)
            k = trial[i]
            if k >= self.capacities[i]:
                if self.on_exhausted == "stop":
                    raise SourceExhausted(
                        f"source {self.names[i]!r} ran out after {k} sequences ({k * self.seq_len} tokens, one "
                        f"epoch) at stream slot {slot}; mixture.on_exhausted=stop ends the stream here"
                    )
                epoch, before = self.epoch_of(i, k), (self.epoch_of(i, k - 1) if k else 0)
                if announce and (k == 0 or epoch > before):
                    # The first repeat is a warning; later ones are routine for that source.
                    log.log(
                        logging.WARNING if before == 0 else logging.INFO,
                        "mixture: source %r ran out at stream slot %d (epoch %d done after %d sequences); "
                        "repeating it with a new shuffle (epoch %d)",
                        self.names[i], slot, epoch, k, epoch + 1,
                    )
            trial[i] += 1
            picks.append((i, k))
        counts[:] = trial
        return picks

    def report(self, counts: list[int]) -> dict[str, dict]:
        """Per source: sequences, tokens, target and realised rate, epochs consumed."""
        n = max(1, sum(counts))
        return {
            name: {
                "target_rate": rate,
                "rate": c / n,
                "sequences": c,
                "tokens": c * self.seq_len,
                "epochs": src.epochs(c, self.seq_len),
                "epoch_tokens": src.epoch_tokens,
            }
            for name, rate, c, src in zip(self.names, self.rates, counts, self.sources, strict=True)
        }


def simulate(mixture: Mixture, budget_tokens: int, min_prefix: int = 100) -> dict:
    """Run the schedule (no token reads) for `budget_tokens`; report realised mix and worst deviation.

    `worst_prefix_deviation` is max over prefixes n ≥ `min_prefix` sequences and sources of
    |c_i(n)/n − r_i| (a fraction: 0.01 = one percentage point); `worst_count_deviation` is
    max |c_i(n) − r_i·n| in sequences over all prefixes (Tijdeman's bound keeps it below 1).
    """
    from tqdm import tqdm

    n_total = math.ceil(budget_tokens / mixture.seq_len)
    counts = [0] * len(mixture.names)
    rates = mixture.rates
    worst_rate = worst_count = 0.0
    stopped = None
    bar = tqdm(total=n_total, desc="schedule", unit="seq", unit_scale=True, disable=n_total < 2_000_000)
    for t in range(n_total):
        try:
            mixture.plan(counts, t, 1)
        except SourceExhausted as exc:
            stopped = str(exc)
            break
        if t % 65_536 == 65_535:
            bar.update(65_536)
        n = t + 1
        dev = max(abs(c - r * n) for c, r in zip(counts, rates, strict=True))
        worst_count = max(worst_count, dev)
        if n >= min_prefix:
            worst_rate = max(worst_rate, dev / n)
    bar.close()
    return {
        "budget_tokens": budget_tokens,
        "seq_len": mixture.seq_len,
        "sequences": sum(counts),
        "tokens": sum(counts) * mixture.seq_len,
        "on_exhausted": mixture.on_exhausted,
        "stopped": stopped,
        "min_prefix": min_prefix,
        "worst_prefix_deviation": worst_rate,
        "worst_count_deviation": worst_count,
        "unused_sources": mixture.unused,
        "sources": mixture.report(counts),
    }
