"""Write the per-language profiles (<lang>.json) from a checkout of FineWeb-2's published configs.

    python services/data_filter/resources/languages/derive_profiles.py /path/to/fineweb-2

FineWeb-2 (Penedo et al. 2025, arXiv:2506.20920; repository huggingface/fineweb-2, Apache-2.0)
tuned every filter per language and published the result as `configs/<iso3>_<script>.yml`. We take
what describes the *language* rather than their crawl: the stop-word list (the most frequent
words of the language's reference text) and the mean-word-length bounds (German compounds,
Chinese/Japanese short words) for every profile; the repetition thresholds only for languages
written without spaces (zh, ja, th), where our word units are characters or character-class runs
and Gopher's English n-gram fractions do not carry over, together with their line-punctuation
threshold (Thai ends sentences with a space, not a mark: 0.0); and, for every language, the two FineWeb
line-rule settings FineWeb-2's pipeline uses outside English (duplicated-line characters up to 10%
instead of 1%, no short-line rule). lid.176 labels map to FineWeb-2's codes below. English has no FineWeb-2 config: Gopher's own eight stop words are the config default.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
# lid.176 label -> FineWeb-2 config (the 30 most common web languages after English, by CommonCrawl share)
CODES = {
    "ru": "rus_Cyrl", "de": "deu_Latn", "zh": "cmn_Hani", "ja": "jpn_Jpan", "es": "spa_Latn", "fr": "fra_Latn",
    "it": "ita_Latn", "pt": "por_Latn", "pl": "pol_Latn", "nl": "nld_Latn", "vi": "vie_Latn", "tr": "tur_Latn",
    "id": "ind_Latn", "fa": "fas_Arab", "ko": "kor_Hang", "cs": "ces_Latn", "uk": "ukr_Cyrl", "sv": "swe_Latn",
    "ar": "arb_Arab", "hu": "hun_Latn", "el": "ell_Grek", "ro": "ron_Latn", "da": "dan_Latn", "fi": "fin_Latn",
    "th": "tha_Thai", "no": "nob_Latn", "sk": "slk_Latn", "bg": "bul_Cyrl", "he": "heb_Hebr", "hi": "hin_Deva",
    "ca": "cat_Latn",
}
NO_SPACES = {"zh", "ja", "th"}


def profile(lang: str, cfg: dict, source: str) -> dict:
    out = {
        "language": lang, "source": source,
        "gopher_quality": {"stop_words": [str(w) for w in cfg["stopwords"]],
                           "min_mean_word_length": float(cfg["min_avg_word_length"]),
                           "max_mean_word_length": float(cfg["max_avg_word_length"])},
    }
    # FineWeb-2's pipeline (fineweb-2-pipeline.py) sets these two for every language it filters
    out["fineweb"] = {"max_dup_line_char_ratio": 0.1, "max_short_line_ratio": 1.0}
    if lang in NO_SPACES:
        out["fineweb"]["min_line_punct_ratio"] = float(cfg["line_punct_thr"])
        out["repetition"] = {"max_dup_line_frac": float(cfg["dup_line_frac"]),
                             "top_ngram_max_frac": {str(n): float(f) for n, f in cfg["top_n_grams"]},
                             "dup_ngram_max_frac": {str(n): float(f) for n, f in cfg["dup_n_grams"]}}
    return out


def main(checkout: str) -> None:
    root = Path(checkout)
    for lang, code in sorted(CODES.items()):
        path = root / "configs" / f"{code}.yml"
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
        data = profile(lang, cfg, f"huggingface/fineweb-2 configs/{code}.yml")
        (HERE / f"{lang}.json").write_text(json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {len(CODES)} profiles to {HERE}")


if __name__ == "__main__":
    main(sys.argv[1])
