"""Mini-batch neighbour sampling on a worker's local subgraph (no torch-sparse / pyg-lib needed)."""
from grappa.data.sampling.neighbor import NeighborSampler, SampledSubgraph, batches

__all__ = ["NeighborSampler", "SampledSubgraph", "batches"]
