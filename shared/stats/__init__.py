"""Statistics that turn a few noisy runs into a decision: paired differences, bootstrap intervals, verdicts."""

from shared.stats.paired import Comparison, bootstrap_mean_interval, compare_paired, mean_sd
from shared.stats.verdict import seeds_needed, verdict_line

__all__ = ["Comparison", "bootstrap_mean_interval", "compare_paired", "mean_sd", "seeds_needed", "verdict_line"]
