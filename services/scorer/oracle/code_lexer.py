"""A source file split into code, strings, comments and documentation, in the file's own language.

The stand-in oracle counts comments and documentation and judges identifiers only where they are
code (a word in a comment or a string is no identifier), and `degrade.obfuscate` strips exactly
what the oracle counts. Both need the same split, for more languages than the demo corpus has:
a scorer that only knows `#` and `//` counts a Perl file's POD as code and a JavaScript file's
JSDoc as an ordinary comment. This is a lexer of token *kinds*, not a parser: regular
expressions per comment family, good enough to count lines and to rename names, not to compile.

| language | comments | documentation | told by |
|---|---|---|---|
| python | `#` | docstrings (a triple-quoted string that is a statement) | `def`, `import`, a line ending in `:` |
| go, c, javascript | `//`, `/* */` | `/** */`, `///` (C and Go doc comments above a declaration: code_signals) | `func`/`package`; `#include`, C types; `const`/`let`/`=>`/`require(` |
| perl | `#` (not `$#`) | POD (`=head1` … `=cut`) | `my $x`, `sub name`, `use X;`, `->` |
| shell | `#` (not `$#`, `${#`) | — | a `#!…sh` line, `fi`/`done`/`esac` |

Unknown text gets the C family's rules, which most languages share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_C_KEYWORDS = set(
    "auto break case char const continue default do double else enum extern float for goto if inline int long "
    "register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while "
    "bool true false NULL size_t ssize_t uint8_t uint16_t uint32_t uint64_t int8_t int16_t int32_t int64_t FILE "
    "include define ifdef ifndef endif elif undef pragma printf fprintf sprintf snprintf malloc calloc realloc free "
    "memcpy memset memcmp strlen strcmp strncmp strcpy exit stderr stdout stdin main argc argv".split())
KEYWORDS = {
    "python": set("False None True and as assert async await break class continue def del elif else except finally "
                  "for from global if import in is lambda nonlocal not or pass raise return try while with yield "
                  "self cls print len range str int dict list set tuple object super isinstance".split()),
    "go": set("break case chan const continue default defer else fallthrough for func go goto if import interface "
              "map package range return select struct switch type var nil true false error string int int64 uint32 "
              "byte bool float64 make new len append cap".split()),
    "javascript": set("break case catch class const continue debugger default delete do else export extends finally "
                      "for function if import in instanceof let new of return super switch this throw try typeof var "
                      "void while with yield async await static get set null undefined true false require module "
                      "exports console Object Array String Number Boolean Promise JSON Math Error Map Set Date "
                      "RegExp Symbol process Buffer".split()),
    "perl": set("my our local sub use no package require return if elsif else unless while until for foreach do "
                "last next redo goto and or not xor eq ne lt gt le ge cmp print printf say shift unshift push pop "
                "splice keys values each exists delete defined undef ref bless die warn eval wantarray scalar "
                "qw q qq qr m s tr y sort map grep join split length substr index sprintf lc uc open close "
                "BEGIN END __PACKAGE__ __END__ __DATA__ SUPER strict warnings croak carp confess".split()),
    "shell": set("if then else elif fi case esac for while until do done in function return local export "
                 "readonly declare set unset shift echo printf exit test true false read cd eval exec source "
                 "trap".split()),
}
KEYWORDS["c"] = _C_KEYWORDS
LANGUAGES = tuple(KEYWORDS)

_DQ, _SQ = r'"(?:\\.|[^"\\\n])*"', r"'(?:\\.|[^'\\\n])*'"
_PATTERNS = {
    "python": [("doc", r'^[ \t]*[rRuU]?(?:"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\')'),
               ("string", r'[rRbBuUfF]{0,2}(?:"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\')'),
               ("string", r"[rRbBuUfF]{0,2}(?:" + _DQ + "|" + _SQ + ")"),
               ("comment", r"#[^\n]*")],
    "c": [("doc", r"/\*\*(?!/)[\s\S]*?\*/|///[^\n]*"), ("comment", r"/\*[\s\S]*?\*/|//[^\n]*"),
          ("string", _DQ + "|" + _SQ + r"|`[^`]*`"), ("directive", r"^[ \t]*#[^\n]*")],
    "perl": [("doc", r"^=[A-Za-z][\s\S]*?(?:^=cut\b[^\n]*|\Z)"),
             ("string", r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\''), ("comment", r"(?<![$\\])#[^\n]*")],
    "shell": [("string", r'"(?:\\.|[^"\\])*"|\'[^\']*\''), ("comment", r"(?<![$\\{\w])#[^\n]*")],
}
_PATTERNS["go"] = _PATTERNS["javascript"] = _PATTERNS["c"]
_LEXERS = {lang: re.compile("|".join(f"(?P<{kind}{i}>{rx})" for i, (kind, rx) in enumerate(pats)), re.M)
           for lang, pats in _PATTERNS.items()}
_KIND = re.compile(r"^[a-z]+")

_CLUES = {
    "python": r'^\s*(?:def|class|import|from|elif|except)\b|^\s*(?!case\b|default\b)[^\s{};/*#][^{};]*:\s*$|"""|\'\'\'',
    "go": r"^\s*(?:func|package)\b|:=|^type\s+\w+\s+(?:struct|interface)|^\s*(?:var|const)\s*\($|\[\]\*?\w+\{|\bmap\[|^//go:",
    "c": r"^\s*#\s*(?:include|define|ifn?def|endif)\b|^(?:static\s+)?(?:void|int|char|unsigned|struct\s+\w+|"
         r"size_t|double|long)\s+\**\w+\s*[(;=\[]",
    "javascript": r"\blet\s+[\w{\[]|^\s*(?:const|var)\s+[{\[]|=>|\brequire\(|\bfunction\s*\w*\s*\(|\bmodule\.exports\b|\w\s*===\s*\w",
    "perl": r"^\s*(?:my|our)\s+[$@%(]|^\s*sub\s+\w+|^\s*use\s+[\w:]+.*;\s*$|^\s*package\s+[\w:]+;|\$\w+->|^=head",
    "shell": r"^#!.*\b(?:ba|z|da)?sh\b|^\s*(?:fi|done|esac|then|do)\s*$|;\s*(?:then|do)\s*$|^\s*(?:if|while)\s+\[",
}
_CLUE_RX = {lang: re.compile(rx, re.M) for lang, rx in _CLUES.items()}
# A comment line tells the comment family, not the language: half a clue to each language of the family.
_HASH_LINE = re.compile(r"^\s*#(?!\s*(?:include|define|ifn?def|if|endif|else|pragma|undef)\b|!)|[\w,)'\"\]]\s+#\s", re.M)
_SLASH_LINE = re.compile(r"^\s*(?://|/\*)", re.M)
_FAMILY = {"python": _HASH_LINE, "perl": _HASH_LINE, "shell": _HASH_LINE,
           "go": _SLASH_LINE, "c": _SLASH_LINE, "javascript": _SLASH_LINE}


def code_language(text: str) -> str:
    """The language whose syntax clues occur most often in the first 4,000 characters ("c" if none;
    a tie goes to the first in `_CLUES`, so a file of nothing but `#` comments and data reads as Python)."""
    head = text[:4000]
    counts = {lang: len(rx.findall(head)) + 0.5 * len(_FAMILY[lang].findall(head)) for lang, rx in _CLUE_RX.items()}
    best = max(counts, key=lambda k: counts[k])
    return best if counts[best] else "c"


@dataclass(frozen=True)
class Token:
    kind: str  # code | string | comment | doc | directive
    start: int
    end: int


def lex(text: str, lang: str) -> list[Token]:
    """`text` as consecutive tokens covering every character, in order."""
    out, pos = [], 0
    for m in _LEXERS[lang].finditer(text):
        if m.start() > pos:
            out.append(Token("code", pos, m.start()))
        out.append(Token(_KIND.match(m.lastgroup).group(0), m.start(), m.end()))
        pos = m.end()
    if pos < len(text):
        out.append(Token("code", pos, len(text)))
    return out


def lines_of(text: str, tokens: list[Token], kinds: set[str]) -> set[int]:
    """0-based numbers of the lines that hold a non-blank character of a token of one of `kinds`."""
    out: set[int] = set()
    for t in tokens:
        if t.kind not in kinds:
            continue
        first = text.count("\n", 0, t.start)
        for i, part in enumerate(text[t.start:t.end].split("\n")):
            if part.strip():
                out.add(first + i)
    return out
