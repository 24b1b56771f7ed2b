"""The nodes a round's mini-batch steps can read: the L-hop in-neighbourhood of its seeds.

A sampled step reads the feature rows of its seeds and of the nodes its L hops of in-neighbours
reach (fanouts only choose among them), so over a round every row read lies in

    R_0 = seeds,   R_h = R_{h-1} ∪ { u : (u -> v) in the CSR, v in R_{h-1} },   read ⊆ R_L

on the CSR the sampler expands (a halo node's estimated in-edges included). A fetch ahead brings
the halo rows in R_L and no others (storage.haloRows: reachable): on a graph with few seeds a
worker's halo is mostly out of reach (Coauthor-Physics at P = 8, 3 layers: 13% of it).
"""
from __future__ import annotations

import numpy as np


def reachable(indptr: np.ndarray, indices: np.ndarray, seeds: np.ndarray, hops: int) -> np.ndarray:
    """Bool mask over the CSR's nodes (rows of `indptr`): R_hops of the module docstring."""
    indptr = np.asarray(indptr, dtype=np.int64)
    seen = np.zeros(indptr.size - 1, dtype=bool)
    frontier = np.unique(np.asarray(seeds, dtype=np.int64))
    seen[frontier] = True
    for _ in range(hops):
        if not frontier.size:
            break
        starts, ends = indptr[frontier], indptr[frontier + 1]
        counts = ends - starts
        # every in-edge slot of the frontier: starts repeated, plus 0..count-1 within each
        at = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        nxt = np.unique(np.asarray(indices[at], dtype=np.int64))
        frontier = nxt[~seen[nxt]]
        seen[frontier] = True
    return seen
