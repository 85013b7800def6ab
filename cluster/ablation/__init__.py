"""Data ablations: the same proxy trained on K data recipes × S seeds and judged on the same evaluations.

arms → documents (held-out texts removed) → one tokenizer → each arm's shards and the budget check
(prepare.py) → arm × seed Ray tasks (runs.py) → paired comparisons and verdicts (report.py,
shared.stats) → report.json / .md / .png and the tracker (job.py). It lives in `cluster/` because it
drives two services (the data filter and the trainer), which never import each other.
"""

from cluster.ablation.job import run_ablation

__all__ = ["run_ablation"]
