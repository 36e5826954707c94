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


def _scatter_rounds(index: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Rows of ``index`` split into rounds where no value repeats: round r holds each value's r-th row.

    Summing round by round adds each target's rows in row order, as ``np.add.at`` does (so the float32
    sums are bit for bit the same), with a few vectorised steps instead of its slow row-by-row loop.
    """
    rows = np.argsort(index, kind="stable")
    sorted_index = index[rows]
    starts = np.flatnonzero(np.r_[True, sorted_index[1:] != sorted_index[:-1]]) if len(rows) else rows
    rank = np.arange(len(rows)) - np.repeat(starts, np.diff(np.r_[starts, len(rows)]))
    rounds = []
    for r in range(int(rank.max(initial=-1)) + 1):
        selected = rows[rank == r]
        rounds.append((selected, index[selected]))
    return rounds


def _scatter_sum(values: np.ndarray, rounds: list[tuple[np.ndarray, np.ndarray]], size: int) -> np.ndarray:
    """``np.add.at(zeros, index, values)`` for the ``index`` that :func:`_scatter_rounds` split."""
    out = np.zeros((size, *values.shape[1:]), dtype=values.dtype)
    for rows, targets in rounds:
        out[targets] += values[rows]
    return out


def _gine(w: Mapping[str, np.ndarray], prefix: str, h: np.ndarray, source: np.ndarray,
          target_rounds: list[tuple[np.ndarray, np.ndarray]], e: np.ndarray) -> np.ndarray:
    """PyG GINEConv: nn((1 + eps) h_i + sum_j relu(h_j + lin(e_ji)))."""
    messages = np.maximum(h[source] + _linear(w, f"{prefix}.lin", e), 0.0)
    aggregated = _scatter_sum(messages, target_rounds, len(h))
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
    into_target, into_source = _scatter_rounds(target), _scatter_rounds(source)  # the same for every layer
    for i in range(layers):
        p = f"layers.{i}"
        down = _gine(w, f"{p}.forward_conv", h, source, into_target, e)
        up = _gine(w, f"{p}.backward_conv", h, target, into_source, e)
        h = _layer_norm(w, f"{p}.norm", h + _gelu(_linear(w, f"{p}.combine", np.concatenate([down, up], axis=1))))
    backend_rows = np.broadcast_to(backend_vector, (len(source), backend_vector.shape[0]))
    z = np.concatenate([h[source], h[target], e, backend_rows], axis=1)
    return _linear(w, "edge_head.2", _gelu(_linear(w, "edge_head.0", z)))[:, 0]
