"""Normalisation: NFC, control characters, whitespace; idempotent, and code keeps its indentation."""

from __future__ import annotations

import unicodedata

from services.data_filter.filters.normalize import NormalizeFilter
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
