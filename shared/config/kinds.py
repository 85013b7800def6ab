"""The kinds of text an input can be: the one definition every stage uses.

The kind selects the data filter's default chain (prose rules for web and science, code rules for
code, symbol-tolerant rules for math) and the scorer's rubric (5 general dimensions for prose, 4
for code). Import `SourceKind` for annotations and `SOURCE_KINDS` for iteration; never spell the
tuple out elsewhere.
"""

from __future__ import annotations

import typing
from typing import Literal

SourceKind = Literal["web", "code", "math", "science"]
SOURCE_KINDS: tuple[str, ...] = typing.get_args(SourceKind)
