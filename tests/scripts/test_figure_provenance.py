"""Figures in README and the checked docs come from result files written on the code as it is
(scripts/figure_provenance.py): planted unproduced and stale figures fail, marked ones pass."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from scripts import figure_provenance as fp


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@t")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "shared" / "model").mkdir(parents=True)
    (tmp_path / "shared" / "model" / "moe.py").write_text("x = 1\n")
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "moe_layer.native.json").write_text(json.dumps({"ratio": 1.8316, "ms": {"ours": 412.5}}))
    _commit(tmp_path, "code and result", when=1_000)
    return tmp_path


def _commit(root: Path, message: str, when: int) -> str:
    _git(root, "add", "-A")
    date = f"{1_700_000_000 + when} +0000"  # commit times decide staleness: set them, never rely on the clock
    subprocess.run(["git", "commit", "-q", "-m", message], cwd=root, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    return subprocess.run(["git", "log", "-1", "--format=%h"], cwd=root, capture_output=True, text=True).stdout.strip()


def _check(root: Path, text: str) -> fp.Report:
    (root / "README.md").write_text(text)
    fp._last_commit.cache_clear()
    fp._changed_since.cache_clear()
    return fp.run(root, ("README.md",))


def test_a_figure_the_result_file_holds_passes_at_the_precision_shown(repo):
    report = _check(repo, "Our layer runs at 1.83× the peer (`moe_layer.native.json`; 412 ms is an integer, not a figure; "
                            "0.41k is).\n")
    assert report.failures == [] and report.checked == 2


def test_a_planted_unproduced_figure_fails_naming_the_line(repo):
    report = _check(repo, "Intro.\n\nOur layer runs at 1.83× and 2.47× the peer (`moe_layer.native.json`).\n")
    assert len(report.failures) == 1
    assert report.failures[0].startswith("README.md:3: 2.47×") and "none of the files its text names" in report.failures[0]


def test_figures_in_code_spans_and_blocks_are_not_figures(repo):
    assert _check(repo, "Set `lr=0.0123`.\n\n```\nloss 9.87\n```\n").checked == 0


def test_a_result_file_older_than_the_code_it_measures_fails_until_the_paragraph_says_so(repo):
    wrote = subprocess.run(["git", "log", "-1", "--format=%h"], cwd=repo, capture_output=True, text=True).stdout.strip()
    (repo / "shared" / "model" / "moe.py").write_text("x = 2\n")
    _commit(repo, "code moves on", when=2_000)
    stale = _check(repo, "Our layer runs at 1.83× the peer (`moe_layer.native.json`).\n")
    assert len(stale.failures) == 1 and f"(stale: benchmarks/results/moe_layer.native.json ran on {wrote})" in stale.failures[0]
    marked = _check(repo, f"Our layer runs at 1.83× the peer (stale: benchmarks/results/moe_layer.native.json ran on {wrote}).\n")
    assert marked.failures == [] and marked.stale_marked == 1
    wrong_commit = _check(repo, "Our layer runs at 1.83× the peer (stale: benchmarks/results/moe_layer.native.json ran on abcdef1).\n")
    assert len(wrong_commit.failures) == 1


def test_a_result_filed_after_a_code_change_but_run_before_it_is_stale_by_the_commit_it_records(repo):
    """Committing an old run's file after the code moved must not make it current: the commit the
    result records decides, not the commit that filed it."""
    ran_on = subprocess.run(["git", "log", "-1", "--format=%h"], cwd=repo, capture_output=True, text=True).stdout.strip()
    (repo / "shared" / "model" / "moe.py").write_text("x = 2\n")
    _commit(repo, "code moves on", when=2_000)
    result = repo / "benchmarks" / "results" / "moe_layer.native.json"
    result.write_text(json.dumps({"ratio": 1.8316, "commit": ran_on + "-dirty"}))
    _commit(repo, "file the old run", when=3_000)
    stale = _check(repo, "Our layer runs at 1.83× the peer (`moe_layer.native.json`).\n")
    assert len(stale.failures) == 1 and f"ran on {ran_on})" in stale.failures[0]
    marked = _check(repo, f"Our layer runs at 1.83× the peer (stale: benchmarks/results/moe_layer.native.json ran on {ran_on}).\n")
    assert marked.failures == [] and marked.stale_marked == 1
    head = subprocess.run(["git", "log", "-1", "--format=%h"], cwd=repo, capture_output=True, text=True).stdout.strip()
    result.write_text(json.dumps({"ratio": 1.8316, "commit": head}))  # a rerun on the current code
    _commit(repo, "rerun", when=4_000)
    assert _check(repo, "Our layer runs at 1.83× the peer (`moe_layer.native.json`).\n").failures == []


def test_the_train_step_is_not_stale_by_the_frozen_router_measure_but_is_by_the_model(repo):
    """`train_step` measures shared/model less the frozen-router modules, which it never imports."""
    (repo / "benchmarks" / "results" / "train_step.native.json").write_text(json.dumps({"ratio": 1.2345}))
    wrote = _commit(repo, "train-step result", when=1_500)
    (repo / "shared" / "model" / "router_frozen.py").write_text("y = 1\n")
    _commit(repo, "frozen-router measure moves on", when=2_000)
    assert _check(repo, "The step runs at 1.23× the peer (`train_step.native.json`).\n").failures == []
    (repo / "shared" / "model" / "moe.py").write_text("x = 3\n")
    _commit(repo, "the model moves on", when=3_000)
    stale = _check(repo, "The step runs at 1.23× the peer (`train_step.native.json`).\n")
    assert len(stale.failures) == 1 and f"(stale: benchmarks/results/train_step.native.json ran on {wrote})" in stale.failures[0]


def test_a_stale_folder_marker_covers_the_files_its_commit_wrote_and_no_other(repo):
    rounds = repo / "benchmarks" / "results" / "moe_layer"
    rounds.mkdir()
    (rounds / "round1.json").write_text(json.dumps({"maxvio": 2.7129}))
    (rounds / "round2.json").write_text(json.dumps({"maxvio": 0.5112}))
    (repo / "benchmarks" / "results" / "moe_layer.other.json").write_text(json.dumps({"x": 9.4321}))
    wrote = _commit(repo, "rounds, and a file beside their folder", when=1_500)
    (repo / "shared" / "model" / "moe.py").write_text("x = 2\n")
    _commit(repo, "code moves on", when=2_000)
    table = "| arm | MaxVio |\n|---|---:|\n| a | 2.71 |\n| b | 0.51 |\n"
    assert len(_check(repo, table).failures) == 2
    marked = _check(repo, f"Rounds (stale: benchmarks/results/moe_layer/ ran on {wrote}):\n" + table)
    assert marked.failures == [] and marked.stale_marked == 2
    elsewhere = _check(repo, f"Rounds (stale: benchmarks/results/moe_layer/ ran on {wrote}): 9.43.\n")
    assert len(elsewhere.failures) == 1, "a folder marker must not cover a file outside the folder"
    wrong = _check(repo, "Rounds (stale: benchmarks/results/moe_layer/ ran on abcdef1):\n" + table)
    assert len(wrong.failures) == 2


def test_a_gpu_figure_needs_the_tree_it_ran_on_marked_as_not_checkable(repo):
    run = repo / "benchmarks" / "results" / "gpu" / "h200"
    run.mkdir(parents=True)
    (run / "train_step.json").write_text(json.dumps({"ratio_recipe": 0.7898}))
    (run / "commit.txt").write_text("tree 2ecc595\n")
    _commit(repo, "gpu run", when=3_000)
    assert len(_check(repo, "The recipe runs at 0.79× HF (`gpu/h200/train_step.json`).\n").failures) == 1
    marked = _check(repo, "The recipe runs at 0.79× HF (`gpu/h200/train_step.json`) (code not checkable: tree 2ecc595).\n")
    assert marked.failures == [] and marked.uncheckable == 1


def test_a_stated_source_is_accepted_and_counted(repo):
    report = _check(repo, "DeepSeek-V3 uses γ = 0.001 (source: the DeepSeek-V3 report).\n")
    assert report.failures == [] and report.source_noted == 1


def test_a_console_block_naming_a_transcript_must_quote_it_line_for_line(repo):
    (repo / "docs" / "transcripts").mkdir(parents=True)
    (repo / "docs" / "transcripts" / "demo.txt").write_text("commit: abc1234\n== filter: done in 31.6s\n")
    tied = "```console docs/transcripts/demo.txt\n== filter: done in 31.6s\n```\n"
    assert _check(repo, tied).failures == []
    altered = _check(repo, tied.replace("31.6s", "21.6s"))
    assert len(altered.failures) == 1 and "README.md:2: this transcript line is not in docs/transcripts/demo.txt" in altered.failures[0]
    untied = _check(repo, "```console\n== filter: done in 9.9s\n```\n")
    assert untied.failures == [] and untied.untied_transcripts == 1


def test_every_guide_is_checked_but_the_lab_log_and_the_generated_page():
    guides = {p.relative_to(fp.ROOT).as_posix() for p in (fp.ROOT / "docs").glob("*.md")}
    unchecked = guides - set(fp.checked_docs(fp.ROOT))
    assert unchecked == {"docs/LOG.md", "docs/benchmarks.md"}
    assert {"README.md", "docs/gpu/README.md"} <= set(fp.checked_docs(fp.ROOT))


def test_the_checked_docs_of_this_repository_pass():
    fp._last_commit.cache_clear()
    report = fp.run()
    assert report.failures == [], "\n".join(report.failures)


@pytest.fixture
def two_files(repo: Path) -> Path:
    (repo / "benchmarks" / "results" / "data_filter.json").write_text(json.dumps({"ratio": 3.0812, "share": 0.4417}))
    _commit(repo, "a second result", when=1_100)
    return repo


def test_a_planted_wrong_citation_fails_naming_the_file_that_holds_the_figure(two_files):
    """A paragraph that names a result file is matched against that file only: 3.08× is in
    data_filter.json, so citing the MoE-layer file for it fails, and says where it is."""
    wrong = _check(two_files, "Our filter runs at 3.08× datatrove (`benchmarks/results/moe_layer.native.json`).\n")
    assert len(wrong.failures) == 1
    assert "none of the files its text names (benchmarks/results/moe_layer.native.json)" in wrong.failures[0]
    assert "it is in benchmarks/results/data_filter.json" in wrong.failures[0]
    right = _check(two_files, "Our filter runs at 3.08× datatrove ([data_filter.json](benchmarks/results/data_filter.json)).\n")
    assert right.failures == []


def test_a_figure_with_no_named_file_anywhere_fails_unless_a_source_is_stated(two_files):
    """Matched against every file it would pass by coincidence; with no file named it can only fail."""
    report = _check(two_files, "Our filter runs at 3.08× datatrove and the layer at 1.83×.\n")
    assert len(report.failures) == 2 and "names a result file" in report.failures[0]
    noted = _check(two_files, "The target is 1.5× (source: the issue's target, not a run).\n")
    assert noted.failures == [] and noted.source_noted == 1


def test_a_paragraph_naming_no_file_is_matched_against_its_sections_files(two_files):
    """The section's named file narrows its unnamed paragraphs: 3.08× is in data_filter.json only,
    so a section that cites the MoE-layer file cannot quote it without naming its file."""
    doc = ("# Layer\n\nFrom `moe_layer.native.json`:\n\nThe layer runs at 1.83×.\n\n"
           "# Filter\n\nFrom `data_filter.json`:\n\nThe filter runs at 3.08×.\n")
    report = _check(two_files, doc)
    assert report.failures == []
    wrong = _check(two_files, doc.replace("The layer runs at 1.83×.", "The layer runs at 3.08×."))
    assert len(wrong.failures) == 1 and "README.md:5: 3.08×" in wrong.failures[0]
    assert "it is in benchmarks/results/data_filter.json" in wrong.failures[0]


def test_a_section_naming_no_file_falls_back_to_the_files_the_doc_names(two_files):
    doc = "# Runs\n\nFrom `moe_layer.native.json`.\n\n## Aside\n\nThe layer runs at {}.\n"
    assert _check(two_files, doc.format("1.83×")).failures == []
    assert len(_check(two_files, doc.format("3.08×")).failures) == 1


def test_a_table_row_or_list_item_naming_a_file_narrows_its_own_figures(two_files):
    table = ("Both runs (`moe_layer.native.json`):\n"
             "| run | figure |\n|---|---:|\n| layer | 1.83× |\n| filter (`data_filter.json`) | 3.08× |\n")
    assert _check(two_files, table).failures == []  # the second row cites its own file
    swapped = table.replace("| layer | 1.83× |", "| layer (`data_filter.json`) | 1.83× |")
    assert len(_check(two_files, swapped).failures) == 1
    items = "Runs, from `moe_layer.native.json`:\n- the layer, 1.83×\n- the filter, 3.08×\n  (`data_filter.json`)\n"
    assert _check(two_files, items).failures == []
    assert len(_check(two_files, items.replace("3.08×", "0.44 and 3.08×").replace("(`data_filter.json`)", "")).failures) == 2


def test_a_named_folder_stands_for_every_file_under_it(two_files):
    assert _check(two_files, "From benchmarks/results/: 3.08× and 1.83×.\n").failures == []
    assert len(_check(two_files, "From docs/gpu/: 3.08×.\n").failures) == 1  # no result file there: it names nothing
    assert len(_check(two_files, "From `results/moe_layer.native.json` and `stats.json`: 0.44.\n").failures) == 1


def test_units_split_table_rows_and_list_items_with_their_continuations():
    block = "Lead text\nstill the lead\n| a | b |\n|---|---|\n- item one\n  goes on\n1. item two"
    assert fp.units(block) == ["Lead text\nstill the lead", "| a | b |", "|---|---|", "- item one\n  goes on", "1. item two"]


def test_a_bare_jsonl_name_names_its_file(repo):
    (repo / "benchmarks" / "results" / "steps.jsonl").write_text('{"loss": 5.5298}\n')
    (repo / "benchmarks" / "results" / "steps.json").write_text('{"loss": 4.25}\n')
    _commit(repo, "two results", when=1_200)
    assert _check(repo, "The loss was 5.5298 (`steps.jsonl`).\n").failures == []
    assert len(_check(repo, "The loss was 4.25 (`steps.jsonl`).\n").failures) == 1


def test_every_result_file_of_this_repository_is_tied_to_the_code_it_measures():
    """A result no code is mapped to could never read as stale: every CPU result and transcript
    names its benchmark's code (GPU runs are tied by the tree they record instead)."""
    untied = [s.path for s in fp.load_sources(fp.ROOT) if fp.benchmark_of(s.path) is None and not fp._is_gpu(s)]
    assert untied == [], f"add these to CODE in scripts/figure_provenance.py: {untied}"


def test_a_docstring_or_comment_change_leaves_a_result_fresh_and_a_code_change_does_not(repo):
    """Staleness follows the code as it runs: rewording a docstring or a comment of the measured
    code keeps its results; changing a statement, adding or moving a file, does not."""
    doc = "Our layer runs at 1.83× the peer (`moe_layer.native.json`).\n"
    moe = repo / "shared" / "model" / "moe.py"
    moe.write_text('"""The MoE layer."""\n\nx = 1  # one\n')
    _commit(repo, "a docstring and a comment", when=2_000)
    assert _check(repo, doc).failures == []
    moe.write_text('"""The MoE layer, reworded."""\n\nx = 1  # still one\n')
    _commit(repo, "reworded", when=2_100)
    assert _check(repo, doc).failures == []
    (repo / "shared" / "model" / "router.py").write_text("y = 1\n")
    _commit(repo, "a new file in the measured code", when=2_200)
    assert len(_check(repo, doc).failures) == 1
    (repo / "shared" / "model" / "router.py").unlink()
    moe.write_text('"""The MoE layer, reworded."""\n\nx = 2\n')
    _commit(repo, "code moves on", when=2_300)
    assert len(_check(repo, doc).failures) == 1
