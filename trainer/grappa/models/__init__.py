"""GNN models: GCN (global-degree normalisation), GraphSAGE (mean), GAT, GIN, any depth, on blocks."""
from grappa.models.block import Block, full_block
from grappa.models.gnn import GNN

__all__ = ["GNN", "Block", "full_block"]
