"""Source files that stock Debian packages ship, in languages and projects the demo corpus lacks.

The demo corpus's code is the CPython and Go standard libraries; a scorer that only ranks those
well has learnt them, not code quality. These groups are the held-out code of the pairs
benchmark and of the oracle's tests: Perl modules, npm's JavaScript, the C examples of `-dev`
packages and Python projects Debian packages (not the standard library). A group whose folder
is missing on a machine is reported missing, never silently replaced.

Each document is one chunk of one file: whole lines from a seeded line of the file, up to
`max_chars`, so a file's licence header is not every document's opening.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ShippedCode:
    language: str
    packages: str
    root: str
    pattern: str


SHIPPED_CODE = {
    "code-perl": ShippedCode("perl", "perl-modules-5.36", "/usr/share/perl/5.36.0", "**/*.pm"),
    "code-javascript": ShippedCode("javascript", "nodejs (its bundled npm)", "/usr/lib/node_modules/npm/lib", "**/*.js"),
    "code-c": ShippedCode("c", "zlib1g-dev, libxmlsec1-dev, nettle-dev, liblzma-dev, libpng-dev, libexpat1-dev, "
                          "libtasn1-6-dev examples", "/usr/share/doc", "*-dev/examples/*.c"),
    "code-python-debian": ShippedCode("python", "python3-* packages (pygments, yaml, apt, cryptography, ...)",
                                      "/usr/lib/python3/dist-packages", "**/*.py"),
}


def _chunk(lines: list[str], start: int, max_chars: int) -> str:
    out: list[str] = []
    size = 0
    for ln in lines[start:]:
        if out and size + len(ln) + 1 > max_chars:
            break
        out.append(ln)
        size += len(ln) + 1
    return "\n".join(out).strip("\n")


def shipped_code(group: str, n: int, seed: int, min_chars: int = 800, max_chars: int = 3000) -> list[dict]:
    """Up to `n` chunks of distinct files of `group` (SHIPPED_CODE), as scorer documents.

    Raises FileNotFoundError naming the package when the group's folder is absent. A chunk starts
    at a seeded blank line (or the file's start) and keeps whole lines up to `max_chars`; a file
    with no chunk of `min_chars` is passed over.
    """
    spec = SHIPPED_CODE[group]
    root = Path(spec.root)
    if not root.is_dir():
        raise FileNotFoundError(f"{group}: {root} is missing (install {spec.packages})")
    files = sorted(p for p in root.glob(spec.pattern) if p.is_file() and p.stat().st_size >= min_chars)
    rng = random.Random(f"{seed}:{group}")
    rng.shuffle(files)
    docs = []
    for path in files:
        if len(docs) >= n:
            break
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        starts = [0] + [i + 1 for i, ln in enumerate(lines[:-1]) if not ln.strip()]
        text = _chunk(lines, rng.choice(starts), max_chars)
        if len(text) < min_chars:
            text = _chunk(lines, 0, max_chars)
        if len(text) >= min_chars:
            docs.append({"id": f"{group}:{path.relative_to(root)}", "text": text, "source": group, "kind": "code",
                         "meta": {"lang": spec.language, "origin": str(path)}})
    return docs
