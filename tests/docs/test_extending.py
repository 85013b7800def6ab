"""docs/extending.md names real files, functions and tests: a recipe that points at a file, a
registry or a test that was renamed or removed fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
# `dir/file.ext` or `dir/file.ext::name` in backticks (placeholders like `<kind>.py` are skipped)
REFERENCE = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|js|md|yaml))(?:::([\w.]+))?`")


def test_every_file_and_name_the_recipes_cite_exists():
    refs = REFERENCE.findall(TEXT)
    assert len(refs) >= 30
    missing = []
    for path, name in refs:
        file = ROOT / path
        if not file.is_file():
            missing.append(path)
        elif name and not re.search(rf"\b{re.escape(name.split('.')[-1])}\b", file.read_text(encoding="utf-8")):
            missing.append(f"{path}::{name}")
    assert not missing, missing


def test_bare_file_names_resolve_beside_the_files_they_are_named_with():
    """`test_causality.py`, `widgets.js`, … are cited by name alone; each must exist in the tree."""
    names = set(re.findall(r"`([\w-]+\.(?:py|js))`", TEXT))
    dirs = ("shared", "services", "tests", "benchmarks", "scripts", "moelab", "cluster")
    tracked = {p.name for d in dirs for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".js")}
    assert names and not names - tracked, names - tracked


def test_the_registries_and_hooks_the_recipes_name_are_real():
    from services.data_filter.filters import FILTERS, register_filter  # noqa: F401
    from services.scorer.oracle import BACKENDS
    from services.tracker.pages import SCRIPTS
    from shared.config.attention import ATTENTION_KINDS
    from shared.config.chains import KIND_DEFAULTS
    from shared.config.filters import FILTER_SETTINGS
    from shared.config.scorer import OracleConfig
    from shared.model.attention import ATTENTION_REGISTRY

    assert set(ATTENTION_KINDS) == set(ATTENTION_REGISTRY) and set(FILTERS) >= set(FILTER_SETTINGS)
    assert set(BACKENDS) <= set(OracleConfig.model_fields) and "toxicity" in FILTER_SETTINGS and "code" in KIND_DEFAULTS
    assert "widgets.js" in SCRIPTS["run"] and hasattr(OracleConfig, "backend_section")
    static = ROOT / "services" / "tracker" / "static"
    for name, file in (("sectionOf", "common.js"), ("unitOf", "common.js"), ("TRAINING", "common.js"),
                       ("eventMarks", "run_charts.js"), ("renderEvents", "run.js"), ("lineChart", "chart.js")):
        assert name in (static / file).read_text(encoding="utf-8"), (name, file)
