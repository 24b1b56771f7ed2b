"""Tests for the vectorised neighbour sampler (grappa.data.sampling)."""
from __future__ import annotations

import itertools
from collections import deque

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grappa.data.sampling import NeighborSampler, SampledSubgraph, batches


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_graph(num_nodes: int, num_edges: int, seed: int, simple: bool = True) -> torch.Tensor:
    g = gen(seed)
    ei = torch.randint(0, num_nodes, (2, num_edges), generator=g)
    if simple:  # drop parallel edges so that (src, dst) pairs identify edges
        key = torch.unique(ei[0] * num_nodes + ei[1])
        ei = torch.stack([key // num_nodes, key % num_nodes])
        ei = ei[:, torch.randperm(ei.size(1), generator=g)]  # unsorted input on purpose
    return ei


def in_distance(edge_index: torch.Tensor, num_nodes: int, seeds: torch.Tensor) -> list[float]:
    """Hops from each node to the nearest seed along edges src -> dst (reverse BFS)."""
    nbrs: list[list[int]] = [[] for _ in range(num_nodes)]
    for s, d in edge_index.t().tolist():
        nbrs[d].append(s)
    dist = [float("inf")] * num_nodes
    queue = deque(seeds.tolist())
    for s in queue:
        dist[s] = 0
    while queue:
        v = queue.popleft()
        for u in nbrs[v]:
            if dist[u] == float("inf"):
                dist[u] = dist[v] + 1
                queue.append(u)
    return dist


def check_invariants(
    out: SampledSubgraph,
    edge_index: torch.Tensor,
    num_nodes: int,
    seeds: torch.Tensor,
    fanouts: list[int],
) -> None:
    """Everything the sampler promises, checked against the input graph."""
    num_layers = len(fanouts)
    n = out.n_id.numel()
    assert out.batch_size == seeds.numel()
    assert torch.equal(out.n_id[: seeds.numel()], seeds), "seeds first, in order"
    assert torch.unique(out.n_id).numel() == n, "n_id has duplicates"
    assert out.edge_index.shape == (2, out.e_id.numel())
    assert torch.unique(out.e_id).numel() == out.e_id.numel(), "duplicate edges"
    if out.e_id.numel():
        assert out.edge_index.min() >= 0 and out.edge_index.max() < n
    # Relabelling: mapping local ids back through n_id gives exactly the input edges e_id.
    assert torch.equal(out.n_id[out.edge_index], edge_index[:, out.e_id]), "not real edges"

    # Hop blocks: block h of n_id holds the nodes first reached at hop h (seeds: h = 0).
    assert out.num_sampled_nodes is not None and out.num_sampled_edges is not None
    assert len(out.num_sampled_nodes) == num_layers + 1
    assert sum(out.num_sampled_nodes) == n and sum(out.num_sampled_edges) == out.e_id.numel()
    hop = torch.repeat_interleave(
        torch.arange(num_layers + 1), torch.tensor(out.num_sampled_nodes)
    )
    deg = torch.bincount(edge_index[1], minlength=num_nodes)[out.n_id]
    fanout_of_hop = torch.tensor(list(reversed(fanouts)) + [0])
    fan = fanout_of_hop[hop]
    expected = torch.where(fan < 0, deg, torch.minimum(deg, fan.clamp(min=0)))
    expected[hop == num_layers] = 0  # the outermost nodes are never expanded
    got = torch.bincount(out.edge_index[1], minlength=n)
    assert torch.equal(got, out.num_sampled_nbrs)
    assert torch.equal(got, expected), "not min(deg, fanout) in-edges per expanded node"
    # Edges of hop h point into block h and come from blocks <= h + 1.
    src_hop, dst_hop = hop[out.edge_index[0]], hop[out.edge_index[1]]
    assert bool((src_hop <= dst_hop + 1).all())
    edge_hop = torch.repeat_interleave(
        torch.arange(num_layers), torch.tensor(out.num_sampled_edges)
    )
    assert torch.equal(dst_hop, edge_hop)
    # Within L hops of a seed, and never closer than the hop it was discovered at allows.
    dist = in_distance(edge_index, num_nodes, seeds)
    for node, h in zip(out.n_id.tolist(), hop.tolist()):
        assert dist[node] <= h <= num_layers


# --- basic behaviour ---------------------------------------------------------------------


def test_invariants_on_random_graph() -> None:
    ei = random_graph(500, 4000, seed=0)
    fanouts = [4, 3, 2]
    sampler = NeighborSampler.from_edge_index(ei, 500, fanouts)
    seeds = torch.randperm(500, generator=gen(1))[:40]
    out = sampler.sample(seeds, gen(2))
    check_invariants(out, ei, 500, seeds, fanouts)
    assert out.e_id.numel() > 0


def test_multigraph_edges_are_distinct_by_id() -> None:
    # Parallel edges are distinct edges: they may both be sampled, but never twice each.
    ei = torch.tensor([[1, 1, 1, 2, 2], [0, 0, 0, 0, 1]])
    sampler = NeighborSampler.from_edge_index(ei, 3, [10, 2])
    out = sampler.sample(torch.tensor([0]), gen(0))
    check_invariants(out, ei, 3, torch.tensor([0]), [10, 2])


def test_determinism_by_generator_seed() -> None:
    ei = random_graph(300, 3000, seed=3)
    sampler = NeighborSampler.from_edge_index(ei, 300, [5, 5])
    seeds = torch.arange(0, 300, 7)
    a, b = sampler.sample(seeds, gen(42)), sampler.sample(seeds, gen(42))
    c = sampler.sample(seeds, gen(43))
    for field in ("n_id", "edge_index", "e_id", "num_sampled_nbrs"):
        assert torch.equal(getattr(a, field), getattr(b, field))
    assert not torch.equal(a.e_id, c.e_id)
    # The generator advances: consecutive draws from one generator differ.
    g = gen(7)
    assert not torch.equal(sampler.sample(seeds, g).e_id, sampler.sample(seeds, g).e_id)


def test_empty_neighbourhoods() -> None:
    # Node 0 has no in-edges; node 1's only in-neighbour (2) has none either.
    ei = torch.tensor([[2, 0], [1, 3]])
    sampler = NeighborSampler.from_edge_index(ei, 4, [3, 3])
    out = sampler.sample(torch.tensor([0]), gen(0))
    assert out.n_id.tolist() == [0] and out.e_id.numel() == 0
    assert out.num_sampled_nbrs.tolist() == [0]
    assert out.num_sampled_nodes == [1, 0, 0]
    out = sampler.sample(torch.tensor([1, 0]), gen(0))
    check_invariants(out, ei, 4, torch.tensor([1, 0]), [3, 3])
    assert out.n_id.tolist() == [1, 0, 2]
    # No seeds at all, and a graph without edges.
    empty = sampler.sample(torch.tensor([], dtype=torch.int64), gen(0))
    assert empty.n_id.numel() == 0 and empty.edge_index.shape == (2, 0)
    bare = NeighborSampler.from_edge_index(torch.empty((2, 0), dtype=torch.int64), 5, [2])
    assert bare.sample(torch.tensor([4, 2]), gen(0)).n_id.tolist() == [4, 2]


@pytest.mark.parametrize("fanouts", [[50, 50, 50], [-1, -1, -1]])
def test_large_fanout_returns_full_l_hop_neighbourhood(fanouts: list[int]) -> None:
    num_nodes = 200
    ei = random_graph(num_nodes, 500, seed=5)  # max in-degree well below 50
    assert int(torch.bincount(ei[1]).max()) < 50
    seeds = torch.tensor([3, 17, 101])
    out = NeighborSampler.from_edge_index(ei, num_nodes, fanouts).sample(seeds, gen(0))
    check_invariants(out, ei, num_nodes, seeds, fanouts)
    dist = torch.tensor(in_distance(ei, num_nodes, seeds))
    assert set(out.n_id.tolist()) == set(torch.nonzero(dist <= 3).squeeze(1).tolist())
    # Every in-edge of every node within L-1 hops, each exactly once.
    want = torch.nonzero(dist[ei[1]] <= 2).squeeze(1)
    assert torch.equal(torch.sort(out.e_id).values, want)


def test_zero_fanout_layer() -> None:
    ei = random_graph(50, 300, seed=9)
    seeds = torch.tensor([0, 1])
    out = NeighborSampler.from_edge_index(ei, 50, [3, 0]).sample(seeds, gen(0))
    check_invariants(out, ei, 50, seeds, [3, 0])
    assert out.n_id.tolist() == [0, 1] and out.e_id.numel() == 0


def test_rejects_bad_input() -> None:
    ei = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="distinct"):
        NeighborSampler.from_edge_index(ei, 3, [2]).sample(torch.tensor([1, 1]), gen(0))
    with pytest.raises(ValueError, match="outside"):
        NeighborSampler.from_edge_index(ei, 3, [2]).sample(torch.tensor([3]), gen(0))
    with pytest.raises(ValueError, match="outside"):
        NeighborSampler.from_edge_index(ei, 2, [2])
    with pytest.raises(ValueError, match="2 x E"):
        NeighborSampler.from_edge_index(torch.tensor([[0, 1], [1, 2], [2, 0]]), 3, [2])
    with pytest.raises(ValueError, match="fanouts"):
        NeighborSampler.from_edge_index(ei, 3, [])
    with pytest.raises(ValueError, match="fanouts"):
        NeighborSampler.from_edge_index(ei, 3, [-2])


# --- statistics ----------------------------------------------------------------------------


def chi2_sf(x: float, df: int) -> float:
    """Upper tail of the chi-square distribution (scipy-free)."""
    return float(torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64),
                                         torch.tensor(x / 2.0, dtype=torch.float64)))


def star_samples(trials: int, degree: int, fanout: int, seed: int) -> torch.Tensor:
    """(trials, fanout) local neighbour indices 0..degree-1 drawn for independent stars.

    One graph holds `trials` disjoint copies of a star whose centre has `degree` in-neighbours,
    and all centres are seeds of a single call: every copy is an independent draw.
    """
    block = degree + 1
    centres = torch.arange(trials) * block
    src = (centres.unsqueeze(1) + torch.arange(1, block)).reshape(-1)
    dst = centres.repeat_interleave(degree)
    sampler = NeighborSampler.from_edge_index(torch.stack([src, dst]), trials * block, [fanout])
    out = sampler.sample(centres, gen(seed))
    assert out.num_sampled_nbrs[:trials].eq(fanout).all()
    order = torch.argsort(out.edge_index[1], stable=True)
    nbr = out.n_id[out.edge_index[0, order]] - out.n_id[out.edge_index[1, order]] - 1
    return nbr.reshape(trials, fanout)


def test_uniform_without_replacement_statistics() -> None:
    trials, d, k = 20_000, 10, 3
    picks = star_samples(trials, d, k, seed=123)
    assert bool((picks >= 0).all() and (picks < d).all())
    assert bool((torch.sort(picks, 1).values.diff(dim=1) > 0).all()), "drew with replacement"

    # 1. Marginals: each neighbour is included with p = k / d. Counts of a fixed-size sample
    # are negatively correlated; with exchangeable covariance the Pearson statistic scaled by
    # (d - 1) / ((1 - p) d) is chi-square with d - 1 degrees of freedom.
    p = k / d
    counts = torch.bincount(picks.reshape(-1), minlength=d).double()
    expect = trials * p
    pearson = float(((counts - expect) ** 2 / expect).sum())
    assert chi2_sf(pearson * (d - 1) / ((1 - p) * d), d - 1) > 1e-4, counts

    # 2. Pair inclusion: P(i and j both drawn) = k (k - 1) / (d (d - 1)) for every pair
    # (with replacement, or a biased scheme, would shift these). Binomial z-scores,
    # Bonferroni over the 45 pairs: |z| < 4.9 is a per-pair p of ~1e-6.
    q = k * (k - 1) / (d * (d - 1))
    member = torch.zeros(trials, d)
    member.scatter_(1, picks, 1.0)
    pair = member.t() @ member
    iu = torch.triu_indices(d, d, 1)
    z = (pair[iu[0], iu[1]] - trials * q) / (trials * q * (1 - q)) ** 0.5
    assert float(z.abs().max()) < 4.9, z

    # 3. Full distribution: all C(10, 3) = 120 subsets equally likely (multinomial, exact).
    digits = d ** torch.arange(k - 1, -1, -1)  # a sorted subset as a base-d number
    subsets = torch.tensor(list(itertools.combinations(range(d), k))) @ digits
    codes = torch.sort(picks, 1).values @ digits
    freq = torch.bincount(codes, minlength=d**k)[subsets].double()
    assert freq.sum() == trials
    e = trials / len(subsets)
    assert chi2_sf(float(((freq - e) ** 2 / e).sum()), len(subsets) - 1) > 1e-4


def test_uniform_for_high_degree_node() -> None:
    # A hub: fanout much smaller than degree (the regime where sort-based samplers are slow).
    trials, d, k = 4_000, 200, 5
    picks = star_samples(trials, d, k, seed=7)
    assert bool((torch.sort(picks, 1).values.diff(dim=1) > 0).all())
    p = k / d
    counts = torch.bincount(picks.reshape(-1), minlength=d).double()
    pearson = float(((counts - trials * p) ** 2 / (trials * p)).sum())
    assert chi2_sf(pearson * (d - 1) / ((1 - p) * d), d - 1) > 1e-4


# --- property test -------------------------------------------------------------------------


@st.composite
def graphs_and_queries(draw: st.DrawFn) -> tuple[torch.Tensor, int, torch.Tensor, list[int], int]:
    num_nodes = draw(st.integers(1, 25))
    pairs = draw(st.lists(st.tuples(st.integers(0, num_nodes - 1), st.integers(0, num_nodes - 1)),
                          max_size=120))
    ei = torch.tensor(pairs, dtype=torch.int64).reshape(-1, 2).t().contiguous()
    seeds = draw(st.lists(st.integers(0, num_nodes - 1), min_size=1, max_size=num_nodes,
                          unique=True))
    fanouts = draw(st.lists(st.integers(-1, 6), min_size=1, max_size=3))
    return ei, num_nodes, torch.tensor(seeds), fanouts, draw(st.integers(0, 2**31))


@settings(max_examples=60, deadline=None)
@given(graphs_and_queries())
def test_property_random_small_graphs(
    case: tuple[torch.Tensor, int, torch.Tensor, list[int], int],
) -> None:
    ei, num_nodes, seeds, fanouts, seed = case
    out = NeighborSampler.from_edge_index(ei, num_nodes, fanouts).sample(seeds, gen(seed))
    check_invariants(out, ei, num_nodes, seeds, fanouts)


# --- helpers --------------------------------------------------------------


def test_batches_shuffle_and_split() -> None:
    nodes = torch.arange(100, 203)
    parts = batches(nodes, 25, gen(0))
    assert [p.numel() for p in parts] == [25, 25, 25, 25, 3]
    joined = torch.cat(parts)
    assert torch.equal(torch.sort(joined).values, nodes)
    assert not torch.equal(joined, nodes)  # shuffled (103! orders; identity is not a risk)
    assert all(torch.equal(a, b) for a, b in zip(parts, batches(nodes, 25, gen(0))))
    assert batches(torch.tensor([], dtype=torch.int64), 4, gen(0)) == []
    with pytest.raises(ValueError):
        batches(nodes, 0, gen(0))


def test_blocks_nest_hop_by_hop_and_hold_exactly_the_sampled_edges() -> None:
    ei = random_graph(300, 2400, seed=5)
    fanouts = [4, 3, 2]
    out = NeighborSampler.from_edge_index(ei, 300, fanouts).sample(torch.arange(0, 300, 17), gen(3))
    deg = torch.bincount(ei[1], minlength=300)[out.n_id]
    blocks = out.blocks(deg)
    assert len(blocks) == 3 and blocks[-1].num_dst == out.batch_size
    assert blocks[0].num_src == out.n_id.numel()
    for a, b in zip(blocks[:-1], blocks[1:]):
        assert a.num_dst == b.num_src
    for blk in blocks:
        assert int(blk.indices.max()) < blk.num_src and blk.kept.numel() == blk.num_dst
        assert torch.equal(blk.deg, deg[:blk.num_src])
        mine = out.edge_index[:, out.edge_index[1] < blk.num_dst]
        key = lambda e: torch.sort(e[0] * 300 + e[1]).values  # noqa: E731
        assert torch.equal(key(blk.to_edge_index()), key(mine))
        assert torch.equal(blk.local_in_degree(), blk.kept)  # every kept in-edge is in the block
