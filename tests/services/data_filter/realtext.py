"""Real text for data filter tests, from what ships with Python and the installed packages.

- English prose: the Python reference manual (`pydoc_data.topics`, CPython's own documentation);
  only prose paragraphs are used (indented code/grammar blocks and reST underlines are skipped).
- Code: real source files of several languages from installed packages (Python stdlib, C, C++,
  JavaScript, shell, Cython).
- Other languages: UDHR preamble excerpts in udhr_excerpts.json (credit inside the file).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=1)
def manual_paragraphs(min_words: int = 20) -> tuple[str, ...]:
    """Prose paragraphs of the Python reference manual, in a fixed order."""
    import pydoc_data.topics as topics

    out = []
    for key in sorted(topics.topics):
        for block in re.split(r"\n\s*\n", topics.topics[key]):
            lines = block.split("\n")
            if any(line.startswith((" ", "\t")) for line in lines):
                continue
            if any(re.fullmatch(r"[=*\-^~\"]{3,}", line.strip()) for line in lines):
                continue
            text = " ".join(line.strip() for line in lines).strip()
            if len(text.split()) >= min_words and text.endswith((".", ":")):
                out.append(text)
    return tuple(dict.fromkeys(out))


@functools.lru_cache(maxsize=1)
def manual_words() -> tuple[str, ...]:
    return tuple(w for p in manual_paragraphs() for w in p.split())


def prose_doc(n_paragraphs: int = 4, start: int = 0) -> str:
    """A document of consecutive manual paragraphs separated by blank lines."""
    paras = manual_paragraphs()
    return "\n\n".join(paras[(start + i) % len(paras)] for i in range(n_paragraphs))


def demo_documents(source: str) -> list[dict]:
    """The committed demo corpus's unplanted records of one source (data/demo/, real package text)."""
    import gzip

    path = HERE.parents[2] / "data" / "demo" / f"{source}.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        recs = [json.loads(line) for line in fh]
    return [r for r in recs if not (r.get("meta") or {}).get("planted")]


def udhr(lang: str) -> list[str]:
    return json.loads((HERE / "udhr_excerpts.json").read_text(encoding="utf-8"))["texts"][lang]


def _pkg_file(package: str, rel: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / rel
    return path if path.is_file() else None


def code_files() -> dict[str, str]:
    """name -> source text of real files in several languages (only those installed here)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    candidates = {
        "python_textwrap.py": stdlib / "textwrap.py",
        "python_json_decoder.py": stdlib / "json" / "decoder.py",
        "python_heapq.py": stdlib / "heapq.py",
        "c_markupsafe_speedups.c": _pkg_file("markupsafe", "_speedups.c"),
        "cpp_greenlet_objects.cpp": _pkg_file("greenlet", "CObjects.cpp"),
        "js_matplotlib_nbagg.js": _pkg_file("matplotlib", "backends/web_backend/js/nbagg_mpl.js"),
        "sh_virtualenv_activate.sh": _pkg_file("virtualenv", "activation/bash/activate.sh"),
        "cython_pyarrow_gandiva.pyx": _pkg_file("pyarrow", "gandiva.pyx"),
    }
    return {name: p.read_text(encoding="utf-8") for name, p in candidates.items() if p is not None and p.is_file()}


def math_docs() -> dict[str, str]:
    """LaTeX-heavy real text: SymPy's docstrings of special functions (read with ast, no import)."""
    import ast

    path = _pkg_file("sympy", "functions/special/zeta_functions.py")
    if path is None:
        return {}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in ("lerchphi", "polylog", "zeta", "dirichlet_eta"):
            out[f"sympy_{node.name}"] = ast.get_docstring(node) or ""
    return out


def shuffled(text: str, rng) -> str:
    """An order-free copy of `text`: its whitespace words in a random order, each line's length kept."""
    lines = [line.split() for line in text.split("\n")]
    words = [w for line in lines for w in line]
    rng.shuffle(words)
    out, at = [], 0
    for line in lines:
        out.append(" ".join(words[at: at + len(line)]))
        at += len(line)
    return "\n".join(out)
