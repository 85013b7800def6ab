"""Reference language models for the perplexity filter (an n-gram estimator and LM backends)."""
