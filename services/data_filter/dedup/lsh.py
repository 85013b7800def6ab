"""LSH candidate pairs per band, connected components, keep the first document of each cluster.

Distributed by band: each band's keys for all documents are grouped independently (one Ray task
per band, each reading only its own band column from the unit files), so no worker ever holds
more than one band of the whole corpus; the driver only sees candidate edges. Clusters are the
connected components of the candidate graph (union-find); the document with the smallest input
key (the first in input order) is kept, every other member is removed as `near_duplicate`.
"""

from __future__ import annotations

import numpy as np


def band_edges(band_keys: np.ndarray, doc_keys: np.ndarray) -> np.ndarray:
    """Edges (first doc of a bucket, other doc) for documents sharing a band key; shape (E, 2)."""
    if len(doc_keys) < 2:
        return np.zeros((0, 2), dtype=np.uint64)
    order = np.lexsort((doc_keys, band_keys))
    sb, sd = band_keys[order], doc_keys[order]
    starts = np.r_[True, sb[1:] != sb[:-1]]
    group = np.cumsum(starts) - 1
    first = sd[starts][group]
    dup = ~starts
    return np.stack([first[dup], sd[dup]], axis=1).astype(np.uint64)


def components(edges: np.ndarray) -> dict[int, int]:
    """Map every node on an edge to its component's smallest node."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    for a, b in edges.tolist():
        ra, rb = find(a), find(b)
        if ra != rb:
            lo, hi = (ra, rb) if ra < rb else (rb, ra)
            parent[hi] = lo
    return {x: find(x) for x in list(parent)}


def duplicates_from_edges(edges: np.ndarray) -> dict[int, int]:
    """removed doc key -> kept representative key."""
    roots = components(edges)
    return {x: r for x, r in roots.items() if x != r}


def read_band(paths: list[str], band: int) -> tuple[np.ndarray, np.ndarray]:
    import pyarrow.parquet as pq

    keys, bands = [], []
    for p in paths:
        t = pq.read_table(p, columns=["key", f"band_{band}"])
        keys.append(t.column("key").to_numpy())
        bands.append(t.column(f"band_{band}").to_numpy())
    if not keys:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    return np.concatenate(bands).astype(np.uint64), np.concatenate(keys).astype(np.uint64)


def edges_for_band(paths: list[str], band: int) -> np.ndarray:
    bk, dk = read_band(paths, band)
    return band_edges(bk, dk)


def find_duplicates(paths: list[str], bands: int, workers: int, cpus: float = 0.5) -> dict[int, int]:
    """Near-duplicate map over the unit files; one Ray task per band when workers > 0."""
    if workers <= 0:
        parts = [edges_for_band(paths, b) for b in range(bands)]
    else:
        import ray

        task = ray.remote(num_cpus=cpus)(edges_for_band)
        parts = ray.get([task.remote(paths, b) for b in range(bands)])
    edges = np.concatenate(parts) if parts else np.zeros((0, 2), np.uint64)
    return duplicates_from_edges(edges)
