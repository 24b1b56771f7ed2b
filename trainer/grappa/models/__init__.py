"""Models: the built-in GNNs (GCN with global-degree normalisation, GraphSAGE (mean), GAT, GIN,
any depth; `gnn.py` and one module per layer, `ops.py` the CSR kernels), run on blocks
(data/blocks.py) and memory-lean (no edges x hidden tensor); their layer-wise pass over the chunk
store (`layerwise.py`); flat views of parameters and gradients (`params.py`); a link-prediction
model's pair decoder (`decoder.py`); and the self-describing model file (`model_file.py`).

May import: `grappa.config`, `grappa.util`, `grappa.data`.
"""
from grappa.models.gnn import GNN

__all__ = ["GNN"]
