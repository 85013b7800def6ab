"""Filter chains: one per source kind, merged field by field onto the kind's defaults.

Why merged: a recipe that says `chains: {web: {language: {languages: [en, es]}}}` means "change
the kept languages", not "replace every chain"; so a chain given in a recipe (and an input's own
`filter`, see `shared/config/data.py`) is deep-merged onto its kind's default chain and every
other kind keeps its defaults. Named chains (`chains.<name>.extends: <kind>`) let several inputs
share one variant. Code and LaTeX-heavy math fail prose heuristics (stop words, symbol ratios,
language ID) for reasons that say nothing about their quality, hence the per-kind defaults.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import Field, RootModel, SerializeAsAny, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from shared.config.base import Section
from shared.config.filters import FILTER_SETTINGS, DedupConfig, FilterSettings
from shared.config.kinds import SOURCE_KINDS

_OFF = {"enabled": False}
# Per kind: how its chain differs from every filter's own defaults.
KIND_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "web": {},
    # code: no prose rule at all (language ID, stop words, Gopher, C4/FineWeb), only The Stack rules
    "code": {
        "normalize": {"collapse_spaces": False, "max_blank_lines": 100}, "language": _OFF, "code": {"enabled": True},
        "repetition": _OFF, "gopher_quality": _OFF, "c4": _OFF, "fineweb": _OFF, "toxicity": _OFF, "perplexity": _OFF,
    },
    # math: LaTeX-heavy text keeps its symbols; length, repetition, toxicity and perplexity apply. In formal
    # notation a whitespace "word" is a symbol, whose n-grams repeat by the notation's grammar (Gopher's n-gram
    # rules removed 73% of the demo's Metamath statements), and each entry repeats its format's template lines
    # ("(Contributed by NM, 4-Nov-2000.)": up to 66% of a clean chunk's characters): no word n-gram rules, and
    # duplicated lines or paragraphs must cover over half the text (a page repeated three times still goes)
    "math": {"normalize": {"collapse_spaces": False}, "language": _OFF, "gopher_quality": _OFF, "c4": _OFF, "fineweb": _OFF,
             "repetition": {"top_ngram_max_frac": {}, "dup_ngram_max_frac": {}, "max_dup_line_char_frac": 0.5,
                            "max_dup_para_char_frac": 0.5}},
    # science prose: web rules without C4's '{' and terminal-punctuation line rules (formulas, tables); language
    # ID, Gopher and repetition judge the prose with LaTeX and code taken out (services/data_filter/prose.py). On
    # the demo's clean sympy.physics docstrings lid.176 gave the prose's top label 'en' every time but under 0.65
    # in 86 of 510 (technical register, 20-80 words; 509 reach 0.3), and 93 are under Gopher's 50 words with
    # their examples: the cut at 0.3 still rejects text whose top label is another language, 20 words is a
    # one-line docstring with its example
    "science": {"c4": _OFF, "language": {"strip_markup": ["latex", "code"], "min_score": 0.3},
                "gopher_quality": {"min_words": 20}},
}
assert tuple(KIND_DEFAULTS) == SOURCE_KINDS, "every source kind needs a default chain"


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` onto `base`, recursively for mappings; lists and scalars replace."""
    out = dict(base)
    for key, value in over.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _error(kind: str, loc: tuple, message: str, value: Any) -> InitErrorDetails:
    return {"type": PydanticCustomError(kind, message), "loc": loc, "input": value}


def relocate(exc: ValidationError, prefix: tuple) -> list[InitErrorDetails]:
    """The errors of `exc` under `prefix`, message kept, ready for `ValidationError.from_exception_data`."""
    return [_error(e["type"], (*prefix, *e["loc"]), e["msg"].removeprefix("Value error, "), e["input"]) for e in exc.errors()]


class ChainConfig(RootModel[dict[str, SerializeAsAny[FilterSettings]]]):
    """Filter name -> its settings, every registered filter present, in registry order."""

    root: dict[str, SerializeAsAny[FilterSettings]] = Field(
        default_factory=dict, description="Filter name -> its settings (every registered filter, in chain order)."
    )

    @model_validator(mode="wrap")
    @classmethod
    def _by_registry(cls, data: Any, handler):
        if isinstance(data, ChainConfig):
            return data
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ValueError(f"a chain is a mapping of filter name -> settings, got {type(data).__name__}")
        errors: list[InitErrorDetails] = []
        for name in data:
            if name not in FILTER_SETTINGS:
                close = difflib.get_close_matches(str(name), list(FILTER_SETTINGS), n=1, cutoff=0.5)
                hint = f"did you mean '{close[0]}'?" if close else "known filters: " + ", ".join(FILTER_SETTINGS)
                errors.append(_error("unknown_filter", (name,), f"unknown filter; {hint}", data[name]))
        out: dict[str, FilterSettings] = {}
        for name, settings_cls in FILTER_SETTINGS.items():
            value = data.get(name, {})
            try:
                out[name] = value if isinstance(value, settings_cls) else settings_cls.model_validate(value or {})
            except ValidationError as exc:
                for err in exc.errors():
                    if err["type"] == "extra_forbidden":
                        field = str(err["loc"][-1])
                        close = difflib.get_close_matches(field, list(settings_cls.model_fields), n=1, cutoff=0.5)
                        hint = f"did you mean '{close[0]}'?" if close else "valid keys: " + ", ".join(settings_cls.model_fields)
                        errors.append(_error("unknown_field", (name, *err["loc"]), f"unknown key of filter {name}; {hint}",
                                             err["input"]))
                    else:
                        errors.append(_error(err["type"], (name, *err["loc"]), err["msg"].removeprefix("Value error, "),
                                             err["input"]))
        if errors:
            raise ValidationError.from_exception_data("ChainConfig", errors)
        return handler(out)

    def __getitem__(self, name: str) -> FilterSettings:
        return self.root[name]

    def items(self):
        return self.root.items()

    def enabled(self) -> list[str]:
        return [name for name, s in self.root.items() if s.enabled]


def default_chain(kind: str) -> dict[str, Any]:
    return {name: dict(v) for name, v in KIND_DEFAULTS[kind].items()}


def _as_raw(value: Any) -> Any:
    if isinstance(value, ChainConfig):
        return value.model_dump(mode="json")
    return value


class FilterConfig(Section):
    chains: dict[str, ChainConfig] = Field(
        default_factory=lambda: {k: ChainConfig.model_validate(default_chain(k)) for k in SOURCE_KINDS},
        description="Chain per source kind (merged onto the kind's defaults), plus named chains that `extends` a kind.",
    )
    dedup: DedupConfig = Field(default_factory=DedupConfig, description="MinHash near-dedup.")
    max_doc_bytes: int = Field(8 * 1024 * 1024, ge=1, description="Records larger than this are rejected (reason too_large).")
    unit_bytes: int = Field(32 * 1024 * 1024, ge=1024, description="Plain JSONL inputs are split into work units of about this size.")
    shard_docs: int = Field(50_000, ge=1, description="Documents per output Parquet shard.")
    workers: int = Field(2, ge=0, le=4096, description="Ray actors filtering in parallel; 0 = in-process, no Ray.")
    actor_cpus: float = Field(0.5, gt=0, le=64, description="CPUs reserved per actor (fractional avoids Ray Data deadlocks).")
    samples_per_reason: int = Field(20, ge=0, description="Removed documents kept per reason for `moelab data inspect`.")
    ray_address: str | None = Field(None, description="Ray cluster address (e.g. ray://head:10001); None = local Ray.")

    @model_validator(mode="before")
    @classmethod
    def _merge_chains(cls, data: Any) -> Any:
        """Every kind's chain = its defaults + the recipe's fields; named chains start from `extends`."""
        if not isinstance(data, dict) or "chains" not in data:
            return data
        given = data["chains"] or {}
        if not isinstance(given, dict):
            return data  # pydantic reports the type error
        merged: dict[str, Any] = {}
        for name, value in given.items():
            if isinstance(value, ChainConfig):  # already resolved (an assignment re-validates the section)
                merged[name] = value
        for kind in SOURCE_KINDS:
            if kind in merged:
                continue
            over = _as_raw(given.get(kind)) or {}
            merged[kind] = deep_merge(default_chain(kind), over) if isinstance(over, dict) else over
        for name, over in given.items():
            if name in SOURCE_KINDS or name in merged:
                continue
            over = _as_raw(over)
            if isinstance(over, dict) and "extends" in over:
                over = dict(over)
                base = over.pop("extends")
                if base not in SOURCE_KINDS:
                    raise ValueError(f"chains.{name}.extends = {base!r}: must be a source kind ({', '.join(SOURCE_KINDS)})")
                over = deep_merge(default_chain(base), over)
            elif isinstance(over, dict) and set(over) != set(FILTER_SETTINGS):  # a resolved chain has every filter
                raise ValueError(f"chains.{name}: a named chain needs `extends: <kind>` ({', '.join(SOURCE_KINDS)})")
            merged[name] = over
        return {**data, "chains": merged}
