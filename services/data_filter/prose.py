"""The prose of a science document: its text with LaTeX markup, math and code taken out.

Why: fastText's lid.176 classifies the average of the word and character n-gram vectors of what
it is given, so in a LaTeX source or a docstring with doctests the markup votes too. On the demo's
science sources (CTAN package documentation, sympy.physics docstrings) the whole text scored
under 0.65 for its language in 45-47% of clean documents (`\\texttt{...}`, `$\\iint_R$`,
`>>> b.apply_load(15, start=0)`), though their sentences are plain English or French. The
language filter identifies this view instead when the chain asks for it
(`language.strip_markup`, on in the science chain); the document itself is never rewritten.

What is taken out (and why it is safe for a language decision: none of it is prose):
- LaTeX (`strip_latex`): comments; verbatim, listing, TikZ and math environments; inline and
  display math (`$..$`, `$$..$$`, `\\(..\\)`, `\\[..\\]`); commands whose arguments are names,
  not text (`\\label`, `\\usepackage`, `\\begin`, `\\cite`, ...) with those arguments; every other
  command name (its braced argument, e.g. the words of `\\emph{...}`, stays); leftover braces,
  alignment marks and TeX's quote ligatures.
- Code (`strip_code`): doctest sessions (`>>>`/`...` lines and the output under them), fenced
  blocks, reStructuredText literal blocks (after `::`) and directives with their indented bodies,
  section underlines, inline literals (``` ``x`` ```, `` :func:`x` ``) and signature lines
  (`def name(...)`, `class name(...)`).
"""

from __future__ import annotations

import bisect
import re

_COMMENT = re.compile(r"(?<!\\)%.*$", re.M)
_NAME_ENVS = ("verbatim", "Verbatim", "lstlisting", "minted", "tikzpicture", "pspicture", "comment", "filecontents",
              "equation", "align", "alignat", "gather", "multline", "eqnarray", "displaymath", "math", "flalign",
              "split", "tabular", "array", "pmatrix", "bmatrix", "matrix", "cases", "dmath", "lstcode", "codeexample",
              "example", "LTXexample", "tcblisting")
# openers and closers of the spans taken out whole, found in one pass (`_cut_spans`): environments by name,
# display and inline math
_ENV_TOKEN = re.compile(r"\\(begin|end)\{(" + "|".join(_NAME_ENVS) + r")\*?\}")
_MATH_TOKEN = re.compile(r"\$\$|\\\[|\\\]|\\\(|\\\)|(?<!\\)\$")
_MATH_CLOSER = {"$$": "$$", "\\[": "\\]", "\\(": "\\)", "$": "$"}


def _cut_spans(text: str, tokens: re.Pattern, closer_of) -> str:
    """`text` without each span from an opener to the first closer after it, scanning left to right.

    Why not a lazy regex (`\\[.*?\\]`): an opener that is never closed makes it scan to the end of
    the text, once per opener, which is quadratic (minutes for a megabyte of unclosed `\\[`). Here
    every token is found once, the closers' positions are indexed by kind, and an opener looks its
    closer up by bisection; an opener without one is left in place and scanning goes on after it,
    as the regex would. `closer_of(match)` is the key of the closer a match opens, or None; a
    token's own key is `_key(match)`.
    """
    found = list(tokens.finditer(text))
    closers: dict[str, list[int]] = {}
    for i, m in enumerate(found):
        closers.setdefault(_key(m), []).append(i)
    out: list[str] = []
    pos = i = 0
    while i < len(found):
        want = closer_of(found[i])
        at = closers.get(want, []) if want is not None else []
        j = bisect.bisect_right(at, i)
        if j == len(at):
            i += 1
            continue
        close = at[j]
        out.append(text[pos : found[i].start()])
        out.append(" ")
        pos, i = found[close].end(), close + 1
    out.append(text[pos:])
    return "".join(out)


def _key(m: re.Match) -> str:
    return f"{m.group(1)}:{m.group(2)}" if m.re is _ENV_TOKEN else m.group()


def _env_closer(m: re.Match) -> str | None:
    return f"end:{m.group(2)}" if m.group(1) == "begin" else None


def _math_closer(m: re.Match) -> str | None:
    return _MATH_CLOSER.get(m.group())


# commands whose arguments are identifiers, paths, keys or code rather than words of the text
_NAME_COMMANDS = ("label", "ref", "eqref", "pageref", "cref", "Cref", "autoref", "cite", "citep", "citet", "citeauthor",
                  "usepackage", "RequirePackage", "documentclass", "begin", "end", "input", "include",
                  "includegraphics", "url", "bibliography", "bibliographystyle", "newcommand", "renewcommand",
                  "providecommand", "newenvironment", "renewenvironment", "def", "gdef", "edef", "let", "setlength",
                  "addtolength", "setcounter", "hypersetup", "lstset", "usetikzlibrary", "pgfplotsset", "tikzset",
                  "definecolor", "color", "textcolor", "verb", "lstinline", "mintinline", "cs", "cmd", "meta",
                  "marg", "oarg", "env", "pkg", "cls", "opt", "file", "code", "macro", "hspace", "vspace", "index")
# arguments bounded in length, so an unclosed bracket costs a bounded scan, not one to the end of the text
_ARG = r"(?:\s*\[[^\[\]]{0,300}\]|\s*\{(?:[^{}]|\{[^{}]{0,300}\}){0,300}\})*"
_NAME_COMMAND = re.compile(r"\\(?:" + "|".join(_NAME_COMMANDS) + r")(?![A-Za-z@])\*?" + _ARG)
_VERB = re.compile(r"\\(?:verb|lstinline)\*?(.).{0,300}?\1")
_COMMAND = re.compile(r"\\(?:[A-Za-z@]+\*?|.)")
_TEX_PUNCT = re.compile(r"[{}&~^_#]|``|''")


def strip_latex(text: str) -> str:
    """`text` without LaTeX comments, math, code environments and command names (see the module docstring)."""
    text = _COMMENT.sub("", text)
    text = _VERB.sub(" ", text)
    text = _cut_spans(text, _ENV_TOKEN, _env_closer)
    text = _cut_spans(text, _MATH_TOKEN, _math_closer)
    text = _NAME_COMMAND.sub(" ", text)
    text = _COMMAND.sub(" ", text)
    return _TEX_PUNCT.sub(" ", text)


_FENCE = re.compile(r"^\s*(```|~~~).*?^\s*\1[^\n]*$", re.S | re.M)
_SIGNATURE = re.compile(r"^\s*(?:def|class|async def)\s+[\w.]+\s*\(.*$", re.M)
_UNDERLINE = re.compile(r"^\s*([=\-~^*+#`'\"])\1{2,}\s*$", re.M)
_ROLE = re.compile(r":[\w:.-]+:`[^`]{0,300}`")
_LITERAL = re.compile(r"``[^`]*``|`[^`\n]*`")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _drop_blocks(lines: list[str]) -> list[str]:
    """Lines minus doctest sessions, literal blocks after `::` and directive bodies."""
    out: list[str] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith(">>>"):  # a doctest: prompts, continuations and output up to a blank line
            while i < n and lines[i].strip():
                i += 1
            continue
        if stripped.startswith(".. ") or stripped.endswith("::"):
            # a directive or a literal block: the indented lines after it (blank lines inside included)
            base = _indent(line)
            keep_head = not stripped.startswith(".. ")
            if keep_head:
                out.append(line[: len(line) - 2] if stripped != "::" else "")
            i += 1
            while i < n and (not lines[i].strip() or _indent(lines[i]) > base):
                i += 1
            continue
        out.append(line)
        i += 1
    return out


def strip_code(text: str) -> str:
    """`text` without doctests, code blocks, directives, signatures and inline literals (module docstring)."""
    text = _FENCE.sub(" ", text)
    text = _SIGNATURE.sub(" ", text)
    text = "\n".join(_drop_blocks(text.split("\n")))
    text = _UNDERLINE.sub(" ", text)
    text = _ROLE.sub(" ", text)
    return _LITERAL.sub(" ", text)


STRIPPERS = {"latex": strip_latex, "code": strip_code}


_SPACES = re.compile(r"[ \t\f\v]+")
_BLANKS = re.compile(r"\n{3,}")


def prose_view(text: str, kinds: tuple[str, ...] | list[str]) -> str:
    """`text` with each markup kind of `kinds` (names in `STRIPPERS`) taken out, code first, then tidied.

    Tidied: runs of spaces become one and lines are stripped, so the holes markup leaves are not
    counted as blank or repeated lines; at most one blank line in a row (paragraphs survive).
    """
    for kind in sorted(kinds, key=lambda k: k != "code"):  # code first: a doctest may hold `$` or `\`
        text = STRIPPERS[kind](text)
    text = "\n".join(line.strip() for line in _SPACES.sub(" ", text).split("\n"))
    return _BLANKS.sub("\n\n", text).strip()
