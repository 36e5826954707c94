"""The fusion GNN: message passing over the ONNX DAG, one logit per edge (fused or not).

Messages flow both ways along every edge (producer -> consumer and back), since
whether a producer fuses depends on its consumers and vice versa. The backend is
a conditioning input: its embedding is added to every node's input, and it is
fed to the edge head, so one model serves every backend.

``conv`` picks the message-passing layer for ablations: ``gine`` (edge-aware GIN,
default), ``gat`` (attention with edge features), ``sage`` and ``gcn`` (both
ignore edge features in messages; the edge head still sees them).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv, GINEConv, SAGEConv

CONVS = ("gine", "gat", "sage", "gcn")


def _gelu() -> nn.Module:
    # The tanh form, so the numpy runtime (lilou.fusion.gnn_numpy) computes exactly the same function.
    return nn.GELU(approximate="tanh")


def _mlp(inp: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inp, hidden), _gelu(), nn.Linear(hidden, out))


class _BidirectionalLayer(nn.Module):
    def __init__(self, conv: str, hidden: int, edge_dim: int) -> None:
        super().__init__()
        self.conv = conv
        self.forward_conv = self._make(conv, hidden, edge_dim)
        self.backward_conv = self._make(conv, hidden, edge_dim)
        self.combine = nn.Linear(2 * hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    @staticmethod
    def _make(conv: str, hidden: int, edge_dim: int) -> nn.Module:
        if conv == "gine":
            return GINEConv(_mlp(hidden, hidden, hidden), edge_dim=edge_dim)
        if conv == "gat":
            return GATConv(hidden, hidden, heads=1, edge_dim=edge_dim, add_self_loops=False)
        if conv == "sage":
            return SAGEConv(hidden, hidden)
        if conv == "gcn":
            return GCNConv(hidden, hidden, add_self_loops=True, normalize=True)
        raise ValueError(f"unknown conv {conv!r}; choose one of {', '.join(CONVS)}")

    def _message(self, module: nn.Module, h: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        if self.conv in ("gine", "gat"):
            return module(h, edge_index, edge_attr)
        return module(h, edge_index)

    def forward(self, h: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        down = self._message(self.forward_conv, h, edge_index, edge_attr)
        up = self._message(self.backward_conv, h, edge_index.flip(0), edge_attr)
        combined = torch.nn.functional.gelu(self.combine(torch.cat([down, up], dim=-1)), approximate="tanh")
        return self.norm(h + combined)


class FusionGNN(nn.Module):
    def __init__(self, node_features: int, edge_features: int, num_backends: int = 2, hidden: int = 64,
                 layers: int = 4, conv: str = "gine", dropout: float = 0.0) -> None:
        super().__init__()
        self.node_in = _mlp(node_features, hidden, hidden)
        self.edge_in = _mlp(edge_features, hidden, hidden)
        self.backend = nn.Embedding(num_backends, hidden)
        self.layers = nn.ModuleList(_BidirectionalLayer(conv, hidden, hidden) for _ in range(layers))
        self.dropout = nn.Dropout(dropout)
        self.edge_head = nn.Sequential(nn.Linear(4 * hidden, hidden), _gelu(), nn.Linear(hidden, 1))

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, backend: Tensor, batch: Tensor) -> Tensor:
        """Edge logits. ``backend`` holds one backend index per graph, ``batch`` the graph of each node."""
        node_backend = self.backend(backend[batch])
        h = self.node_in(x) + node_backend
        e = self.edge_in(edge_attr)
        for layer in self.layers:
            h = self.dropout(layer(h, edge_index, e))
        src, dst = edge_index
        return self.edge_head(torch.cat([h[src], h[dst], e, node_backend[src]], dim=-1)).squeeze(-1)
