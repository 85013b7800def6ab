"""The commit a run belongs to: named explicitly where the tree cannot say, else git's, dirty marked."""

from __future__ import annotations

from shared import provenance


def test_the_commit_comes_from_the_environment_then_the_carried_file_then_git(monkeypatch, tmp_path):
    import subprocess

    monkeypatch.delenv("MOELAB_COMMIT", raising=False)
    assert provenance.tree_commit(tmp_path) == "unknown"  # no git, nothing carried
    for args in (["init", "-q"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True)
    (tmp_path / "a.txt").write_text("1")
    subprocess.run(["git", "add", "a.txt"], cwd=tmp_path, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "a"], cwd=tmp_path, check=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert provenance.tree_commit(tmp_path) == head
    (tmp_path / "a.txt").write_text("2")
    assert provenance.tree_commit(tmp_path) == head + "-dirty"
    assert provenance.write_commit_file(tmp_path).read_text() == head + "-dirty\n"
    (tmp_path / "a.txt").write_text("1")
    # a rewritten result file is an output, not code: the tree stays clean
    (tmp_path / ".gpu-wheels" / "COMMIT").unlink()  # git's view, not the carried one
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "r.json").write_text("{}")
    subprocess.run(["git", "add", "benchmarks"], cwd=tmp_path, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "r"], cwd=tmp_path, check=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    (results / "r.json").write_text('{"ratio": 2}')
    assert provenance.tree_commit(tmp_path) == head
    # the device copy: a carried id wins over whatever its .git says
    (tmp_path / ".gpu-wheels" / "COMMIT").write_text("2ecc595\n")
    assert provenance.tree_commit(tmp_path) == "2ecc595"
    monkeypatch.setenv("MOELAB_COMMIT", "73ae6bd")
    assert provenance.tree_commit(tmp_path) == "73ae6bd"
