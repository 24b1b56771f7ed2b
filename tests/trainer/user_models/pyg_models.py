"""Users' PyG models for the custom-model tests: one module, as a user would put on the volume."""
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATv2Conv, GCNConv, GINConv, SAGEConv, TransformerConv

from grappa.models.global_norm import gcn_norm


def _conv(kind, a, b):
    if kind == "gcn":
        return GCNConv(a, b)
    if kind == "sage":
        return SAGEConv(a, b)
    if kind == "gatv2":
        return GATv2Conv(a, b, heads=1)
    if kind == "gin":
        return GINConv(torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.ReLU(), torch.nn.Linear(b, b)))
    if kind == "transformer":
        return TransformerConv(a, b, heads=1)
    raise ValueError(kind)


class Stack(torch.nn.Module):
    """conv - ReLU - dropout - ... - conv, with BasicGNN's inference_per_layer (layer-wise exact
    inference); `layered=False` hides it (k-hop inference)."""

    def __init__(self, in_channels, out_channels, conv="sage", hidden_channels=16, num_layers=2, dropout=0.0):
        super().__init__()
        self.num_layers, self.dropout = num_layers, dropout
        widths = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = torch.nn.ModuleList(_conv(conv, a, b) for a, b in zip(widths, widths[1:]))

    def inference_per_layer(self, layer, x, edge_index, batch_size):
        x = self.convs[layer](x, edge_index)[:batch_size]
        return x if layer == self.num_layers - 1 else F.relu(x)

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < self.num_layers - 1:
                x = F.dropout(F.relu(x), self.dropout, self.training)
        return x


class Opaque(Stack):
    """The same stack without inference_per_layer: exact inference on whole k-hop neighbourhoods."""
    inference_per_layer = None


def make_stack(in_channels, out_channels, conv="sage", hidden_channels=16, num_layers=2, dropout=0.0):
    return Stack(in_channels, out_channels, conv, hidden_channels, num_layers, dropout)


def make_opaque(in_channels, out_channels, conv="sage", hidden_channels=16, num_layers=2):
    return Opaque(in_channels, out_channels, conv, hidden_channels, num_layers)


class GlobalGCN(torch.nn.Module):
    """GCNConv with the whole graph's normalisation (grappa.models.global_norm)."""

    def __init__(self, in_channels, out_channels, hidden_channels=16, num_layers=2):
        super().__init__()
        widths = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = torch.nn.ModuleList(GCNConv(a, b, normalize=False) for a, b in zip(widths, widths[1:]))

    def forward(self, x, edge_index, global_degree):
        ei, w = gcn_norm(edge_index, global_degree)
        for i, conv in enumerate(self.convs):
            x = conv(x, ei, w)
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x


class FailsOnLargeGraphs(Stack):
    """Passes Grappa's check on a small graph, fails on the first real batch."""

    def forward(self, x, edge_index):
        if x.shape[0] > 100:
            raise ValueError(f"this model cannot take {x.shape[0]} rows")
        return super().forward(x, edge_index)


def make_failing(in_channels, out_channels):
    return FailsOnLargeGraphs(in_channels, out_channels)
