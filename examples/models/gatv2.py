"""A GATv2 model in plain PyG, as a user writes it: `make_model` is the factory Grappa calls.

Train it with `--factory gatv2:make_model --code-path examples/models/gatv2.py` (README, "Bring
your own model"). It exposes its layers as PyG's BasicGNN does (`convs`, `num_layers`,
`inference_per_layer`), so `grappa predict` runs it exactly, one layer at a time.
"""
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATv2Conv


class GATv2(torch.nn.Module):
    def __init__(self, in_channels, out_channels, hidden_channels=64, heads=4, num_layers=2, dropout=0.5):
        super().__init__()
        self.num_layers, self.dropout = num_layers, dropout
        self.convs = torch.nn.ModuleList()
        width = in_channels
        for i in range(num_layers):
            last = i == num_layers - 1
            self.convs.append(GATv2Conv(width, out_channels if last else hidden_channels // heads,
                                        heads=1 if last else heads))
            width = hidden_channels // heads * heads

    def inference_per_layer(self, layer, x, edge_index, batch_size):
        x = self.convs[layer](x, edge_index)[:batch_size]
        return x if layer == self.num_layers - 1 else F.elu(x)

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, self.dropout, self.training)
            x = conv(x, edge_index)
            if i < self.num_layers - 1:
                x = F.elu(x)
        return x


def make_model(in_channels, out_channels, hidden_channels=64, heads=4, num_layers=2, dropout=0.5):
    return GATv2(in_channels, out_channels, hidden_channels, heads, num_layers, dropout)
