"""data/sampling/reach.py: the nodes a round's steps can read, against a plain breadth-first search."""
import numpy as np

from grappa.data.sampling.reach import reachable


def bfs(indptr, indices, seeds, hops):
    seen = set(int(s) for s in seeds)
    frontier = set(seen)
    for _ in range(hops):
        frontier = {int(u) for v in frontier for u in indices[indptr[v]:indptr[v + 1]]} - seen
        seen |= frontier
    return seen


def test_reachable_is_the_l_hop_in_neighbourhood_of_the_seeds():
    rng = np.random.default_rng(0)
    n = 300
    deg = rng.integers(0, 4, n)
    deg[rng.choice(n, 40, replace=False)] = 0  # rows with no in-edges (a cut halo's)
    indptr = np.r_[0, np.cumsum(deg)]
    indices = rng.integers(0, n, int(indptr[-1])).astype(np.int32)
    seeds = rng.choice(n, 5, replace=False)
    for hops in range(4):
        got = reachable(indptr, indices, np.r_[seeds, seeds[:2]], hops)  # repeated seeds
        assert set(np.flatnonzero(got).tolist()) == bfs(indptr, indices, seeds, hops), hops
    assert reachable(indptr, indices, np.array([], dtype=np.int64), 3).sum() == 0
