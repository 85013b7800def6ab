"""Signals of code quality the stand-in oracle reads, in the file's own language.

| signal | what it measures | catches |
|---|---|---|
| `comments` | lines holding a comment (or documentation, outside Python) ÷ lines, in the language's syntax | comments stripped |
| `docstrings` | Python docstrings, Perl POD blocks, `/** */` and `///` blocks, C-family comments directly above a declaration | documentation stripped |
| `identifier_quality` | identifiers in code (not in comments or strings) of ≥ 3 characters with a vowel, not `x1`/`v_12`/`_0x3f`/`ab`-like | mangled / minified names |
| `long_lines`, `mean_line` | lines over 100 characters, mean line length | collapsed layout, minified code |
| `indented` | indented lines ÷ lines | layout flattened |
| `defs`, `top_level` | declarations per line, top-level statements | structure (functions vs a script) |

The language and its comment syntax come from code_lexer.py (Python, Go, C, JavaScript, Perl,
shell; unknown text gets the C family's rules). Comments, documentation and names are what the
rubric's readability and clarity dimensions read first: a file that loses them must lose score in
every language the scorer meets, not only in the demo corpus's Python and Go.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from services.scorer.oracle.code_lexer import KEYWORDS, code_language, lex, lines_of

__all__ = ["CHARS_PER_LINE", "KEYWORDS", "CodeSignals", "code_language", "code_scores", "code_signals"]

_IDENT = re.compile(r"(?<![\w.])[A-Za-z_][A-Za-z0-9_]*")
_MANGLED = re.compile(r"^_*(?:[A-Za-z]{1,2}_?\d+|0x[0-9a-f]+|[a-z]{1,2})$")
_C_DEF = r"^\w[\w\s\*]*\([^;]*\)\s*\{?\s*$"
_JS_DEF = (r"^\s*(?:export\s+)?(?:default\s+)?(?:async\s+)?function\b|^\s*(?:export\s+)?class\s"
           r"|^\s*(?:const|let|var)\s+\w+\s*=\s*(?:async\s*)?(?:\([^)]*\)|\w+)\s*=>"
           r"|^\s*(?:static\s+)?(?:async\s+)?(?!(?:if|for|while|switch|catch)\b)\w+\s*\([^)]*\)\s*\{\s*$")
_DEF = {"python": re.compile(r"^\s*(?:async\s+def|def|class)\s"), "go": re.compile(r"^\s*func\s|^type\s"),
        "c": re.compile(_C_DEF), "javascript": re.compile(_JS_DEF), "perl": re.compile(r"^\s*(?:sub\s+\w+|package\s)"),
        "shell": re.compile(r"^\s*(?:function\s+)?\w+\s*\(\)\s*\{?")}
# declarations anywhere in the text (not only at a line start), so a collapsed file keeps its count
_DECLARATION = {"python": re.compile(r"(?:^|(?<=[\s;:]))(?:(?:async\s+)?def\s+\w+\s*\(|class\s+\w+\s*[:(])", re.M),
                "go": re.compile(r"(?:^|(?<=[\s;}]))(?:func\s+[\w(]|type\s+\w+\s+(?:struct|interface)\b)", re.M),
                "c": re.compile(_C_DEF, re.M),
                "javascript": re.compile(r"(?:^|(?<=[\s;{}(,=]))(?:(?:async\s+)?function\b|class\s+\w+"
                                         r"|(?!(?:if|for|while|switch|catch)\b)\w+\s*\([^()]*\)\s*\{)", re.M),
                "perl": re.compile(r"(?:^|(?<=[\s;{}]))sub\s+\w+", re.M),
                "shell": re.compile(r"(?:^|(?<=[\s;}]))(?:function\s+)?\w+\s*\(\)\s*\{", re.M)}
_NOT_STATEMENT = ("@", "#", "import", "from", "}", ")", "]", "package", "use ", "1;", "export", "module.exports")


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


CHARS_PER_LINE = 50  # a collapsed file is read as this many characters per line (see code_signals)


def code_signals(text: str) -> CodeSignals:
    """Signals of a code file. Rates are per effective line, max(lines, characters / 50): a file
    collapsed onto one line is as long as before, so its one comment or declaration does not
    become a rate of 1 (a per-physical-line rate rewarded exactly the collapse it should catch)."""
    lang = code_language(text)
    tokens = lex(text, lang)
    all_lines = text.split("\n")
    commented = lines_of(text, tokens, {"comment"} if lang == "python" else {"comment", "doc"})
    docs = sum(t.kind == "doc" for t in tokens)
    if lang != "python":  # a comment block right above a declaration documents it
        documented = lines_of(text, tokens, {"comment"})
        docs += sum(1 for i in range(len(all_lines) - 1)
                    if i in documented and i + 1 not in documented and _DEF[lang].match(all_lines[i + 1]))
    prose = lines_of(text, tokens, {"comment", "doc"})
    lines = [ln for ln in all_lines if ln.strip()]
    n = max(1.0, len(lines), sum(map(len, lines)) / CHARS_PER_LINE)
    code = " ".join(text[t.start:t.end] for t in tokens if t.kind == "code")
    idents = [w for w in _IDENT.findall(code) if w not in KEYWORDS[lang]]
    good = sum(len(w) >= 3 and re.search(r"[aeiouy]", w, re.I) is not None and not _MANGLED.match(w) for w in idents)
    indent = {i: (len(ln) - len(ln.lstrip()) if not ln.startswith("\t") else 4 * (len(ln) - len(ln.lstrip("\t"))))
              for i, ln in enumerate(all_lines) if ln.strip()}
    statements = [i for i in indent if i not in prose]
    return CodeSignals(
        lang=lang,
        n_lines=len(lines),
        comments=len(commented) / n,
        docstrings=docs,
        identifier_quality=good / len(idents) if idents else 0.0,
        long_lines=sum(len(ln) > 100 for ln in lines) / max(1, len(lines)),
        mean_line=sum(map(len, lines)) / max(1, len(lines)),
        indented=sum(i > 0 for i in indent.values()) / max(1, len(lines)),
        defs=len(_DECLARATION[lang].findall(code)) / n,
        top_level=sum(indent[i] == 0 and not _DEF[lang].match(all_lines[i])
                      and not all_lines[i].lstrip().startswith(_NOT_STATEMENT) for i in statements) / n,
        depth=sum(i // 4 for i in indent.values()) / max(1, len(lines)),
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
