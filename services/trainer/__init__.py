"""Trainer service: Ray Train workers, expert + data parallelism, checkpoints, router health."""
