"""`python -m cluster.ablation CONFIG [overrides]`: an ablation as a Ray job (`ray job submit -- …`).

What `moelab ablate` runs, as a job entrypoint: the last output line is the report as one JSON object.
"""

from __future__ import annotations

import json
import sys

from cluster.ablation.documents import RecipeError
from shared.config import ConfigError, load_config


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    try:
        cfg = load_config(args[0], args[1:])
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    from cluster.ablation import run_ablation

    try:
        report = run_ablation(cfg)
    except RecipeError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(json.dumps({"ablation": report["name"], "verdicts": report["verdicts"], "files": report["files"],
                      "failed_runs": report["failed_runs"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
