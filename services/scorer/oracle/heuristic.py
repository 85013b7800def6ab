"""HEURISTIC STAND-IN ORACLE: rubric scores computed from text signals, for the CPU demo only.

This is not a language model and its labels are not quality judgements; it exists so the whole
label → distil → calibrate → score path runs on a laptop with no model weights. Every log line,
report and tracker run made with it says `oracle=heuristic (stand-in)`. Its signals are real
measurements that move when a document is damaged (prose_signals.py, code_signals.py, each with
the defect it catches): per-language Kneser–Ney perplexity and out-of-vocabulary rate against
clean reference text (reference.py), sentence cohesion and sentence openers, repetition,
truncation, spam markers; for code, comment and docstring density in the file's own language,
identifier quality and line structure. The rubric mapping is fixed arithmetic rounded to the
rubric's integer scale: deterministic for a given reference.
"""

from __future__ import annotations

import json

from services.scorer.oracle.base import Oracle, OracleRequest
from services.scorer.oracle.code_signals import code_scores, code_signals
from services.scorer.oracle.prose_signals import general_scores, prose_signals
from services.scorer.oracle.reference import LanguageModel, language_models
from services.scorer.rubrics import CODE, GENERAL


def _clip(x: float, hi: int) -> int:
    return int(min(hi, max(0, round(x))))


class HeuristicOracle(Oracle):
    """Deterministic CPU stand-in for the oracle LLM (see the module docstring): never a real label."""

    name = "heuristic"
    model = "heuristic-stand-in-v5"
    is_stand_in = True

    def __init__(self, reference: tuple[str, ...] = (), reference_every: int = 3,
                 models: dict[str, LanguageModel] | None = None) -> None:
        super().__init__()
        self._reference = (tuple(reference), reference_every)
        self._models = models

    @classmethod
    def from_config(cls, cfg) -> HeuristicOracle:
        return cls(tuple(cfg.reference), cfg.reference_every)

    @property
    def models(self) -> dict[str, LanguageModel]:
        """Reference language models, built on first use (a few seconds; cached per process)."""
        if self._models is None:
            self._models = language_models(*self._reference) if self._reference[0] else {}
        return self._models

    def scores(self, text: str, kind: str) -> dict[str, int]:
        if kind == "code":
            raw, rubric = code_scores(code_signals(text)), CODE
        else:
            raw, rubric = general_scores(prose_signals(text, self.models)), GENERAL
        return {d: _clip(raw[d], rubric.max_score) for d in rubric.dims}

    def _answer(self, requests: list[OracleRequest]) -> list[str]:
        return [json.dumps(self.scores(req.text, req.kind)) for req in requests]
