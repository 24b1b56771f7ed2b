"""Mini-batch neighbour sampling on a worker's local subgraph (no torch-sparse / pyg-lib needed)."""
from grappa.sampling.neighbor import (
    NeighborSampler,
    PygNeighborSampler,
    SampledSubgraph,
    batches,
    make_sampler,
    pyg_sampling_available,
)

__all__ = [
    "NeighborSampler",
    "PygNeighborSampler",
    "SampledSubgraph",
    "batches",
    "make_sampler",
    "pyg_sampling_available",
]
