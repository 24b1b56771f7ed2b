"""Vectorised uniform neighbour sampling on a worker's local subgraph.

Semantics:

* Messages flow src -> dst, so a node's neighbours are the sources of its in-edges.
* ``fanouts`` are given input layer first (DGL order): with ``[15, 10, 5]`` the seeds get 5
  in-neighbours, the nodes they reach get 10 each, and the nodes reached from those get 15.
* Every node is expanded at most once, at the earliest hop at which it is a frontier node, with
  that hop's fanout. The frontier of the next hop is the set of nodes first reached in this hop.
  This is what PyG's ``NeighborLoader`` does with ``disjoint=False``: it keeps subgraphs small
  (no node is duplicated per hop) at the price of a node reached again later not receiving the
  later hop's fanout. Because each dst is expanded once and edges are drawn without replacement,
  the returned edges have distinct edge ids.
* `SampledSubgraph.blocks` gives one block per layer (models/block.py): layer l computes the
  nodes of hops 0 .. L-1-l from those of hops 0 .. L-l, so the last layer computes the seeds only.

Our own sampler rather than PyG's: PyG's compiled samplers need pyg-lib or torch-sparse, which
have no wheels for this torch, and this one reads the local graph's CSR as it is.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from grappa.data.blocks import Block


@dataclass
class SampledSubgraph:
    """A sampled L-hop subgraph, relabelled to ``0..len(n_id)-1``.

    ``n_id``: ids of the subgraph's nodes in the sampler's graph, seeds first (in the given
    order), then nodes in order of discovery (hop by hop).
    ``edge_index``: 2 x E_s local (src, dst) pairs; ``e_id``: the matching input edge ids.
    ``num_sampled_nbrs``: in-edges sampled per ``n_id`` node (0 where never expanded).
    ``num_sampled_nodes`` / ``num_sampled_edges``: per hop (seeds count as hop 0 nodes), for
    layer-wise trimming; ``None`` where a backend does not report them.
    """

    n_id: Tensor
    edge_index: Tensor
    e_id: Tensor
    batch_size: int
    num_sampled_nbrs: Tensor
    num_sampled_nodes: list[int] | None = None
    num_sampled_edges: list[int] | None = None

    def blocks(self, deg: Tensor) -> list[Block]:
        """One block per layer, input layer first; `deg` is the global in-degree of every n_id
        node. Edges sorted by dst make every block's edges a prefix of the next larger one."""
        hops = self.num_sampled_nodes
        layers = len(hops) - 1
        order = torch.argsort(self.edge_index[1], stable=True)
        src = self.edge_index[0].index_select(0, order).to(torch.int32)
        expanded = sum(hops[:layers])  # nodes of hops 0 .. L-1 have sampled in-edges
        counts = torch.bincount(self.edge_index[1], minlength=expanded)[:expanded]
        indptr = torch.zeros(expanded + 1, dtype=torch.int64)
        torch.cumsum(counts, 0, out=indptr[1:])
        out = []
        for layer in range(layers):
            num_dst = sum(hops[:layers - layer])
            num_src = num_dst + hops[layers - layer]
            e = int(indptr[num_dst])
            out.append(Block(indptr[:num_dst + 1], src[:e], num_src, deg[:num_src],
                             kept=self.num_sampled_nbrs[:num_dst]))
        return out


def _check_fanouts(fanouts: Sequence[int]) -> list[int]:
    out = [int(f) for f in fanouts]
    if not out:
        raise ValueError("fanouts must name at least one layer")
    if any(f < -1 for f in out):
        raise ValueError(f"fanouts must be >= 0 or -1 (all neighbours), got {out}")
    return out


def _check_graph(edge_index: Tensor, num_nodes: int) -> Tensor:
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"edge_index must be 2 x E, got shape {tuple(edge_index.shape)}")
    edge_index = edge_index.to(device="cpu", dtype=torch.int64)
    if edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        raise ValueError("edge_index refers to nodes outside 0..num_nodes-1")
    return edge_index


class NeighborSampler:
    """Uniform without-replacement L-hop in-neighbour sampler (pure PyTorch, CPU) on a CSR by
    destination: `indices[indptr[v]:indptr[v+1]]` are v's in-neighbours. It reads the local
    graph's arrays as they are (int32 sources), so sampling adds no per-edge memory."""

    def __init__(self, indptr: Tensor, indices: Tensor, fanouts: Sequence[int],
                 edge_ids: Tensor | None = None) -> None:
        self.fanouts = _check_fanouts(fanouts)
        self.indptr = indptr.to(torch.int64)
        self.indices = indices
        self.num_nodes = self.indptr.numel() - 1
        self._edge_ids = edge_ids  # slot -> caller's edge id (from_edge_index); None: the slot
        # The global -> local map is gathered/scattered at random; int32 halves its cache
        # footprint (~15% faster sampling). Its values stay below num_nodes + num_edges.
        small = self.num_nodes + indices.numel() < torch.iinfo(torch.int32).max
        self._loc_dtype = torch.int32 if small else torch.int64

    @classmethod
    def from_edge_index(cls, edge_index: Tensor, num_nodes: int, fanouts: Sequence[int]) -> "NeighborSampler":
        """For a [2, E] edge list (tests, small graphs): in-edges grouped by dst. A stable sort
        keeps input order inside each group, so sampling under a fixed generator does not depend
        on the sort implementation; `e_id` refers to the input columns."""
        fanouts = _check_fanouts(fanouts)
        src, dst = _check_graph(edge_index, int(num_nodes))
        dst_sorted, perm = torch.sort(dst, stable=True)
        indptr = torch.zeros(int(num_nodes) + 1, dtype=torch.int64)
        torch.cumsum(torch.bincount(dst_sorted, minlength=int(num_nodes)), 0, out=indptr[1:])
        return cls(indptr, src.index_select(0, perm), fanouts, edge_ids=perm)

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    def in_degree(self, nodes: Tensor) -> Tensor:
        """In-degree of ``nodes``."""
        return self.indptr[nodes + 1] - self.indptr[nodes]

    def _ranges(self, frontier: Tensor) -> tuple[Tensor, Tensor]:
        """(first CSR slot, in-degree) of each frontier node."""
        # `index_select` rather than `t[idx]` throughout: several times faster for large random
        # gathers on CPU.
        start = self.indptr.index_select(0, frontier)
        return start, self.indptr.index_select(0, frontier + 1) - start

    def _sources(self, slots: Tensor) -> Tensor:
        return self.indices.index_select(0, slots).long()

    def _sample_slots(
        self, frontier: Tensor, fanout: int, generator: torch.Generator
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Pick CSC slots for each frontier node.

        Returns (row, slot, count): ``row`` indexes ``frontier`` for every picked slot, ``slot``
        is the CSC position, ``count`` the number picked per frontier node.
        """
        start, deg = self._ranges(frontier)
        if fanout < 0:
            full = torch.ones_like(deg, dtype=torch.bool)
        else:
            full = deg <= fanout
        count = deg if fanout < 0 else torch.clamp(deg, max=fanout)

        # Nodes with deg <= fanout keep every in-edge: expand their CSC ranges.
        f_rows = full.nonzero().squeeze(1)
        f_deg = deg.index_select(0, f_rows)
        n_full = int(f_deg.sum())
        rows_full = torch.repeat_interleave(f_rows, f_deg, output_size=n_full)
        # slot = start[row] + (position within the row's run) = position + (start - run start).
        shift = start.index_select(0, f_rows) - (torch.cumsum(f_deg, 0) - f_deg)
        slots_full = torch.arange(n_full)
        slots_full += torch.repeat_interleave(shift, f_deg, output_size=n_full)

        o_rows = (~full).nonzero().squeeze(1)
        if o_rows.numel() == 0:
            return rows_full, slots_full, count
        # Nodes with deg > fanout: Robert Floyd's subset algorithm, vectorised across nodes
        # (the Python loop runs over the fanout, never over nodes). For j = d-k .. d-1 draw
        # t ~ U{0..j}; keep t unless already chosen, else keep j. Every k-subset is equally
        # likely, and the work is O(k^2) per node whatever its degree, so hubs cost no more
        # than ordinary nodes (random-key sorting would cost O(deg log deg)).
        k = fanout
        o_deg = deg.index_select(0, o_rows)
        n = o_rows.numel()
        # float64 uniforms have 53 random bits, so floor(u * (j + 1)) is uniform on 0..j to
        # well below any measurable bias for realistic degrees.
        j = o_deg.unsqueeze(0) + torch.arange(-k, 0).unsqueeze(1)  # (k, n): j for step i
        u = torch.rand((k, n), dtype=torch.float64, generator=generator)
        draws = torch.minimum((u * (j + 1).to(torch.float64)).to(torch.int64), j)
        # Row-major (k, n) so that each step reads and writes contiguous rows.
        chosen = draws  # step i only rewrites row i, after reading rows < i
        for i in range(1, k):
            taken = (chosen[:i] == chosen[i]).any(0)
            chosen[i] = torch.where(taken, j[i], chosen[i])
        chosen = chosen.t()
        rows_over = o_rows.unsqueeze(1).expand(n, k).reshape(-1)
        slots_over = (start.index_select(0, o_rows).unsqueeze(1) + chosen).reshape(-1)
        return torch.cat([rows_full, rows_over]), torch.cat([slots_full, slots_over]), count

    def sample(self, seeds: Tensor, generator: torch.Generator) -> SampledSubgraph:
        """Sample the L-hop in-neighbourhood of ``seeds`` (distinct node ids)."""
        seeds = seeds.to(device="cpu", dtype=torch.int64).reshape(-1)
        b = seeds.numel()
        if b and (seeds.min() < 0 or seeds.max() >= self.num_nodes):
            raise ValueError("seeds refer to nodes outside 0..num_nodes-1")
        # Global -> local id map. A fresh dense buffer per call (4 bytes per node, <1 ms per
        # million nodes) keeps `sample` re-entrant, unlike a cached buffer reset after use.
        # "Unseen" is the dtype's max, larger than any local id, so that a scatter-`amin` of
        # candidate positions (below) leaves already assigned nodes untouched.
        ldt = self._loc_dtype
        loc = torch.full((self.num_nodes,), torch.iinfo(ldt).max, dtype=ldt)
        loc[seeds] = torch.arange(b, dtype=ldt)
        if not torch.equal(loc.index_select(0, seeds), torch.arange(b, dtype=ldt)):
            raise ValueError("seeds must be distinct")

        new_nodes: list[Tensor] = [seeds]
        srcs: list[Tensor] = []
        dsts: list[Tensor] = []
        eids: list[Tensor] = []
        counts: list[Tensor] = []
        num_nodes_hop = [b]
        num_edges_hop: list[int] = []
        frontier, frontier_first, n_cur = seeds, 0, b
        # Hops run seed-outward, so the fanouts (input layer first) are consumed in reverse.
        for fanout in reversed(self.fanouts):
            rows, slots, count = self._sample_slots(frontier, fanout, generator)
            counts.append(count)
            src = self._sources(slots)
            # Frontier nodes occupy the contiguous local ids frontier_first .. + len(frontier).
            dsts.append(rows + frontier_first)
            eids.append(slots if self._edge_ids is None else self._edge_ids.index_select(0, slots))
            # Discover new nodes without sorting: every unseen source receives the smallest
            # n_cur + position among its occurrences (scatter-amin is deterministic), so the
            # first occurrence of each is the one whose position matches. Seen nodes keep
            # their local id, which is < n_cur.
            pos = torch.arange(n_cur, n_cur + src.numel(), dtype=ldt)
            loc.scatter_reduce_(0, src, pos, reduce="amin")
            fresh = torch.masked_select(src, loc.index_select(0, src) == pos)
            loc.index_copy_(0, fresh, torch.arange(n_cur, n_cur + fresh.numel(), dtype=ldt))
            srcs.append(loc.index_select(0, src).to(torch.int64))
            new_nodes.append(fresh)
            num_nodes_hop.append(fresh.numel())
            num_edges_hop.append(src.numel())
            frontier, frontier_first, n_cur = fresh, n_cur, n_cur + fresh.numel()

        n_id = torch.cat(new_nodes)
        num_sampled_nbrs = torch.zeros(n_id.numel(), dtype=torch.int64)
        expanded = torch.cat(counts)  # hop h's frontier is exactly the h-th block of n_id
        num_sampled_nbrs[: expanded.numel()] = expanded
        return SampledSubgraph(
            n_id=n_id,
            edge_index=torch.stack([torch.cat(srcs), torch.cat(dsts)]),
            e_id=torch.cat(eids),
            batch_size=b,
            num_sampled_nbrs=num_sampled_nbrs,
            num_sampled_nodes=num_nodes_hop,
            num_sampled_edges=num_edges_hop,
        )


def batches(train_nodes: Tensor, batch_size: int, generator: torch.Generator) -> list[Tensor]:
    """Shuffle ``train_nodes`` and split them into seed batches (the last may be smaller)."""
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if train_nodes.numel() == 0:
        return []
    order = torch.randperm(train_nodes.numel(), generator=generator)
    return list(train_nodes.reshape(-1)[order].split(batch_size))
