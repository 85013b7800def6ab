"""Normalisation: NFC, control characters, whitespace; idempotent, and code keeps its indentation."""

from __future__ import annotations

import random
import unicodedata

from services.data_filter.filters.normalize import _HSPACE, NormalizeFilter, collapse_spaces
from shared.config.filters import NormalizeConfig
from tests.services.data_filter.filters.edge import doc


def test_normalize_composes_nfc_drops_controls_and_tidies_whitespace():
    f = NormalizeFilter(NormalizeConfig())
    raw = "Cafe\u0301\x00 and\t\u00a0 more\r\n\r\n\r\n\r\n\r\nend \x07line \ufeff"
    d = doc(raw)
    assert f.check(d) is None
    assert d.text == "Café and more\n\n\nend line"
    assert unicodedata.is_normalized("NFC", d.text)
    again = doc(d.text)
    f.check(again)
    assert again.text == d.text  # idempotent


def test_normalize_keeps_code_indentation_when_collapse_is_off():
    f = NormalizeFilter(NormalizeConfig(collapse_spaces=False))
    d = doc("def f():\n    return  1   \n")
    f.check(d)
    assert d.text == "def f():\n    return  1"


def test_normalize_drops_a_document_that_is_only_controls():
    assert NormalizeFilter(NormalizeConfig()).check(doc("\x00\x01 \n\x7f")) == "empty_after_normalize"


def test_collapse_spaces_equals_the_regex_on_every_white_space_character():
    """The fast path (ASCII or not) and the regex path give what one substitution over every run gives."""
    spaces = [c for c in map(chr, range(0x3001)) if c.isspace()]
    assert len(spaces) == 29  # Python's white space below U+3001, U+3000 included
    rng = random.Random(0)
    alphabet = spaces + list("ab \t\n") * 3
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert collapse_spaces(text) == _HSPACE.sub(" ", text), repr(text)
    ascii_alphabet = [c for c in spaces if c.isascii()] + list("ab  \t\n") * 2
    for _ in range(5000):
        text = "".join(rng.choice(ascii_alphabet) for _ in range(rng.randint(0, 30)))
        assert collapse_spaces(text) == _HSPACE.sub(" ", text), repr(text)
    assert collapse_spaces("a" + " " * 9 + "b\t\t c") == "a b c"
