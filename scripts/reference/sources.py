"""The evaluation-only sources: pinned packages no training source uses, and how to cut them into documents.

Why these three: the demo corpus (scripts/corpus/versions.py) already takes Wikipedia (gensim),
the Debian Handbook, the UDHR, fortunes, the CPython and Go standard libraries, set.mm, sympy and
texlive-science-doc. Evaluation text must be none of those, or bits per byte would reward
memorising the training set. So:

- prose: the Debian FAQ (Debian package `debian-faq`, English plain-text edition), hard-wrapped
  paragraphs joined back into passages;
- code: `more-itertools` (PyPI wheel), every top-level function of `more.py` and `recipes.py`;
- math: `mpmath` (PyPI wheel), the mathematical function documentation in `function_docs.py`
  (definitions, identities and worked examples of special functions).

Every document records the package, version, path and licence it came from.
"""

from __future__ import annotations

import ast
import glob
import gzip
import hashlib
import re
import subprocess
import zipfile
from pathlib import Path

# (package, version, sha256 of the downloaded file)
APT_PIN = ("debian-faq", "11.1", "427426e0cfa6888622fc1d72631071cb4b5a1f86ccde722e7820bcef284de5d0")
PYPI_PINS = {
    "more-itertools": ("10.7.0", "d43980384673cb07d2f7d2d918c616b30c659c089ee23953f601d6609c67510e"),
    "mpmath": ("1.3.0", "a0b2b9fe80bbcd81a6647ff13108738cfb482d481d826cc0e02f5b35e5c88d2c"),
}
FAQ_PATH = "usr/share/doc/debian/FAQ/debian-faq.en.txt.gz"
LICENSES = {
    "debian-faq": "Debian FAQ permission notice (verbatim and modified copies permitted with the notice; "
                  "Copyright 1996-2003 Software in the Public Interest), see data/reference/NOTICE",
    "more-itertools": "MIT (Copyright (c) 2012 Erik Rose)",
    "mpmath": "BSD-3-Clause (Copyright (c) 2005-2023 Fredrik Johansson and mpmath contributors)",
}


class PinMismatch(RuntimeError):
    """A fetched package differs from its pinned version or hash."""


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch_apt(workdir: Path) -> dict:
    """`apt-get download` the pinned Debian package (no install) and unpack it under workdir."""
    name, version, _ = APT_PIN
    subprocess.run(["apt-get", "download", "-q", f"{name}={version}"], cwd=workdir, check=True, capture_output=True)
    debs = sorted(glob.glob(str(workdir / f"{name}_*.deb")))
    if not debs:
        raise PinMismatch(f"apt-get download {name}={version} produced no .deb in {workdir}")
    dest = workdir / name
    subprocess.run(["dpkg-deb", "-x", debs[0], str(dest)], check=True)
    return {"version": version, "sha256": sha256_file(Path(debs[0])), "dir": str(dest), "file": Path(debs[0]).name}


def fetch_pypi(workdir: Path, python: str) -> dict[str, dict]:
    """`pip download --no-deps` each pinned wheel (read as a zip, never installed)."""
    found = {}
    for name, (version, _) in PYPI_PINS.items():
        dest = workdir / name
        subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", f"{name}=={version}", "-d", str(dest)],
                       check=True)
        wheels = sorted(glob.glob(str(dest / "*.whl")))
        if not wheels:
            raise PinMismatch(f"pip download {name}=={version} produced no wheel in {dest}")
        found[name] = {"version": version, "sha256": sha256_file(Path(wheels[0])), "wheel": wheels[0],
                       "file": Path(wheels[0]).name}
    return found


def _meta(package: str, version: str, path: str) -> dict:
    return {"package": package, "version": version, "path": path, "license": LICENSES[package]}


def faq_passages(faq_dir: str, version: str, max_chars: int = 1200) -> list[dict]:
    """Paragraphs of the FAQ's body (the table of contents and headings dropped), unwrapped, grouped
    into passages of whole paragraphs up to `max_chars`; one passage never spans two sections."""
    raw = gzip.decompress((Path(faq_dir) / FAQ_PATH).read_bytes()).decode("utf-8").replace("\u00a0", " ")
    body = raw[raw.find("\n1. ", raw.find("Contents")):]
    body = body[body.find("\n1. ", 1):] if "\n1. " in body[1:] else body
    passages, current, section = [], [], ""
    heading = re.compile(r"^\d+(\.\d+)*\.? \S")
    for block in re.split(r"\n\s*\n", body):
        lines = [ln.strip() for ln in block.strip().splitlines()]
        if not lines or not lines[0]:
            continue
        text = " ".join(lines)
        if heading.match(lines[0]) or lines[0].startswith(("* ", "$ ", "# ")) or not text.endswith((".", ":", "?")):
            if heading.match(lines[0]):
                section = lines[0]
            if current:
                passages.append((section, current))
                current = []
            continue
        if sum(len(p) + 1 for p in current) + len(text) > max_chars and current:
            passages.append((section, current))
            current = []
        current.append(text)
    if current:
        passages.append((section, current))
    return [{"text": "\n\n".join(paras), "meta": {**_meta("debian-faq", version, FAQ_PATH), "section": sec}}
            for sec, paras in passages if sum(map(len, paras)) >= 200]


def _wheel_text(wheel: str, member: str) -> str:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(member).decode("utf-8")


def code_functions(wheel: str, version: str, min_chars: int = 200, max_chars: int = 2500) -> list[dict]:
    """Every top-level function of more_itertools' `more.py` and `recipes.py`, as source, within a size range."""
    docs = []
    for member in ("more_itertools/more.py", "more_itertools/recipes.py"):
        source = _wheel_text(wheel, member)
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef):
                text = ast.get_source_segment(source, node)
                if text and min_chars <= len(text) <= max_chars:
                    docs.append({"text": text, "meta": {**_meta("more-itertools", version, member), "name": node.name}})
    return docs


def math_docs(wheel: str, version: str, min_chars: int = 300, max_chars: int = 2500) -> list[dict]:
    """mpmath's function documentation strings (`name = r\"\"\"...\"\"\"` in function_docs.py): the
    prose and formulas before the first example, at most `max_chars` cut at a paragraph end."""
    member = "mpmath/function_docs.py"
    docs = []
    for node in ast.parse(_wheel_text(wheel, member)).body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            continue
        text = node.value.value.strip()
        text = text.split("**Examples**")[0].strip()
        if len(text) > max_chars:
            text = text[:text.rfind("\n\n", 0, max_chars)].strip()
        if len(text) >= min_chars:
            name = node.targets[0].id if isinstance(node.targets[0], ast.Name) else "?"
            docs.append({"text": text, "meta": {**_meta("mpmath", version, member), "name": name}})
    return docs
