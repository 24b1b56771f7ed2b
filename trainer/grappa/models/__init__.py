"""GNN models: GCN (global-degree normalisation), GraphSAGE (mean), GAT, GIN, any depth, on blocks."""
from .block import Block, full_block
from .gnn import GNN

__all__ = ["GNN", "Block", "full_block"]
