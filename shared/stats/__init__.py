"""Statistics that turn a few noisy runs into a decision: paired differences, t-intervals, verdicts."""

from shared.stats.paired import Comparison, compare_paired, mean_sd, t_mean_interval
from shared.stats.verdict import seeds_needed, verdict_line

__all__ = ["Comparison", "t_mean_interval", "compare_paired", "mean_sd", "seeds_needed", "verdict_line"]
