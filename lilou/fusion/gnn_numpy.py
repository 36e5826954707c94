"""The fusion GNN's forward pass in numpy, from its safetensors weights.

``lilou infer`` and ``lilou fuse`` run the GNN once per call; importing torch and
PyTorch Geometric would cost seconds, more than the prediction itself. This
runtime mirrors :class:`lilou.fusion.gnn.FusionGNN` for the ``gine`` layer (the
shipped one) operation by operation; a test checks it against the torch model.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

_SQRT_2_OVER_PI = np.float32(np.sqrt(2.0 / np.pi))


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + np.float32(0.044715) * x * x * x)))


def _linear(w: Mapping[str, np.ndarray], prefix: str, x: np.ndarray) -> np.ndarray:
    return x @ w[f"{prefix}.weight"].T + w[f"{prefix}.bias"]


def _mlp(w: Mapping[str, np.ndarray], prefix: str, x: np.ndarray) -> np.ndarray:
    return _linear(w, f"{prefix}.2", _gelu(_linear(w, f"{prefix}.0", x)))


def _layer_norm(w: Mapping[str, np.ndarray], prefix: str, x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w[f"{prefix}.weight"] + w[f"{prefix}.bias"]


def _gine(w: Mapping[str, np.ndarray], prefix: str, h: np.ndarray, source: np.ndarray, target: np.ndarray,
          e: np.ndarray) -> np.ndarray:
    """PyG GINEConv: nn((1 + eps) h_i + sum_j relu(h_j + lin(e_ji)))."""
    messages = np.maximum(h[source] + _linear(w, f"{prefix}.lin", e), 0.0)
    aggregated = np.zeros_like(h)
    np.add.at(aggregated, target, messages)
    eps = float(w.get(f"{prefix}.eps", np.zeros(1)).reshape(-1)[0])
    return _mlp(w, f"{prefix}.nn", aggregated + (1.0 + eps) * h)


def edge_logits(weights: Mapping[str, np.ndarray], layers: int, x: np.ndarray, edge_index: np.ndarray,
                edge_attr: np.ndarray, backend: int) -> np.ndarray:
    """Edge logits of one graph for one backend (index into the backend embedding)."""
    w = weights
    backend_vector = w["backend.weight"][backend]
    h = _mlp(w, "node_in", x) + backend_vector
    e = _mlp(w, "edge_in", edge_attr)
    source, target = edge_index[0], edge_index[1]
    for i in range(layers):
        p = f"layers.{i}"
        down = _gine(w, f"{p}.forward_conv", h, source, target, e)
        up = _gine(w, f"{p}.backward_conv", h, target, source, e)
        h = _layer_norm(w, f"{p}.norm", h + _gelu(_linear(w, f"{p}.combine", np.concatenate([down, up], axis=1))))
    backend_rows = np.broadcast_to(backend_vector, (len(source), backend_vector.shape[0]))
    z = np.concatenate([h[source], h[target], e, backend_rows], axis=1)
    return _linear(w, "edge_head.2", _gelu(_linear(w, "edge_head.0", z)))[:, 0]
