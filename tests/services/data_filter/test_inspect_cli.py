"""`moelab data inspect` per source: removals, bytes and edits per source, samples by source and reason,
flagged-and-kept documents with how far they failed."""

from __future__ import annotations

import json
import textwrap

import pytest
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


def _prose_with_number_rows() -> str:
    """Manual prose with a row of distinct numbers after every ten words: about three words in four hold
    a letter, a near miss of Gopher's 0.8 alphabetic-word rule that the layout review flags and keeps."""
    words = " ".join(realtext.manual_paragraphs()[:6]).split()
    rows = []
    for i in range(0, len(words), 10):
        rows.append(" ".join(words[i : i + 10]))
        rows.append(" ".join(str(1000 + 37 * i + j) for j in range(3 if i % 20 else 4)))
    return "\n".join(rows)


def _run_with_layout_flag(tmp_path, extra: tuple[dict, ...] = ()):
    """Twelve manual documents plus the near miss (source web) and two hard-wrapped pages (source
    manpages), through the web chain with Gopher and the perplexity review on."""
    paras = realtext.manual_paragraphs()
    web = [{"id": f"web{i}", "text": "\n\n".join(paras[20 + 6 * i : 26 + 6 * i])} for i in range(12)]
    web.append({"id": "numbers", "text": _prose_with_number_rows()})
    web.extend(extra)
    wrapped = [{"id": f"man{i}", "text": "\n\n".join(textwrap.fill(p, 72) for p in paras[100 + 12 * i : 112 + 12 * i])}
               for i in range(2)]
    inputs = []
    for name, recs in (("web", web), ("manpages", wrapped)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
        inputs.append({"name": name, "kind": "web", "paths": [str(path)]})
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({
        "tracker": {"mode": "disabled"},
        "data": {"inputs": inputs, "out_dir": str(tmp_path / "out"),
                 "filter": {"workers": 0, "dedup": {"enabled": False}, "chains": {"web": {"fineweb": {"enabled": False}}}}},
    }))
    runner = CliRunner()
    res = runner.invoke(app, ["data", "filter", str(recipe)])
    assert res.exit_code == 0, res.output
    return runner, str(tmp_path / "out")


def _flagged_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("--- kept, flagged")]


def test_inspect_flagged_shows_a_layout_flagged_document_beside_edit_flags_and_filters_by_reason(tmp_path):
    runner, out = _run_with_layout_flag(tmp_path)
    res = runner.invoke(app, ["data", "inspect", out, "--flagged"])
    assert res.exit_code == 0, res.output
    shown = _flagged_lines(res.output)
    layout = [line for line in shown if "gopher_quality:too_few_alpha_words" in line]
    assert len(layout) == 1 and "id=numbers" in layout[0] and "source=web" in layout[0], res.output
    times = float(layout[0].rsplit("  ", 1)[1].split("x its rule's limit")[0])
    assert 1.0 < times <= 1.5  # a near miss: past the limit, inside the margin that would remove it
    assert sum("c4:edit_over_limit" in line for line in shown) == 2

    for reason in ("too_few_alpha_words", "gopher_quality:too_few_alpha_words"):
        res = runner.invoke(app, ["data", "inspect", out, "--flagged", "--reason", reason])
        assert res.exit_code == 0, res.output
        assert [("id=numbers" in line) for line in _flagged_lines(res.output)] == [True], res.output
    res = runner.invoke(app, ["data", "inspect", out, "--flagged", "--reason", "edit_over_limit"])
    shown = _flagged_lines(res.output)
    assert len(shown) == 2 and all("c4:edit_over_limit" in line and "source=manpages" in line for line in shown)
    res = runner.invoke(app, ["data", "inspect", out, "--flagged", "--reason", "too_few_alpha_words", "--source", "manpages"])
    assert res.exit_code == 0 and _flagged_lines(res.output) == []


def test_inspect_flagged_shows_how_far_a_repetition_flag_failed(tmp_path):
    """A handbook-style page around a shell session that repeats its commands: the repetition rule's
    line count flags it (half its lines repeat, 1.67x the 0.3 limit) and data inspect says how far."""
    paras = [" ".join(p.split()) for p in realtext.manual_paragraphs()[200:206]]
    session = {"id": "session", "text": "\n".join(paras[:3] + ["$ pwd", "/home/user", "$ ls"] * 4 + paras[3:])}
    runner, out = _run_with_layout_flag(tmp_path, extra=(session,))
    res = runner.invoke(app, ["data", "inspect", out, "--flagged", "--reason", "dup_line_frac"])
    assert res.exit_code == 0, res.output
    shown = _flagged_lines(res.output)
    assert len(shown) == 1 and "id=session" in shown[0] and "repetition:dup_line_frac" in shown[0], res.output
    times = float(shown[0].rsplit("  ", 1)[1].split("x its rule's limit")[0])
    assert times == pytest.approx(9 / 18 / 0.3, abs=0.01)
