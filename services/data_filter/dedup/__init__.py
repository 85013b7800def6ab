"""MinHash LSH near-duplicate detection (signatures per document, candidate pairs per band)."""
