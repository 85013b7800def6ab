"""Perplexity backends: KenLM (ARPA/binary by path, the CCNet standard) and a local causal LM.

Both score a document's perplexity per token. KenLM scores each line as a sentence (with <s> and
</s>) after CCNet-style normalisation (`kneser_ney.tokenize`); the document perplexity is
10^(-total log10 prob / tokens). The causal LM backend (a Hugging Face model directory) scores
the first `max_tokens` tokens and returns exp(mean negative log-likelihood).
"""

from __future__ import annotations

import functools
import math
import os

from services.data_filter.lm.kneser_ney import tokenize


@functools.lru_cache(maxsize=4)
def _kenlm_model(path: str):
    import kenlm

    if not os.path.isfile(path):
        raise FileNotFoundError(f"kenlm model not found: {path} (perplexity.model_path)")
    return kenlm.Model(path)


class KenLMScorer:
    def __init__(self, path: str):
        self.model = _kenlm_model(str(path))

    def perplexity(self, lines: list[str]) -> float:
        logp = 0.0
        n = 0
        for line in lines:
            toks = tokenize(line)
            if not toks:
                continue
            logp += self.model.score(" ".join(toks), bos=True, eos=True)
            n += len(toks) + 1
        return 10 ** (-logp / n) if n else math.inf


class CausalLMScorer:
    def __init__(self, path: str, max_tokens: int = 512):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not os.path.isdir(path):
            raise FileNotFoundError(f"causal LM directory not found: {path} (perplexity.model_path)")
        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path).eval()
        self.max_tokens = max_tokens

    def perplexity(self, lines: list[str]) -> float:
        ids = self.tok("\n".join(lines), return_tensors="pt").input_ids[:, : self.max_tokens]
        if ids.shape[1] < 2:
            return math.inf
        with self.torch.no_grad():
            out = self.model(input_ids=ids, labels=ids)
        return float(math.exp(out.loss.item()))


def make_scorer(backend: str, path: str):
    return KenLMScorer(path) if backend in ("kenlm", "embedded") else CausalLMScorer(path)
