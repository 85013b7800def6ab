"""Quality rubrics: dimensions, versioned prompt templates and the JSON schema an oracle must answer in.

Two rubrics, after Nemotron-style quality attributes (HelpSteer2's five, Wang et al. 2024) and
Seed-Coder's code rubric: `general` rates helpfulness, correctness, coherence, complexity and
verbosity as integers 0-4; `code` rates readability, modularity, clarity and reusability 0-10.
Which rubric applies is decided by the source kind: `code` uses the code rubric, web/math/science
the general one.

Answers are validated with a pydantic model built from the rubric (exact keys, integers in
range, nothing extra); its JSON schema is what the vllm/openai backends pass as structured
output. A prompt template lives in `prompts/<rubric>_v<version>.txt`; the version is part of
the label-cache key, so editing a rubric means bumping its version.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from shared.config.kinds import SOURCE_KINDS

PROMPTS_DIR = Path(__file__).parent / "prompts"


class InvalidAnswer(ValueError):
    """The oracle's answer is not a JSON object matching the rubric's schema."""


@dataclass(frozen=True)
class Rubric:
    name: str
    version: int
    dims: tuple[str, ...]
    max_score: int

    @property
    def key(self) -> str:
        """Name + version, e.g. `general-v1`; part of every label-cache key."""
        return f"{self.name}-v{self.version}"

    @cached_property
    def template(self) -> str:
        path = PROMPTS_DIR / f"{self.name}_v{self.version}.txt"
        if not path.is_file():
            raise FileNotFoundError(f"prompt template {path} is missing; rubric {self.key} needs it")
        return path.read_text()

    @cached_property
    def model(self) -> type[BaseModel]:
        fields = {d: (int, Field(..., ge=0, le=self.max_score, strict=True)) for d in self.dims}
        return create_model(  # type: ignore[call-overload]
            f"{self.name.capitalize()}Scores", __config__=ConfigDict(extra="forbid"), **fields
        )

    def json_schema(self) -> dict:
        """The JSON schema handed to structured-output decoding (vLLM guided JSON / response_format)."""
        return self.model.model_json_schema()

    def answer_regex(self) -> str:
        """A regex accepting exactly the canonical compact answer (keys in order, integers in range).

        Stricter than the JSON schema (no free whitespace), for servers that take a regex
        constraint (vLLM `structured_outputs.regex`): a weak model cannot pad its answer forever.
        """
        num = "(?:10|[0-9])" if self.max_score == 10 else f"[0-{self.max_score}]"
        body = ", ".join(f'"{d}": {num}' for d in self.dims)
        return "\\{" + body + "\\}"

    def prompt(self, text: str, kind: str, max_chars: int) -> str:
        return self.template.format(text=text[:max_chars], kind=kind)

    def parse(self, raw: str) -> dict[str, int]:
        """Validate an oracle answer; raise InvalidAnswer naming what was wrong (never default a value).

        Accepts the JSON object on its own or wrapped in prose/code fences (the first `{...}`
        span is taken); everything inside must match the schema exactly.
        """
        if (raw or "").startswith("<error>"):
            raise InvalidAnswer(f"oracle request failed: {raw[8:500]}")
        match = re.search(r"\{.*\}", raw or "", flags=re.DOTALL)
        if match is None:
            raise InvalidAnswer(f"no JSON object in answer {raw[:200]!r}")
        try:
            obj = json.loads(match.group(0))
        except json.JSONDecodeError as exc:
            raise InvalidAnswer(f"answer is not valid JSON ({exc.msg} at char {exc.pos}): {raw[:200]!r}") from None
        try:
            return self.model.model_validate(obj).model_dump()
        except ValidationError as exc:
            errs = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors())
            raise InvalidAnswer(f"answer does not match rubric {self.key}: {errs}") from None

    def aggregate(self, scores: dict[str, float]) -> float:
        """Aggregate quality in [0, 1]: the mean of the dimensions divided by the scale maximum."""
        return sum(float(scores[d]) for d in self.dims) / (len(self.dims) * self.max_score)


GENERAL = Rubric("general", 1, ("helpfulness", "correctness", "coherence", "complexity", "verbosity"), 4)
CODE = Rubric("code", 1, ("readability", "modularity", "clarity", "reusability"), 10)
RUBRICS = {r.name: r for r in (GENERAL, CODE)}


def rubric_for(kind: str) -> Rubric:
    """The rubric a source kind uses: code → code rubric; web/math/science → general rubric."""
    if kind not in SOURCE_KINDS:
        raise ValueError(f"unknown source kind {kind!r}; expected one of {SOURCE_KINDS} (set data.inputs[].kind)")
    return CODE if kind == "code" else GENERAL


def kind_of_source(source: str, kinds: dict[str, str]) -> str:
    """A document's kind from its source name: the kind `data.inputs` gives that source, else the
    name itself where it names a kind (documents written without a configured input), else web."""
    return kinds.get(source, source if source in SOURCE_KINDS else "web")
