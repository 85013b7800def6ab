"""The script that makes docs/tracker.md's screenshots runs end to end and writes every image."""

from __future__ import annotations

import os

import pytest


@pytest.mark.slow
def test_the_screenshot_script_writes_the_four_images(tmp_path):
    if not os.path.exists("/usr/bin/chromium"):
        pytest.skip("browser tests need Debian's chromium: apt-get install -y chromium")
    from scripts import tracker_screenshots

    assert tracker_screenshots.main(["--out", str(tmp_path)]) == 0
    for name in tracker_screenshots.SHOTS:
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, name
