"""Readers (JSONL plain/.gz/.zst, Parquet) and the sharded, atomic Parquet writer."""
