"""README and docs/ link only to files that exist and to anchors those files define, so a page that
moves or a section that is renamed breaks a test, not a reader's click."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors (lower case, punctuation dropped, spaces to hyphens) and explicit ids."""
    text = page.read_text(encoding="utf-8")
    found = set(re.findall(r'<a id="([^"]+)"></a>', text))
    for heading in re.findall(r"^#{1,6} (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), flags=re.M):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z]+://", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no anchor #{anchor}")
    assert not broken, broken


def test_readme_first_screen_runs_the_demo_trains_and_reaches_every_guide():
    """The newcomer's screen: the two make targets, the train command, and a link to each component's page."""
    first = "\n".join(
        (ROOT / "README.md").read_text(encoding="utf-8").split("\n## What the demo prints")[0].split("\n"))
    assert len(first.split("\n")) <= 60
    for command in ("make demo", "make test", "moelab train configs/tiny.yaml"):
        assert command in first, command
    guides = {"moe", "attention", "precision", "data", "config", "data_filter", "scorer", "trainer", "hparam",
              "tracker", "cluster", "doctor", "demo-corpus", "benchmarks", "development", "status", "extending"}
    linked = {Path(t).stem for t in LINK.findall(first) if t.startswith("docs/")}
    assert guides <= linked, guides - linked


def test_every_docs_page_is_in_the_index():
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in PAGES[1:] if p.name != "README.md" and f"]({p.name})" not in index]
    assert not missing, missing
