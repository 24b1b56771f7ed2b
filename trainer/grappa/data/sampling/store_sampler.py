"""Neighbour sampling over the whole graph of a chunk store, for evaluation.

The same sampling as NeighborSampler (each node expanded once, uniform without replacement),
but node ids are global and a node's in-edges are read from its owner chunk's memory-mapped CSR:
only the frontier's rows and the picked slots, so no per-node table is held and a seed's
neighbourhood does not stop at a worker's halo. Discovered nodes are kept as a sorted set (a hop
adds its new nodes in ascending id), since a dense id map would cost 4 bytes per graph node.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from grappa.data.sampling.neighbor import NeighborSampler, SampledSubgraph, _check_fanouts
from grappa.data.store.chunk_store import ChunkStore


class StoreSampler(NeighborSampler):
    def __init__(self, store: ChunkStore, fanouts: Sequence[int]) -> None:
        self.fanouts = _check_fanouts(fanouts)
        self.store = store
        self.assignment = store.assignment
        self.num_nodes = int(store.manifest["num_nodes"])
        edges = [int(c["edges"]) for c in store.manifest["chunks"]]
        self._offset = np.concatenate([[0], np.cumsum(edges)]).astype(np.int64)  # global slot of chunk k

    def _ranges(self, frontier: Tensor) -> tuple[Tensor, Tensor]:
        ids = frontier.numpy()
        chunk = self.assignment.chunk_of(ids)
        start = np.empty(ids.size, dtype=np.int64)
        deg = np.empty(ids.size, dtype=np.int64)
        for k in np.flatnonzero(np.bincount(chunk, minlength=self.store.num_chunks)).tolist():
            sel = np.flatnonzero(chunk == k)
            m = self.store.chunk_maps(k)
            rows = np.searchsorted(m["nodes"], ids[sel])
            start[sel] = m["indptr"][rows] + self._offset[k]
            deg[sel] = m["indptr"][rows + 1] - m["indptr"][rows]
        return torch.from_numpy(start), torch.from_numpy(deg)

    def _sources(self, slots: Tensor) -> Tensor:
        s = slots.numpy()
        chunk = np.searchsorted(self._offset, s, side="right") - 1
        out = np.empty(s.size, dtype=np.int64)
        for k in np.flatnonzero(np.bincount(chunk, minlength=self.store.num_chunks)).tolist():
            sel = np.flatnonzero(chunk == k)
            out[sel] = self.store.chunk_maps(k)["indices"][s[sel] - self._offset[k]]
        return torch.from_numpy(out)

    def in_degree(self, nodes: Tensor) -> Tensor:
        return self._ranges(nodes.long())[1]

    def sample(self, seeds: Tensor, generator: torch.Generator) -> SampledSubgraph:
        """Sample the L-hop in-neighbourhood of ``seeds`` (distinct global ids); n_id is global."""
        seeds = seeds.to(dtype=torch.int64).reshape(-1)
        seen = torch.sort(seeds).values
        if seen.numel() and bool((seen[1:] == seen[:-1]).any()):
            raise ValueError("seeds must be distinct")
        new_nodes, srcs, dsts, eids, counts = [seeds], [], [], [], []
        hops, hop_edges = [seeds.numel()], []
        frontier, frontier_first, n_cur = seeds, 0, seeds.numel()
        for fanout in reversed(self.fanouts):
            rows, slots, count = self._sample_slots(frontier, fanout, generator)
            src = self._sources(slots)
            counts.append(count)
            dsts.append(rows + frontier_first)
            eids.append(slots)
            srcs.append(src)
            cand = torch.unique(src)
            fresh = cand[~torch.isin(cand, seen)]
            seen = torch.sort(torch.cat([seen, fresh])).values
            new_nodes.append(fresh)
            hops.append(fresh.numel())
            hop_edges.append(src.numel())
            frontier, frontier_first, n_cur = fresh, n_cur, n_cur + fresh.numel()
        n_id = torch.cat(new_nodes)
        order = torch.argsort(n_id)
        src_all = torch.cat(srcs)
        src_local = order.index_select(0, torch.searchsorted(n_id.index_select(0, order), src_all))
        num_sampled_nbrs = torch.zeros(n_id.numel(), dtype=torch.int64)
        expanded = torch.cat(counts)
        num_sampled_nbrs[:expanded.numel()] = expanded
        return SampledSubgraph(n_id=n_id, edge_index=torch.stack([src_local, torch.cat(dsts)]),
                               e_id=torch.cat(eids), batch_size=seeds.numel(),
                               num_sampled_nbrs=num_sampled_nbrs, num_sampled_nodes=hops,
                               num_sampled_edges=hop_edges)
