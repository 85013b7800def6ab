"""A hierarchical-softmax fastText model's top labels for one document, compiled, visiting only the
part of the tree that can hold them.

Given the cache slots of a document's tokens (each slot: the sum of a token's input rows, then how
many rows that is), the document's hidden vector is the slots' total divided by its row count; each
inner node of the Huffman tree gives p = sigmoid(node · h); a label's log-probability is the sum of
log(p + 1e-5) (right child) or log(1 - p + 1e-5) (left) along its path, as fastText's `std_log`
terms are. A depth-first search from the root, the better child first, stops descending where even
the best continuation (every further term at most log(1 + 1e-5)) cannot reach the k-th best label
found so far or fastText's floor log(1e-5), under which labels are not reported: the same labels and
sums as scoring every leaf, for a few dozen of the ~175 nodes of lid.176 on a typical document.
Ties go to the lower label index, as a stable sort of every leaf gives them.
`BagClassifier.log_probs` keeps the numpy statement of every label's sum (and the softmax-loss models).

Compiled with numba on first use and cached next to this file.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_TERM_MAX = math.log(1.0 + 1e-5)  # the largest value one term log(p + 1e-5) can take


@njit(cache=True, inline="always")
def _better(score, label, than_score, than_label):
    return score > than_score or (score == than_score and label < than_label)


@njit(cache=True)
def top_labels(sums, slots, inner, children, depth, k, floor):
    """(labels, log-probabilities) of the k most probable labels scoring at least `floor`, best first.

    `inner[i]` is inner node i's output row and `children[i]` its (left, right) children in
    fastText's numbering (a node below the label count is that label's leaf, node n + i is inner
    node i; the root is the last); `depth` is the tree's greatest depth. Empty when the document
    read no input row.
    """
    width = sums.shape[1] - 1
    total = np.zeros(width + 1)
    for s in slots:
        for j in range(width + 1):
            total[j] += sums[s, j]
    n = children.shape[0] + 1
    k = min(k, n)
    top_label = np.empty(k, np.int64)
    top_score = np.empty(k)
    found = 0
    if total[width] == 0:
        return top_label[:0], top_score[:0]
    h = total[:width] / total[width]
    slack = depth * _TERM_MAX
    stack_node = np.empty(2 * n, np.int64)
    stack_score = np.empty(2 * n)
    stack_node[0], stack_score[0], size = 2 * n - 2, 0.0, 1
    while size:
        size -= 1
        node, score = stack_node[size], stack_score[size]
        reach = score + slack
        if reach < floor or (found == k and reach < top_score[k - 1]):
            continue
        if node < n:  # a leaf: insert it among the best, kept sorted
            if found == k and not _better(score, node, top_score[k - 1], top_label[k - 1]):
                continue
            at = found if found < k else k - 1
            while at > 0 and _better(score, node, top_score[at - 1], top_label[at - 1]):
                top_score[at], top_label[at] = top_score[at - 1], top_label[at - 1]
                at -= 1
            top_score[at], top_label[at] = score, node
            found = min(found + 1, k)
            continue
        row = node - n
        x = 0.0
        for j in range(width):
            x += inner[row, j] * h[j]
        left = score + math.log(1.0 / (math.exp(x) + 1.0) + 1e-5)  # log(1 - p + 1e-5)
        right = score + math.log(1.0 / (math.exp(-x) + 1.0) + 1e-5)  # log(p + 1e-5)
        first, second = children[row, 0], children[row, 1]
        if left > right:  # the better child is popped first
            first, second, left, right = second, first, right, left
        stack_node[size], stack_score[size] = first, left
        stack_node[size + 1], stack_score[size + 1] = second, right
        size += 2
    keep = 0
    while keep < found and top_score[keep] >= floor:
        keep += 1
    return top_label[:keep], top_score[:keep]
