"""Example PyG models, installed into an image built FROM the trainer image (examples/byom/Dockerfile).

A GrappaJob names the factory `my_models:transformer`; the model file records the package's
version (my-models 1.0.0), and loading it elsewhere asks for that version.
"""
import torch
import torch.nn.functional as F
from torch_geometric.nn import TransformerConv


class Transformer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, hidden_channels=64, heads=2, num_layers=2, dropout=0.5):
        super().__init__()
        self.num_layers, self.dropout = num_layers, dropout
        self.convs = torch.nn.ModuleList()
        width = in_channels
        for i in range(num_layers):
            last = i == num_layers - 1
            self.convs.append(TransformerConv(width, out_channels if last else hidden_channels // heads,
                                              heads=1 if last else heads))
            width = hidden_channels // heads * heads

    def inference_per_layer(self, layer, x, edge_index, batch_size):
        x = self.convs[layer](x, edge_index)[:batch_size]
        return x if layer == self.num_layers - 1 else F.relu(x)

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < self.num_layers - 1:
                x = F.dropout(F.relu(x), self.dropout, self.training)
        return x


def transformer(in_channels, out_channels, hidden_channels=64, heads=2, num_layers=2, dropout=0.5):
    return Transformer(in_channels, out_channels, hidden_channels, heads, num_layers, dropout)
