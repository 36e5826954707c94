"""Per-node and per-edge feature arrays of a ModelGraph, in numpy (no torch import).

Node features: one-hot op type over :data:`OP_VOCABULARY` (unknown ops map to
the last slot, ``"other"``), then log-scaled FLOPs, bytes read, bytes written,
output elements, output rank, the constant-subgraph flag and the view-op flag.
Edge features: log-scaled tensor bytes, the producer's fan-out (how many nodes
read its outputs) and the tensor's rank. Node order is file order (a
topological order). :mod:`lilou.graph.pyg` wraps these arrays as a PyG ``Data``;
inference paths use them directly so a CLI call never pays torch's import time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lilou.graph.costs import VIEW_OPS
from lilou.graph.dag import ModelGraph

#: Op types with their own one-hot slot, roughly by frequency in vision and language models.
OP_VOCABULARY: tuple[str, ...] = (
    "Conv", "ConvTranspose", "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt",
    "Reciprocal", "Neg", "Exp", "Log", "Erf", "Tanh", "Relu", "Sigmoid", "Gelu", "HardSwish",
    "HardSigmoid", "Clip", "LeakyRelu", "Softmax", "LayerNormalization", "BatchNormalization",
    "InstanceNormalization", "GroupNormalization", "MaxPool", "AveragePool",
    "GlobalAveragePool", "ReduceMean", "ReduceSum", "ReduceMax", "Resize", "Concat", "Split",
    "Slice", "Gather", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand",
    "Cast", "CastLike", "Where", "Equal", "Shape", "Constant", "ConstantOfShape", "Range",
    "Pad", "Identity", "Einsum", "Trilu", "Tile", "Min", "Max",
    "other",
)
_OP_INDEX = {op: i for i, op in enumerate(OP_VOCABULARY)}
NUM_NODE_SCALARS = 7
NUM_NODE_FEATURES = len(OP_VOCABULARY) + NUM_NODE_SCALARS
NUM_EDGE_FEATURES = 3


def op_index(op: str) -> int:
    return _OP_INDEX.get(op, _OP_INDEX["other"])


def log1p(value: float) -> float:
    return math.log1p(max(0.0, float(value)))


def node_scalars(data: dict) -> list[float]:
    outputs = [t for t in data["outputs"] if t is not None]
    elements = sum(t.elements or 0 for t in outputs)
    rank = max((len(t.shape) for t in outputs if t.shape is not None), default=0)
    flops, bytes_read = feature_costs(data)
    return [
        log1p(flops), log1p(bytes_read), log1p(data["bytes_written"]), log1p(elements),
        float(rank), float(data["constant"]), float(data["op"] in VIEW_OPS),
    ]


#: Variadic elementwise ops, which the features count at one op per output element (:func:`feature_costs`).
_VARIADIC_OPS = frozenset({"Sum", "Max", "Min", "Mean"})


def feature_costs(data: dict) -> tuple[int, int]:
    """A node's FLOPs and bytes read as the shipped fusion GNN's features read them, which predate three cost fixes
    in :mod:`lilou.graph.costs` (kept so its inputs do not shift under it; a retrained model's feature version may
    drop them): a 1-D . 1-D MatMul was 0 FLOPs (now 2 K), a variadic Sum/Max/Min/Mean one op per output element
    whatever its inputs (now n - 1, a Mean's scale n), and an Expand or Tile read its int64 shape (repeats) too
    (now left out, as a Slice's starts are)."""
    op, flops, bytes_read = data["op"], data["flops"], data["bytes_read"]
    if op in _VARIADIC_OPS:
        flops = sum(t.elements or 0 for t in data["outputs"] if t is not None)
    elif op == "MatMul" and data["outputs"] and data["outputs"][0] is not None and data["outputs"][0].shape == ():
        flops = 0
    elif op in ("Expand", "Tile") and data["inputs"] and data["inputs"][0] is not None:
        bytes_read += sum(t.nbytes or 0 for t in data["inputs"][1:] if t is not None)
    return flops, bytes_read


@dataclass
class GraphArrays:
    node_names: list[str]
    edge_names: list[tuple[str, str]]
    x: np.ndarray           # (nodes, NUM_NODE_FEATURES) float32
    edge_index: np.ndarray  # (2, edges) int64, producer row 0, consumer row 1
    edge_attr: np.ndarray   # (edges, NUM_EDGE_FEATURES) float32


def graph_arrays(graph: ModelGraph) -> GraphArrays:
    names = graph.nodes_in_order()
    index = {name: i for i, name in enumerate(names)}
    x = np.zeros((len(names), NUM_NODE_FEATURES), dtype=np.float32)
    for i, name in enumerate(names):
        data = graph.dag.nodes[name]
        x[i, op_index(data["op"])] = 1.0
        x[i, len(OP_VOCABULARY):] = node_scalars(data)
    edges = list(graph.dag.edges(data=True))
    edge_index = np.array([[index[u] for u, _, _ in edges], [index[v] for _, v, _ in edges]],
                          dtype=np.int64).reshape(2, len(edges))
    edge_attr = np.array(
        [[log1p(e["bytes"]), float(graph.dag.out_degree(u)), float(len(e["shape"]) if e["shape"] else 0)]
         for u, _, e in edges], dtype=np.float32).reshape(len(edges), NUM_EDGE_FEATURES)
    return GraphArrays(names, [(u, v) for u, v, _ in edges], x, edge_index, edge_attr)
