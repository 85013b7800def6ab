"""Data filter service: Ray Data heuristic filters and MinHash near-dedup."""
