"""`moelab data inspect` per source: removals, bytes and edits per source, samples by source and reason,
flagged-and-kept documents with how far they failed."""

from __future__ import annotations

import json
import textwrap

import yaml
from typer.testing import CliRunner

from moelab.cli import app
from tests.services.data_filter import realtext


def _paras(n: int, start: int) -> list[str]:
    return [" ".join(p.split()) for p in realtext.manual_paragraphs()[start : start + n]]


def _run(tmp_path):
    wrapped = [{"id": f"man{i}", "text": "\n\n".join(textwrap.fill(p, 72) for p in _paras(12, i * 12))} for i in range(3)]
    wrapped.append({"id": "man-de", "text": " ".join(realtext.udhr("de"))})
    prose = [{"id": f"web{i}", "text": "\n\n".join(_paras(8, 60 + i * 8))} for i in range(3)]
    prose.append({"id": "web-de", "text": " ".join(realtext.udhr("de"))})
    inputs = []
    for name, recs in (("manpages", wrapped), ("web", prose)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
        inputs.append({"name": name, "kind": "web", "paths": [str(path)]})
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({
        "tracker": {"mode": "disabled"},
        "data": {"inputs": inputs, "out_dir": str(tmp_path / "out"),
                 "filter": {"workers": 0, "dedup": {"enabled": False},
                            "chains": {"web": {"perplexity": {"enabled": False}, "fineweb": {"enabled": False},
                                               "gopher_quality": {"enabled": False}}}}},
    }))
    runner = CliRunner()
    res = runner.invoke(app, ["data", "filter", str(recipe)])
    assert res.exit_code == 0, res.output
    return runner, str(tmp_path / "out")


def test_inspect_shows_each_source_with_bytes_edits_and_filters_samples_by_source_and_reason(tmp_path):
    runner, out = _run(tmp_path)
    res = runner.invoke(app, ["data", "inspect", out])
    assert res.exit_code == 0, res.output
    assert "source manpages (web):" in res.output and "source web (web):" in res.output
    assert "removed: language:language_not_kept 1" in res.output
    assert "past the edit bound: flagged 3, removed 0" in res.output  # the three wrapped pages
    assert "bytes in" in res.output and "edited" in res.output

    res = runner.invoke(app, ["data", "inspect", out, "--source", "web", "--reason", "language_not_kept"])
    assert res.exit_code == 0, res.output
    assert "source manpages" not in res.output and "funnel:" not in res.output
    assert "id=web-de" in res.output and "id=man-de" not in res.output

    res = runner.invoke(app, ["data", "inspect", out, "--source", "nosuch"])
    assert res.exit_code == 2 and "no source 'nosuch'" in res.output and "manpages, web" in res.output


def test_inspect_flagged_lists_kept_documents_with_how_far_they_failed(tmp_path):
    runner, out = _run(tmp_path)
    res = runner.invoke(app, ["data", "inspect", out, "--flagged", "--source", "manpages", "-n", "5"])
    assert res.exit_code == 0, res.output
    shown = [line for line in res.output.splitlines() if line.startswith("--- kept, flagged")]
    assert len(shown) == 3, res.output
    assert all("c4:edit_over_limit" in line and "source=manpages" in line for line in shown)
    assert all("the edit would remove" in line and "(kept whole)" in line for line in shown)
    res = runner.invoke(app, ["data", "inspect", out, "--flagged", "--source", "web"])
    assert "--- kept, flagged" not in res.output
