"""R-MAT power-law graph (Chakrabarti et al. 2004) with a planted, learnable labelling, defined
so that any block can be generated alone: the graph never depends on block size, process count
or order, which lets the streaming prepare write 2^30-node graphs in bounded memory.

- Edges: 2^(scale+4) draws in units of `UNIT_PAIRS`, unit u seeded by (seed, u). At each of
  `scale` levels a draw picks a quadrant with probabilities (a, b, c, d): src bit = [c or d],
  dst bit = [b or d]. Ids are then relabelled by a seeded bijection (R-MAT puts the hubs at low
  ids). The store symmetrises, drops self-loops and duplicates.
- Latents: d = min(classes, 8) signed 16-bit integers per node from a keyed hash of its id.
- Features: x_v = N(0, I) noise + (z_v / 2^15) M, M ~ N(0, 1/d) of shape [d, f], the noise
  seeded per `NODE_UNIT` nodes.
- Labels: y_v = argmax_c (s_v W)_c with s_v = z_v + sum_{u -> v} z_u over the deduplicated
  in-edges and W = I (classes <= 8) or fixed integer directions. Integer sums make the label
  exact whatever order the edges are added in; only a node's own in-edges are needed, so the
  store labels a node where its in-edges are complete. A GNN that averages neighbours can learn
  it; an MLP sees only z_v.
- Split: 20% train, 20% val, 60% test by a keyed hash of the id.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from grappa.data.idhash import IdPermutation, hash64, hash_key
from grappa.data.sources.base import (
    SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL, EdgeBlock, EdgePart, GraphLabeller, GraphSource, NodeBlock
)

RMAT_PROBS = (0.57, 0.19, 0.19, 0.05)  # a, b, c, d (Graph500)
UNIT_PAIRS = 1 << 18                    # edge draws per independently seeded unit
NODE_UNIT = 1 << 12                     # nodes per independently seeded feature block
MAX_LATENT = 8
# Purposes of the seed, so no two uses of one seed draw correlated numbers.
_EDGES, _RELABEL, _FEATURES, _MIX, _LATENT, _SPLIT, _CLASSES = range(1, 8)


class Rmat:
    """The graph for (scale, features, classes, seed, split seed), piece by piece."""

    def __init__(self, scale: int, num_features: int, num_classes: int, seed: int, split_seed: int):
        self.scale, self.num_features, self.num_classes = scale, num_features, num_classes
        self.seed, self.split_seed = seed, split_seed
        self.num_nodes = 1 << scale
        self.num_pairs = 1 << (scale + 4)
        self.num_units = -(-self.num_pairs // UNIT_PAIRS)
        self.latent_dims = min(num_classes, MAX_LATENT)
        self._relabel = IdPermutation(self.num_nodes, seed, _RELABEL)
        mix = np.random.default_rng([seed, _MIX])
        self._mix = (mix.standard_normal((self.latent_dims, num_features))
                     / np.sqrt(self.latent_dims)).astype(np.float32)
        if num_classes <= MAX_LATENT:
            self._classes = np.eye(self.latent_dims, dtype=np.int64)
        else:  # fixed integer directions, so scores stay exact
            w = np.random.default_rng([seed, _CLASSES]).standard_normal((MAX_LATENT, num_classes))
            self._classes = np.rint(w / np.linalg.norm(w, axis=0) * 1024).astype(np.int64)

    def pairs(self, unit: int) -> tuple[np.ndarray, np.ndarray]:
        """The directed (src, dst) draws of one unit, relabelled, int64."""
        a, b, c, _ = RMAT_PROBS
        lo = unit * UNIT_PAIRS
        m = min(UNIT_PAIRS, self.num_pairs - lo)
        rng = np.random.default_rng([self.seed, _EDGES, unit])
        s = np.zeros(m, np.int32)  # scale <= 30; half the memory traffic of int64
        d = np.zeros(m, np.int32)
        r = np.empty(m, np.float32)
        s_bit, d_bit, tmp = (np.empty(m, bool) for _ in range(3))
        for _ in range(self.scale):
            rng.random(m, dtype=np.float32, out=r)
            np.greater_equal(r, np.float32(a + b), out=s_bit)        # quadrants c, d
            np.greater_equal(r, np.float32(a), out=d_bit)            # quadrants b, d: b, c, d
            np.logical_xor(d_bit, s_bit, out=d_bit)                  # ... minus c, d
            np.greater_equal(r, np.float32(a + b + c), out=tmp)
            np.logical_xor(d_bit, tmp, out=d_bit)                    # ... plus d
            s <<= 1
            s |= s_bit
            d <<= 1
            d |= d_bit
        return self._relabel(s), self._relabel(d)

    def features(self, node_unit: int) -> np.ndarray:
        """float32 rows of nodes [node_unit * NODE_UNIT, ...)."""
        lo = node_unit * NODE_UNIT
        ids = np.arange(lo, min(lo + NODE_UNIT, self.num_nodes))
        rng = np.random.default_rng([self.seed, _FEATURES, node_unit])
        x = rng.standard_normal((ids.size, self.num_features), dtype=np.float32)
        x += (self.latent(ids) / np.float32(1 << 15)).astype(np.float32) @ self._mix
        return x

    def latent(self, ids: np.ndarray) -> np.ndarray:
        """int64 [m, d] latents in [-2^15, 2^15), four per 64-bit hash."""
        out = np.empty((ids.size, self.latent_dims), dtype=np.int64)
        for word in range(-(-self.latent_dims // 4)):
            h = hash64(ids, hash_key(self.seed, _LATENT * 1000 + word))
            for j in range(4 * word, min(4 * word + 4, self.latent_dims)):
                out[:, j] = ((h >> np.uint64(16 * (j - 4 * word))) & np.uint64(0xFFFF)).astype(np.int64) - (1 << 15)
        return out

    def labels_from_sums(self, sums: np.ndarray) -> np.ndarray:
        """int64 labels from s_v = z_v + sum of in-neighbours' z (int64 [m, d])."""
        return np.argmax(sums @ self._classes, axis=1).astype(np.int64)

    def split(self, ids: np.ndarray) -> np.ndarray:
        u = hash64(ids, hash_key(self.split_seed, _SPLIT)) >> np.uint64(11)  # 53 uniform bits
        frac = u.astype(np.float64) / float(1 << 53)
        return np.where(frac < 0.2, SPLIT_TRAIN, np.where(frac < 0.4, SPLIT_VAL, SPLIT_TEST)).astype(np.uint8)


class RmatEdges(EdgePart):
    def __init__(self, graph: Rmat, units: range) -> None:
        self.graph, self.units = graph, units
        self.num_edges = sum(min(UNIT_PAIRS, graph.num_pairs - u * UNIT_PAIRS) for u in units)

    def blocks(self, block_edges: int) -> Iterator[EdgeBlock]:
        for u in self.units:
            src, dst = self.graph.pairs(u)
            yield EdgeBlock(src, dst, f"rmat unit {u}", u * UNIT_PAIRS)


class RmatLabeller(GraphLabeller):
    def __init__(self, graph: Rmat) -> None:
        self.graph = graph

    def labels(self, nodes: np.ndarray, indptr: np.ndarray, src: np.ndarray) -> np.ndarray:
        sums = self.graph.latent(nodes)
        if src.size:
            z = self.graph.latent(src)
            has = np.flatnonzero(indptr[1:] > indptr[:-1])
            sums[has] += np.add.reduceat(z, indptr[:-1][has], axis=0)
        return self.graph.labels_from_sums(sums)


class RmatSource(GraphSource):
    def __init__(self, scale: int, num_features: int, num_classes: int, seed: int, split_seed: int):
        self.graph = Rmat(scale, num_features, num_classes, seed, split_seed)
        self.name = f"rmat-{scale}"
        self.num_nodes = self.graph.num_nodes
        self.num_features = num_features
        self.num_edges = self.graph.num_pairs
        self.num_classes = num_classes
        self.add_inverse_edges = True
        self.labeller = RmatLabeller(self.graph)

    def edge_parts(self, parts: int) -> list[EdgePart]:
        units = self.graph.num_units
        bounds = np.linspace(0, units, min(parts, units) + 1).astype(int)
        return [RmatEdges(self.graph, range(lo, hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]

    def node_blocks(self, block_rows: int) -> Iterator[NodeBlock]:
        per_block = max(1, block_rows // NODE_UNIT)
        units = -(-self.num_nodes // NODE_UNIT)
        for first in range(0, units, per_block):
            last = min(first + per_block, units)
            x = np.concatenate([self.graph.features(u) for u in range(first, last)])
            lo = first * NODE_UNIT
            yield NodeBlock(lo, x, None, self.graph.split(np.arange(lo, lo + x.shape[0])))
