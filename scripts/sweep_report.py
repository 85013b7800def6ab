"""Rebuild a sweep's report (sweep.md, sweep.png) from its trial results, without training.

`moelab sweep lr` writes the same files at the end of a run; this is for a results folder whose
recipe has since changed (so rerunning the command would key new trials), or after a change to the
report itself.

    .venv/bin/python scripts/sweep_report.py runs/hparam-example/proxies-indep docs/hparam/width-sweep-muon
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.trainer.hparam.analysis import drift_table, lr_drift, optimal_lrs, sweep_table  # noqa: E402
from services.trainer.hparam.plots import plot_sweep  # noqa: E402
from services.trainer.hparam.sweep import TrialResult  # noqa: E402


def load_results(sweep_dir: Path) -> list[TrialResult]:
    fields = {f.name for f in dataclasses.fields(TrialResult)}
    paths = sorted((sweep_dir / "trials").glob("*.json"))
    if not paths:
        raise SystemExit(f"no trial results under {sweep_dir / 'trials'}")
    return [TrialResult(**{k: v for k, v in json.loads(p.read_text()).items() if k in fields}) for p in paths]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    results = load_results(Path(argv[0]))
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    text = sweep_table(results) + "\n\n" + drift_table(lr_drift(optimal_lrs(results))) + "\n"
    tmp = out / "sweep.md.tmp"
    tmp.write_text(text)
    tmp.replace(out / "sweep.md")
    plot_sweep(results, out / "sweep.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
