"""Evaluation's memory bounds: sampled batches split to a byte budget (data/sampling/bounded.py)
and exact inference's blocks narrowed for wide inputs (models/layerwise.edges_at)."""
from __future__ import annotations

import numpy as np
import torch

from grappa.config import ModelConfig
from grappa.data.sampling.bounded import bounded_samples, input_bytes
from grappa.data.sampling.store_sampler import StoreSampler
from grappa.data.store.chunk_store import ChunkStore
from grappa.models import GNN
from grappa.models.layerwise import DEFAULT_BLOCK_EDGES, StoreGraph, compute_chunk, edges_at
from inference_helpers import small_store


def test_edges_at_keeps_a_blocks_bytes_for_wide_inputs():
    assert edges_at(DEFAULT_BLOCK_EDGES, 64) == DEFAULT_BLOCK_EDGES
    assert edges_at(DEFAULT_BLOCK_EDGES, 128) == DEFAULT_BLOCK_EDGES
    assert edges_at(DEFAULT_BLOCK_EDGES, 8415) == 7974  # Coauthor-Physics
    assert edges_at(10, 10 ** 6) == 1


def test_sampled_batches_cover_the_seeds_in_order_within_the_budget(tmp_path):
    cfg = small_store(tmp_path, num_nodes=500, chunks=4, features=32)
    store = ChunkStore(cfg.store_path)
    sampler = StoreSampler(store, [5, 5])
    seeds = torch.randperm(500, generator=torch.Generator().manual_seed(1))[:300]
    gen = torch.Generator().manual_seed(2)
    unbounded = [input_bytes(sampler.sample(seeds[lo:lo + 100], gen), 32, True) for lo in (0, 100, 200)]
    budget = min(unbounded) // 3  # every full batch is over it
    parts, sampled = [], 0

    def sample(s):
        nonlocal sampled
        sampled += 1
        return sampler.sample(s, gen)
    for part, sub in bounded_samples(seeds, 100, sample, lambda sub: input_bytes(sub, 32, True), budget):
        parts.append(part)
        assert torch.equal(sub.n_id[:part.stop - part.start], seeds[part])  # seeds first, in order
        assert part.stop - part.start <= 100
        assert input_bytes(sub, 32, True) <= budget or part.stop - part.start == 1
    assert [p.start for p in parts] == sorted(p.start for p in parts)
    assert sum(p.stop - p.start for p in parts) == 300 and parts[0].start == 0 and parts[-1].stop == 300
    assert all(a.stop == b.start for a, b in zip(parts, parts[1:]))
    assert len(parts) > 3 and sampled > len(parts)  # split, and the over-budget samples were drawn again
    # without edges in the cost the same batches need fewer parts
    few = list(bounded_samples(seeds, 100, lambda s: sampler.sample(s, gen),
                               lambda sub: input_bytes(sub, 32, False), budget))
    assert len(few) < len(parts)


def test_a_batch_fitting_the_budget_is_sampled_once():
    calls = []

    class Sub:
        def __init__(self, s):
            calls.append(s.numel())
    seeds = torch.arange(10)
    out = list(bounded_samples(seeds, 4, Sub, lambda sub: 0, budget=1))
    assert [(p.start, p.stop) for p, _ in out] == [(0, 4), (4, 8), (8, 10)] and calls == [4, 4, 2]


class _Spy(GNN):
    """A built-in SAGE that records each exact-inference block's rows and edges."""
    seen: list[tuple[int, int, int]] = []

    def layer(self, i, h, block):
        _Spy.seen.append((i, h.shape[0], block.num_edges))
        return super().layer(i, h, block)


def test_exact_inference_blocks_shrink_with_the_input_width(tmp_path):
    cfg = small_store(tmp_path, num_nodes=400, chunks=2, features=1024)
    store = ChunkStore(cfg.store_path)
    g = StoreGraph(store)
    model = _Spy(ModelConfig(arch="sage", layers=2, hidden=16, dropout=0.0), 1024,
                 int(store.manifest["num_classes"]))
    model.eval()
    budget = 4000  # edges at width 128: 500 at width 1024
    chunk_edges = int(np.asarray(g.array(0, "indptr.npy"))[-1])
    assert chunk_edges > 2 * edges_at(budget, 1024)
    _Spy.seen.clear()
    compute_chunk(model, 0, g, g, 0, budget, lambda a, b, out: None)
    first = [s for s in _Spy.seen if s[0] == 0]
    assert len(first) >= chunk_edges // edges_at(budget, 1024)
    # each block holds at most the scaled edges (or one row), so its input rows stay bounded too
    assert all(e <= edges_at(budget, 1024) or r <= 1 + e for _, r, e in first)
    assert max(e for _, _, e in first) <= edges_at(budget, 1024) + int(np.diff(g.array(0, "indptr.npy")).max())
