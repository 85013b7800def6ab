"""Text helpers for the demo corpus: HTML and wikitext to plain text, chunking, shingle Jaccard.

Why our own wikitext cleaner: the only package that ships the Wikipedia sample (gensim) is not a
dependency of the project; the build script reads its wheel as a zip and must not install it. The
cleaner below removes templates, tables, references, files/categories and link markup, which is
what a web-text pipeline would have received from a typical HTML-to-text extractor.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

_BLOCK_TAGS = {
    "p", "div", "br", "li", "dt", "dd", "tr", "pre", "h1", "h2", "h3", "h4", "h5", "h6", "table",
    "section", "header", "footer", "blockquote", "ul", "ol", "dl", "title",
}
_SKIP_TAGS = {"script", "style", "head"}


class _TextExtractor(HTMLParser):
    """Collects visible text; block-level tags become line breaks."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in _SKIP_TAGS:
            self._skip += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in _SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def html_to_text(fragment: str) -> str:
    """Visible text of an HTML fragment, one block per line, whitespace inside lines collapsed."""
    parser = _TextExtractor()
    parser.feed(fragment)
    parser.close()
    return tidy_lines("".join(parser.parts))


def tidy_lines(text: str) -> str:
    """Collapse runs of spaces inside lines, strip lines, keep at most one blank line in a row."""
    lines = [re.sub(r"[ \t\u00a0]+", " ", line).strip() for line in text.splitlines()]
    out: list[str] = []
    for line in lines:
        if not line and (not out or not out[-1]):
            continue
        out.append(line)
    return "\n".join(out).strip()


def _sub_until_stable(pattern: re.Pattern, repl, text: str) -> str:
    while True:
        new = pattern.sub(repl, text)
        if new == text:
            return text
        text = new


_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
_TABLE = re.compile(r"\{\|(?:(?!\{\|).)*?\|\}", re.S)
_LINK = re.compile(r"\[\[([^\[\]]*)\]\]")
_NAMESPACED = re.compile(r"^\s*(File|Image|Category|Media|[a-z]{2,3}(-[a-z]+)?|Wikipedia|WP|Template)\s*:", re.I)


def _link_text(match: re.Match) -> str:
    inner = match.group(1)
    if _NAMESPACED.match(inner):
        return ""
    return inner.split("|")[-1]


def wikitext_to_text(wikitext: str) -> str:
    """Plain text of a MediaWiki article body (headings kept as `== Heading ==` lines for splitting)."""
    text = re.sub(r"<!--.*?-->", "", wikitext, flags=re.S)
    text = re.sub(r"<ref[^>/]*/>", "", text)
    text = re.sub(r"<ref[^>]*>.*?</ref>", "", text, flags=re.S)
    text = re.sub(r"<(gallery|math|timeline|imagemap|score)[^>]*>.*?</\1>", "", text, flags=re.S)
    text = _sub_until_stable(_TEMPLATE, "", text)
    text = _sub_until_stable(_TABLE, "", text)
    text = _sub_until_stable(_LINK, _link_text, text)
    text = re.sub(r"\[https?://\S+ ([^\]]+)\]", r"\1", text)
    text = re.sub(r"\[https?://\S+\]", "", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"'{2,}", "", text)
    text = html.unescape(text)
    text = re.sub(r"^[*#:;]+\s*", "", text, flags=re.M)
    text = re.sub(r"^__[A-Z]+__$", "", text, flags=re.M)
    return tidy_lines(text)


def cap_text(text: str, max_chars: int) -> str:
    """Cut `text` to at most `max_chars` at the last paragraph (or line) break before the limit."""
    if len(text) <= max_chars:
        return text
    cut = text.rfind("\n\n", 0, max_chars)
    if cut < max_chars // 2:
        cut = text.rfind("\n", 0, max_chars)
    if cut < max_chars // 2:
        cut = text.rfind(" ", 0, max_chars)
    return text[: cut if cut > 0 else max_chars].rstrip()


def pack_chunks(pieces: list[str], max_chars: int) -> list[str]:
    """Greedily join consecutive pieces (e.g. top-level definitions) into chunks of <= max_chars.

    A single piece longer than the limit becomes its own chunk, cut at a line break.
    """
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        piece = piece.strip("\n")
        if not piece.strip():
            continue
        if current and len(current) + len(piece) + 2 > max_chars:
            chunks.append(current)
            current = ""
        current = f"{current}\n\n{piece}" if current else piece
    if current:
        chunks.append(current)
    return [cap_text(c, max_chars) for c in chunks]


def shingles(text: str, n: int = 5) -> set[tuple[str, ...]]:
    """Word n-gram shingles of lower-cased whitespace tokens (n=5, as datatrove's MinHash dedup)."""
    words = text.lower().split()
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def jaccard(a: str, b: str, n: int = 5) -> float:
    """Jaccard similarity of the two texts' word n-gram shingle sets."""
    sa, sb = shingles(a, n), shingles(b, n)
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)
