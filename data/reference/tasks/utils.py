"""Metrics of the moelab offline tasks, in lm-eval's `process_results` form.

acc: the gold choice has the highest log-likelihood; acc_norm: the highest per character (the
harness's length normalisation); logprob: the gold choice's log-likelihood in nats, the continuous
score that still moves while accuracies sit at chance (DataDecide). shared/eval/tasks.py computes
the same three in the training loop; a test checks the two agree.
"""


def process_results(doc, results):
    lls = [ll for ll, _greedy in results]
    gold = int(doc["gold"])
    per_char = [ll / max(len(choice), 1) for ll, choice in zip(lls, doc["choices"], strict=True)]
    return {
        "acc": float(max(range(len(lls)), key=lls.__getitem__) == gold),
        "acc_norm": float(max(range(len(per_char)), key=per_char.__getitem__) == gold),
        "logprob": float(lls[gold]),
    }
