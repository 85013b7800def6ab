"""Product code says why in its own words: a comment or docstring that points at the lab log (or a
tracker issue) sends the reader out of the code for a reason that belongs next to it, and goes stale
when the log is reorganised. The history stays in docs/LOG.md."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("services", "shared", "moelab", "cluster")
CITATION = re.compile(r"\(\s*(?:see\s+)?(?:the\s+)?lab[ -]log\b[^)]*\)|\bas the issue asks\b", re.I)


def citations(root: Path) -> list[str]:
    out = []
    for top in PRODUCT:
        for path in sorted((root / top).rglob("*.py")):
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if CITATION.search(line):
                    out.append(f"{path.relative_to(root)}:{i}: {line.strip()}")
    return out


def test_product_code_cites_no_lab_log(tmp_path):
    planted = tmp_path / "services" / "x.py"
    planted.parent.mkdir(parents=True)
    planted.write_text('"""A shuffle costs nothing (lab log)."""\n', encoding="utf-8")
    assert citations(tmp_path) == ["services/x.py:1: \"\"\"A shuffle costs nothing (lab log).\"\"\""]
    assert citations(ROOT) == [], "say why in the code instead of citing the log:\n" + "\n".join(citations(ROOT))
