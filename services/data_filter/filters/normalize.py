"""Normalisation: Unicode NFC, control characters out, whitespace tidied.

What it does, in order (each step is cheap and idempotent, so a second pass changes nothing):
1. CRLF and lone CR become LF; form feed and vertical tab become LF.
2. C0/C1 control characters (Unicode category Cc) other than TAB and LF are deleted; so are
   U+FEFF (byte-order mark) and U+FFFE/U+FFFF non-characters. Format characters (Cf, e.g. the
   zero-width joiner) are kept: emoji and Indic scripts need them.
3. Unicode normal form (NFC by default, as CCNet and FineWeb do before hashing/language ID).
4. Optional: runs of horizontal whitespace (incl. NBSP) inside a line become one space, and
   trailing spaces go (off for code, where indentation and alignment carry meaning).
5. More than `max_blank_lines` consecutive blank lines are cut down; leading/trailing blank space
   of the whole document goes.
A document that is empty afterwards is dropped with reason `empty_after_normalize`.
"""

from __future__ import annotations

import re
import unicodedata

from services.data_filter.filters.base import Doc, Filter
from shared.config.filters import NormalizeConfig

_CONTROL = {c: None for c in range(0x20) if c not in (0x09, 0x0A)}
_CONTROL.update({c: None for c in range(0x7F, 0xA0)})
_CONTROL.update({0xFEFF: None, 0xFFFE: None, 0xFFFF: None, 0x0B: "\n", 0x0C: "\n"})
_NEEDS_TRANSLATE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ufeff\ufffe\uffff]")
_HSPACE = re.compile(r"[^\S\n]+")
# horizontal white space other than SPACE and TAB (what str.isspace() and `\s` also count)
_SPACE_RUN = re.compile("  +")
_OTHER_HSPACE = re.compile("[\x0b\x0c\r\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")


def collapse_spaces(text: str) -> str:
    """Every run of horizontal white space becomes one space.

    A text whose only horizontal space is SPACE and TAB (nearly every text) has its tabs replaced
    and then only its runs of two or more spaces substituted (a regex with a literal prefix, which
    skips ahead between runs), instead of a substitution that stops at every word gap; the result
    is the same as `_HSPACE.sub(" ", text)`. Only seven ASCII characters are other horizontal space.
    """
    if text.isascii():
        other = "\r" in text or "\x0b" in text or "\x0c" in text or "\x1c" in text or "\x1d" in text or "\x1e" in text or "\x1f" in text
    else:
        other = _OTHER_HSPACE.search(text) is not None
    if other:
        return _HSPACE.sub(" ", text)
    if "\t" in text:
        text = text.replace("\t", " ")
    return _SPACE_RUN.sub(" ", text) if "  " in text else text


_TRAILING = re.compile(r"[^\S\n]+\n")


class NormalizeFilter(Filter):
    name = "normalize"
    reasons = ("empty_after_normalize", "edit_over_limit")

    settings = NormalizeConfig

    def __init__(self, cfg: NormalizeConfig, chain=None):
        super().__init__(cfg, chain)
        self._blank_run = re.compile("\n{" + str(cfg.max_blank_lines + 2) + ",}")
        self._blank_keep = "\n" * (cfg.max_blank_lines + 1)

    def normalize(self, text: str) -> str:
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if _NEEDS_TRANSLATE.search(text):  # most documents hold no control character: skip the per-character pass
            text = text.translate(_CONTROL)
        if not text.isascii() and not unicodedata.is_normalized(self.cfg.form, text):
            text = unicodedata.normalize(self.cfg.form, text)
        if self.cfg.collapse_spaces:
            text = collapse_spaces(text).replace(" \n", "\n")
        else:
            text = _TRAILING.sub("\n", text)
        if self._blank_keep + "\n" in text:
            text = self._blank_run.sub(self._blank_keep, text)
        return text.strip()

    def check(self, doc: Doc) -> str | None:
        doc.text = self.normalize(doc.text)
        return None if doc.text else "empty_after_normalize"
