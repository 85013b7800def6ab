"""The layering the code is built on, enforced: an import never runs upward between top-level
folders, the services never import each other, and model code knows nothing of Ray or
torch.distributed.

Why a test: the rules were kept by hand, and one upward import (a GPU script reaching into
`benchmarks/`) had already slipped in. Every import counts, the ones inside functions too, since a
lazy import ties the folders together just the same.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Lower numbers sit lower: a folder may import its own level's code only from itself.
LAYER = {"shared": 0, "services": 1, "cluster": 2, "moelab": 3, "scripts": 3, "benchmarks": 4}
# Model code runs in any process layout; who launches and connects processes is the trainer's business.
MODEL_CODE = ("shared/model", "shared/kernels")
DISTRIBUTED = ("ray", "torch.distributed")


def _unit(parts: tuple[str, ...]) -> str:
    """The unit a module belongs to: its top-level folder, or `services/<name>` for a service."""
    return "/".join(parts[:2]) if parts[0] == "services" and len(parts) > 1 else parts[0]


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def violations(root: Path) -> list[str]:
    """Every import in the code folders under `root` that breaks a rule, as `path:line: why`."""
    found = []
    for top in LAYER:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root)
            src = _unit(rel.parts)
            model = rel.as_posix().startswith(MODEL_CODE)
            for line, module in _imports(path):
                where = f"{rel.as_posix()}:{line}: imports {module}"
                head = module.split(".")
                if model and any(module == d or module.startswith(d + ".") for d in DISTRIBUTED):
                    found.append(f"{where}, but model code knows nothing of Ray or torch.distributed")
                if head[0] not in LAYER:
                    continue
                dst = _unit(tuple(head))
                if dst == src:
                    continue
                if src.startswith("services/") and dst.startswith("services/"):
                    found.append(f"{where}: one service imports another")
                elif LAYER[head[0]] >= LAYER[rel.parts[0]] and head[0] != rel.parts[0]:
                    found.append(f"{where}: {head[0]}/ is not below {rel.parts[0]}/")
    return found


def test_the_code_keeps_the_import_rules():
    assert violations(ROOT) == []


def _plant(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(("rel", "text", "why"), [
    ("shared/config/x.py", "def f():\n    from services.trainer import loop\n", "services/ is not below shared/"),
    ("services/scorer/x.py", "import services.trainer.loop\n", "one service imports another"),
    ("scripts/x.py", "from benchmarks.gpu_common import median\n", "benchmarks/ is not below scripts/"),
    ("moelab/x.py", "from scripts import figure_provenance\n", "scripts/ is not below moelab/"),
    ("shared/model/x.py", "import torch.distributed as dist\n", "model code knows nothing of Ray"),
    ("shared/kernels/x.py", "def f():\n    import ray\n", "model code knows nothing of Ray"),
])
def test_a_planted_violation_is_found(tmp_path, rel, text, why):
    _plant(tmp_path, "benchmarks/ok.py", "from services.scorer import heads\nfrom cluster import pipeline\n")
    _plant(tmp_path, "services/scorer/ok.py", "from shared.config import load_config\nimport services.scorer.heads\n")
    assert violations(tmp_path) == []
    _plant(tmp_path, rel, text)
    found = violations(tmp_path)
    assert len(found) == 1 and rel in found[0] and why in found[0], found
