"""Severity-aware review: a Gopher layout failure far past its limit removes even when layout is reviewed;
a near miss is only flagged, with how far it failed recorded for `data inspect`."""

from __future__ import annotations

import pytest

from services.data_filter.accounting import Chain
from services.data_filter.filters import build_chain
from services.data_filter.filters.base import Doc, over, short
from shared.config.chains import ChainConfig, deep_merge, default_chain
from tests.services.data_filter import realtext


def _chain(**gopher) -> Chain:
    """The web chain's Gopher rule under layout review, the other filters off (this is about Gopher)."""
    off = {"enabled": False}
    raw = deep_merge(default_chain("web"), {"language": off, "repetition": off, "c4": off, "fineweb": off, "toxicity": off,
                                            "gopher_quality": gopher})
    cfg = ChainConfig.model_validate(raw)
    return Chain(build_chain(cfg), review=True)


def _prose(n: int = 6) -> str:
    return "\n\n".join(" ".join(p.split()) for p in realtext.manual_paragraphs()[:n])


def _marked(mark: str, every: int) -> str:
    return " ".join(f"{mark}{w}" if i % every == 0 else w for i, w in enumerate(_prose().split()))


def _with_number_rows(alpha_share: float) -> str:
    """Prose interleaved with rows of numbers to about `alpha_share` of words holding a letter."""
    words = _prose().split()
    numbers_per_word = (1 - alpha_share) / alpha_share
    lines, owed = [], 0.0
    for i in range(0, len(words), 10):
        lines.append(" ".join(words[i : i + 10]))
        owed += 10 * numbers_per_word
        lines.append(" ".join(str(1000 + j) for j in range(int(owed))))
        owed -= int(owed)
    return "\n".join(lines)


@pytest.mark.parametrize("every", [2, 3, 4])  # 5x, 3.3x and 2.5x Gopher's 0.1 symbols per word
@pytest.mark.parametrize("mark", ["#", "…"])
def test_symbols_far_past_the_limit_are_removed_under_review(mark, every):
    d = Doc("x", _marked(mark, every), "src")
    hit = _chain().run(d)
    assert hit is not None and hit[0] == "gopher_quality", (hit, d.meta)
    assert hit[1] == ("too_many_hashes" if mark == "#" else "too_many_ellipses")


def test_prose_interleaved_with_number_rows_at_0_62_alpha_is_removed_under_review():
    d = Doc("x", _with_number_rows(0.62), "src")
    assert _chain().run(d) == ("gopher_quality", "too_few_alpha_words")


def test_a_near_miss_is_flagged_with_its_severity_and_kept_for_the_review():
    d = Doc("x", _with_number_rows(0.75), "src")
    assert _chain().run(d) is None
    assert d.meta["layout_flag"] == "gopher_quality:too_few_alpha_words"
    assert 1.0 < d.meta["layout_severity"] <= 1.5


def test_without_margins_every_layout_failure_is_only_flagged_as_before():
    d = Doc("x", _marked("#", 2), "src")
    assert _chain(review_margin={}).run(d) is None
    assert d.meta["layout_flag"] == "gopher_quality:too_many_hashes" and d.meta["layout_severity"] > 4


def test_clean_code_the_review_kept_is_still_kept_with_the_margins():
    """Real source files (C++, JavaScript, shell) fail the alphabetic-word rule by a little; the margins
    change nothing for a file the chain kept without them (a file removed anyway may change its reason)."""
    codes = [c for c in realtext.code_files().values() if len(c.split()) > 100]
    without, with_margins = _chain(review_margin={}), _chain()
    kept_before = [c for c in codes if without.run(Doc("c", c, "src")) is None]
    flagged = [c for c in kept_before if (d := Doc("c", c, "src")) and without.run(d) is None and "layout_flag" in d.meta]
    assert len(flagged) >= 3  # the rule does fire on them
    assert [c for c in kept_before if with_margins.run(Doc("c", c, "src")) is not None] == []


def test_severity_is_a_ratio_over_the_limit():
    assert over(0.25, 0.1) == pytest.approx(2.5)
    assert short(0.62, 0.8) == pytest.approx(1.9)


@pytest.mark.parametrize("bad", [{"too_many_hashes": 0.5}, {"no_such_rule": 2.0}])
def test_bad_margins_fail_validation(bad):
    with pytest.raises(ValueError):
        ChainConfig.model_validate({"gopher_quality": {"review_margin": bad}})


SHELL_SCRIPT = "\n".join([
    "#!/bin/sh",
    "##########################################################",
    "# rotate-logs: keep the last five compressed logs of a service",
    "##########################################################",
    "set -eu",
    "log_dir=\"${1:-/var/log/example}\"   # where the service writes",
    "keep=5                             # how many old logs survive",
    "",
    "# nothing to do without the folder",
    "if [ ! -d \"$log_dir\" ]; then",
    "    exit 0",
    "fi",
    "",
    "# compress yesterday's log and drop the oldest ones",
    "for log in \"$log_dir\"/*.log; do",
    "    [ -f \"$log\" ] || continue      # the glob matched nothing",
    "    gzip -9 \"$log\"",
    "done",
    "ls -1t \"$log_dir\"/*.gz | tail -n +$((keep + 1)) | xargs -r rm -f",
    "##########################################################",
])
JAVASCRIPT = "\n".join([
    "const sizes = { small: 1, medium: 2, large: 4 }",
    "// the weight of each item, and whether the box is full",
    "function weigh (items) {",
    "  let total = 0",
    "  for (const item of items) {",
    "    total += sizes[item.size] || 0",
    "    if (total > 64) {",
    "      return { total, full: true }",
    "    }",
    "  }",
    "  return { total, full: false }",
    "}",
    "const pack = (items) => {",
    "  const { total, full } = weigh(items)",
    "  return full ? [] : items.map((x, i) => ({ ...x, slot: i + 1 }))",
    "}",
    "module.exports = { weigh, pack }",
])


@pytest.mark.parametrize("code", [SHELL_SCRIPT, JAVASCRIPT], ids=["shell", "javascript"])
def test_code_far_past_a_prose_ratio_stays_a_flag_for_the_review(code):
    """A shell script's `#` comments and JavaScript's brackets fail Gopher's prose ratios by as much as
    the plants do; code-shaped lines keep such a file under review instead of past a margin."""
    from services.data_filter.filters.gopher_quality import code_line_share

    assert code_line_share(code) > 0.1
    margins_for_all = _chain(margin_code_lines=1.0)
    assert margins_for_all.run(Doc("c", code, "src")) is not None  # what the margins did to code before
    d = Doc("c", code, "src")
    assert _chain().run(d) is None
    assert d.meta["layout_flag"].startswith("gopher_quality:") and d.meta["layout_severity"] > 1.5


def test_the_plants_have_no_code_shaped_lines():
    from services.data_filter.filters.gopher_quality import code_line_share

    for text in (_marked("#", 2), _marked("…", 3), _with_number_rows(0.62), _prose()):
        assert code_line_share(text) <= 0.04
