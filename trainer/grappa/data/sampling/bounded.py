"""Seed batches whose sampled subgraphs fit a memory budget (sampled evaluation).

A batch's input costs about `4 F (N + g E)` bytes: N sampled rows of width F, plus, for a model
that gathers a message row per edge in the input width (PyG's `SAGEConv` on an `edge_index`,
g = 1), E edges of them. Evaluation draws its neighbourhoods from the whole store, not a worker's
shard, so at a training batch size that can be far larger than a training step: 431 Physics seeds
sampled [15, 10, 5] reach 27,512 rows and 123,900 edges, 0.9 GB of rows and 4.2 GB of messages
at F = 8,415. A batch over the budget is split into `ceil(cost / budget)` parts, each sampled
again, until it fits or is one seed.
"""
from __future__ import annotations

import math
from typing import Callable, Iterator

from torch import Tensor

from grappa.data.sampling.neighbor import SampledSubgraph

EVAL_BATCH_BYTES = 1 << 30


def input_bytes(sub: SampledSubgraph, width: int, per_edge: bool) -> int:
    """The batch's input rows, plus one message row per edge when the model gathers them."""
    rows = sub.n_id.numel() + (sub.edge_index.shape[1] if per_edge else 0)
    return 4 * width * rows


def bounded_samples(seeds: Tensor, batch_size: int, sample: Callable[[Tensor], SampledSubgraph],
                    cost: Callable[[SampledSubgraph], int], budget: int = EVAL_BATCH_BYTES
                    ) -> Iterator[tuple[slice, SampledSubgraph]]:
    """(positions in `seeds`, their subgraph) covering `seeds` in order, at most `batch_size` a
    batch and each within `budget` unless it is a single seed."""
    todo = [slice(lo, min(lo + batch_size, seeds.numel())) for lo in range(0, seeds.numel(), batch_size)]
    while todo:
        part = todo.pop(0)
        sub = sample(seeds[part])
        n = part.stop - part.start
        over = cost(sub)
        if over <= budget or n == 1:
            yield part, sub
            continue
        k = min(n, math.ceil(over / budget))
        cuts = [part.start + (n * i) // k for i in range(k + 1)]
        todo[0:0] = [slice(a, b) for a, b in zip(cuts[:-1], cuts[1:])]
