"""`moelab` as an lm-eval model: any harness task, or a local task folder, runs on a moelab checkpoint.

Why an adapter and not an export: the harness scores a model through three calls (log-likelihood
of a continuation, rolling log-likelihood of a text, greedy generation), and moelab already has
them in `shared.eval.scoring`, the code the trainer's in-loop evaluation uses, so the harness's
numbers and the training curves come from the same arithmetic. Registered under the name
`moelab`, so `lm_eval --model moelab --model_args checkpoint=RUN_OR_STEP` works once this module
is imported (`moelab eval` imports it).

Generation is greedy and recomputes the whole window for every new token (no KV cache): correct,
and fast enough for the short answers of the tasks small proxies are judged on.
"""

from __future__ import annotations

from typing import Any

import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from shared.eval.scoring import encode_pair, rolling_windows, score_continuations


@register_model("moelab")
class MoelabLM(LM):
    """lm-eval model over an in-memory moelab model + tokenizer, or a checkpoint loaded by path.

    checkpoint: a run folder or `step_*` folder (`shared.checkpoint.read.load_trained_model`);
    or pass `model` and `tokenizer` objects directly. seq_len: the scoring window (default the
    trained `train.seq_len`, else the model's `max_seq_len`).
    """

    def __init__(self, model: torch.nn.Module | None = None, tokenizer: Any = None, checkpoint: str | None = None,
                 seq_len: int | None = None, batch_size: int | str = 8, max_gen_toks: int = 128,
                 bias: str = "average", device: str = "cpu", **_harness_kwargs: Any) -> None:
        super().__init__()
        if checkpoint is not None:
            from shared.checkpoint.read import load_trained_model

            loaded = load_trained_model(checkpoint, bias=bias, device=device, require_tokenizer=True)
            model, tokenizer = loaded.model, loaded.tokenizer
            seq_len = seq_len or min(loaded.cfg.train.seq_len, loaded.cfg.model.max_seq_len)
        if model is None or tokenizer is None:
            raise ValueError("the moelab lm-eval model needs checkpoint=PATH, or both model and tokenizer")
        self.model = model.eval()
        self.tok = tokenizer
        self.seq_len = int(seq_len or model.cfg.max_seq_len)
        self.batch_size = int(batch_size) if str(batch_size).isdigit() else 8  # "auto" → the default
        self.max_gen_toks = int(max_gen_toks)

    @property
    def eot_token_id(self) -> int:
        return self.tok.eos_id

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """(Σ log p(continuation | context), continuation is the greedy one) per (context, continuation)."""
        pairs = [encode_pair(self.tok, ctx, cont) for ctx, cont in (r.args for r in requests)]
        scored = score_continuations(self.model, pairs, seq_len=self.seq_len, batch_size=self.batch_size,
                                     pad_id=self.tok.eos_id)
        return [(s.logprob, s.greedy) for s in scored]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Σ log p(text) over disjoint windows of the text, the same windows bits per byte uses."""
        out = []
        for (text, *_rest) in (r.args for r in requests):
            windows = rolling_windows([self.tok.eos_id, *self.tok.encode(text)], self.seq_len)
            scored = score_continuations(self.model, windows, seq_len=self.seq_len, batch_size=self.batch_size,
                                         pad_id=self.tok.eos_id)
            out.append(sum(s.logprob for s in scored))
        return out

    @torch.no_grad()
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy continuation of each context, cut at the first stop string or after `max_gen_toks` tokens."""
        device = next(self.model.parameters()).device
        out = []
        for context, gen_kwargs in (r.args for r in requests):
            until = gen_kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            limit = int(gen_kwargs.get("max_gen_toks", self.max_gen_toks))
            ids = [self.tok.eos_id, *self.tok.encode(context)]
            new: list[int] = []
            text = ""
            for _ in range(limit):
                window = (ids + new)[-self.seq_len:]
                logits_BTV, _ = self.model(torch.tensor([window], device=device))
                nxt = int(logits_BTV[0, -1].argmax())
                if nxt == self.tok.eos_id:
                    break
                new.append(nxt)
                text = self.tok.decode(new)
                if any(s in text for s in until):
                    break
            for s in until:
                text = text.split(s)[0]
            out.append(text)
        return out
