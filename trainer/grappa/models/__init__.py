"""GNN models: GCN (global-degree normalisation), GraphSAGE (mean), GAT, GIN, any depth."""
from .gnn import GNN
from .graph import MessageGraph, build_message_graph

__all__ = ["GNN", "MessageGraph", "build_message_graph"]
