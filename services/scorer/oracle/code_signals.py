"""Signals of code quality the stand-in oracle reads, in the file's own language.

| signal | what it measures | catches |
|---|---|---|
| `comments` | comment lines ÷ lines, in the language's syntax (`#`; `//` and `/* */`) | comments stripped |
| `docstrings` | Python docstrings, or Go/C doc comments directly above a declaration | documentation stripped |
| `identifier_quality` | identifiers of ≥ 3 characters with a vowel, not `x1`/`v_12`/`_0x3f`-like | mangled / minified names |
| `long_lines`, `mean_line` | lines over 100 characters, mean line length | collapsed layout, minified code |
| `indented` | indented lines ÷ lines | layout flattened |
| `defs`, `top_level` | declarations per line, top-level statements | structure (functions vs a script) |

Language is told from syntax (`def`/`import` vs `func`/`package`/braces); unknown languages get
the C-family comment rules, which most languages share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KEYWORDS = {
    "python": set("False None True and as assert async await break class continue def del elif else except finally "
                  "for from global if import in is lambda nonlocal not or pass raise return try while with yield "
                  "self cls print len range str int dict list set tuple object super isinstance".split()),
    "go": set("break case chan const continue default defer else fallthrough for func go goto if import interface "
              "map package range return select struct switch type var nil true false error string int int64 uint32 "
              "byte bool float64 make new len append cap".split()),
}
KEYWORDS["c"] = KEYWORDS["go"] | set("void char short long double unsigned signed static extern return struct "
                                     "typedef enum sizeof include define".split())
_IDENT = re.compile(r"(?<![\w.])[A-Za-z_][A-Za-z0-9_]*")
_MANGLED = re.compile(r"^_*(?:[A-Za-z]{1,2}_?\d+|0x[0-9a-f]+|[a-z]{1,2})$")
_DEF = {"python": re.compile(r"^\s*(?:async\s+def|def|class)\s"), "go": re.compile(r"^\s*func\s|^type\s"),
        "c": re.compile(r"^\w[\w\s\*]*\([^;]*\)\s*\{?\s*$")}
# declarations anywhere in the text (not only at a line start), so a collapsed file keeps its count
_DECLARATION = {"python": re.compile(r"(?:^|(?<=[\s;:]))(?:(?:async\s+)?def\s+\w+\s*\(|class\s+\w+\s*[:(])", re.M),
                "go": re.compile(r"(?:^|(?<=[\s;}]))(?:func\s+[\w(]|type\s+\w+\s+(?:struct|interface)\b)", re.M),
                "c": re.compile(r"^\w[\w\s\*]*\([^;]*\)\s*\{?\s*$", re.M)}


def code_language(text: str) -> str:
    head = text[:4000]
    py = len(re.findall(r"^\s*(?:def|class|import|from|elif|except)\b|:\s*$", head, re.M))
    go = len(re.findall(r"^\s*(?:func|package|type|var)\b|:=|\}\s*$", head, re.M))
    if py == 0 and go == 0:
        return "c"
    return "python" if py >= go else "go"


@dataclass(frozen=True)
class CodeSignals:
    lang: str
    n_lines: int
    comments: float
    docstrings: int
    identifier_quality: float
    long_lines: float
    mean_line: float
    indented: float
    defs: float
    top_level: float
    depth: float


def _comment_lines(lines: list[str], lang: str) -> int:
    if lang == "python":
        return sum(ln.strip().startswith("#") for ln in lines)
    n, in_block = 0, False
    for ln in lines:
        s = ln.strip()
        if in_block or s.startswith(("//", "/*", "*")) or "//" in s:
            n += 1
        if "/*" in s:
            in_block = "*/" not in s.split("/*", 1)[1]
        elif in_block and "*/" in s:
            in_block = False
    return n


def _docstrings(text: str, lines: list[str], lang: str) -> int:
    if lang == "python":
        return text.count('"""') // 2 + text.count("'''") // 2
    return sum(1 for a, b in zip(lines, lines[1:], strict=False)
               if a.strip().startswith(("//", "*/")) and _DEF[lang].match(b))


CHARS_PER_LINE = 50  # a collapsed file is read as this many characters per line (see code_signals)


def code_signals(text: str) -> CodeSignals:
    """Signals of a code file. Rates are per effective line, max(lines, characters / 50): a file
    collapsed onto one line is as long as before, so its one comment or declaration does not
    become a rate of 1 (a per-physical-line rate rewarded exactly the collapse it should catch)."""
    lang = code_language(text)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    n = max(1.0, len(lines), sum(map(len, lines)) / CHARS_PER_LINE)
    idents = [w for w in _IDENT.findall(text) if w not in KEYWORDS[lang]]
    good = sum(len(w) >= 3 and re.search(r"[aeiouy]", w, re.I) is not None and not _MANGLED.match(w) for w in idents)
    indent = [len(ln) - len(ln.lstrip()) if not ln.startswith("\t") else 4 * (len(ln) - len(ln.lstrip("\t")))
              for ln in lines]
    return CodeSignals(
        lang=lang,
        n_lines=len(lines),
        comments=_comment_lines(lines, lang) / n,
        docstrings=_docstrings(text, lines, lang),
        identifier_quality=good / len(idents) if idents else 0.0,
        long_lines=sum(len(ln) > 100 for ln in lines) / max(1, len(lines)),
        mean_line=sum(map(len, lines)) / max(1, len(lines)),
        indented=sum(i > 0 for i in indent) / max(1, len(lines)),
        defs=len(_DECLARATION[lang].findall(text)) / n,
        top_level=sum(i == 0 and not _DEF[lang].match(ln) and not ln.lstrip().startswith(("#", "//", "@", "import",
                      "from", "}", ")", "package")) for i, ln in zip(indent, lines, strict=True)) / n,
        depth=sum(i // 4 for i in indent) / max(1, len(lines)),
    )


def code_scores(s: CodeSignals) -> dict[str, float]:
    """The code rubric's four 0-10 dimensions as continuous values (the oracle rounds them)."""
    layout = 3 * min(1.0, s.indented / 0.3) - 3 + 1.5 * min(1.0, s.n_lines / 20) - 1.5
    naming = 8 * (s.identifier_quality - 0.75)
    return {
        "readability": 7 + 14 * s.comments - 12 * s.long_lines - 0.6 * max(0.0, s.depth - 2) + layout + 0.5 * naming
        - 0.03 * max(0.0, s.mean_line - 60),
        "modularity": 2 + 40 * s.defs + 1.5 * min(s.docstrings, 3) - 4 * s.top_level + 0.5 * layout,
        "clarity": 4 + 2 * min(s.docstrings, 3) + 10 * s.comments - 1.2 * max(0.0, s.depth - 2.5) + naming,
        "reusability": 1 + 30 * s.defs + 2 * min(s.docstrings, 2) - 6 * s.top_level + 0.5 * naming,
    }
