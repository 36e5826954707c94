"""Graph -> fusion GNN inputs (numpy arrays, or a PyG ``Data`` for training) and labels.

Every ONNX node is a graph node (constant subgraphs included: a MatMul fed by a
weight transpose looks different from one fed by two activations), but only
*runtime* edges (see :func:`~lilou.fusion.partition.runtime_edges`) are
classified; ``edge_mask`` marks them. Features come from the ONNX graph alone:
the GNN never reads exporter metadata.

Node features: the op one-hot and scalars of :mod:`lilou.graph.features`, then
key attributes (kernel area, stride, depthwise), how many inputs are constants
(weights, folded subgraphs) or graph inputs, whether an output is a graph output,
fan-in and runtime fan-in/fan-out, the output/input size ratio and a coarse op
kind (anchor, reduce, pool, movement, view, elementwise, other), and the op's TVM
pattern (:mod:`lilou.fusion.tvm_replay`).
Edge features: log bytes, producer fan-out, tensor rank, the consumer input slot
(one-hot 0/1/2+), whether the tensor has the consumer's output shape, whether it
is a graph output, whether producer and consumer share another input (x *
sigmoid(x)), whether the consumer's other input is a constant, single reader /
single producer flags, the consumer's broadcast ratio and same-kind flag, whether the
dynamo exporter's names put both ends in one aten call (:mod:`lilou.fusion.export_names`;
value and node names, not metadata), and two backend priors computed from the graph
alone: whether a replay of eager's view semantics (:mod:`lilou.fusion.eager_replay`) and a replay of TVM's FuseOps
(:mod:`lilou.fusion.tvm_replay`, without TVM) put the edge inside one kernel. The
model can trust or correct them; it sees each only when it predicts for that
backend (:func:`with_backend_prior`). The exporter-name flag is eager's too: it says where an
aten call ends, which is what eager launches, not what a compiler fuses.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from lilou.fusion.eager_replay import replayed_eager_fused_edges
from lilou.fusion.export_names import edges_inside_one_call
from lilou.fusion.partition import Partition, fused_edge_labels, runtime_edges
from lilou.fusion.tvm_replay import (
    COMM_REDUCE,
    ELEMWISE,
    INJECTIVE,
    OPAQUE,
    OUT_EWISE_FUSABLE,
    replayed_fused_edges,
    tvm_pattern,
)
from lilou.fusion.backends import BACKENDS
from lilou.graph.costs import ELEMENTWISE_FLOPS, MOVEMENT_OPS, VIEW_OPS
from lilou.graph.dag import ModelGraph
from lilou.graph.features import NUM_EDGE_FEATURES, NUM_NODE_FEATURES, graph_arrays


#: Bumped when the features of a graph change: cached features on disk from another version are recomputed
#: (:mod:`lilou.fusion.dataset`), and a GNN checkpoint records the version it was trained on
#: (:meth:`lilou.fusion.gnn_predictor.FusionPredictor.load` warns when it is not this one).
FEATURE_VERSION = "8"  # 5: replay knows gelu forms and recurrent layers; LSTM/GRU/RNN costed; 6: exporter names;
# 7: the replay counts a select as a view, joins SDPA calls, keeps call boundaries; shape-only values are constant;
# 8: a reshape of strides no view can have copies, a same-type Cast is a view, TorchScript's activation forms

# Coarse op kinds, close to the operator patterns compilers fuse by (TVM's elementwise /
# injective / reduction / "anchor" whose output elementwise ops may join). They let the
# model generalise to an op it saw rarely from what it knows of its kind.
_KINDS: dict[str, str] = {
    **{op: "anchor" for op in ("Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum")},
    **{op: "reduce" for op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
                                "ReduceL1", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
                                "ArgMax", "ArgMin", "Softmax", "LogSoftmax", "LayerNormalization",
                                "GroupNormalization", "InstanceNormalization", "CumSum", "TopK")},
    **{op: "pool" for op in ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Resize")},
    **{op: "movement" for op in MOVEMENT_OPS},
    **{op: "view" for op in VIEW_OPS},
    **{op: "elementwise" for op in ELEMENTWISE_FLOPS},
    "BatchNormalization": "elementwise",
}
KINDS: tuple[str, ...] = ("anchor", "reduce", "pool", "movement", "view", "elementwise", "other")
#: TVM pattern one-hot columns; BROADCAST never occurs (Relax marks broadcasting adds elementwise).
TVM_PATTERN_COLUMNS: tuple[int | None, ...] = (None, ELEMWISE, INJECTIVE, COMM_REDUCE, OUT_EWISE_FUSABLE, OPAQUE)
#: The one-hot columns of each kind and pattern, built once rather than per node.
_KIND_ONE_HOT: dict[str, tuple[float, ...]] = {kind: tuple(float(kind == k) for k in KINDS) for kind in KINDS}
_PATTERN_ONE_HOT: dict[int | None, tuple[float, ...]] = {
    pattern: tuple(float(pattern == p) for p in TVM_PATTERN_COLUMNS) for pattern in TVM_PATTERN_COLUMNS}
_NO_PATTERN = (0.0,) * len(TVM_PATTERN_COLUMNS)
NUM_EXTRA_NODE_FEATURES = 10 + len(KINDS) + len(TVM_PATTERN_COLUMNS)
NUM_EXTRA_EDGE_FEATURES = 14
FUSION_NODE_FEATURES = NUM_NODE_FEATURES + NUM_EXTRA_NODE_FEATURES
FUSION_EDGE_FEATURES = NUM_EDGE_FEATURES + NUM_EXTRA_EDGE_FEATURES


def node_feature_groups() -> dict[str, list[int]]:
    """Node-feature columns by meaning, for ablations that zero one group at a time."""
    from lilou.graph.features import NUM_NODE_SCALARS, OP_VOCABULARY

    ops = len(OP_VOCABULARY)
    e = ops + NUM_NODE_SCALARS  # first column of the fusion-specific features below
    return {
        "op type one-hot": list(range(ops)),
        "costs (FLOPs, bytes, elements)": [ops, ops + 1, ops + 2, ops + 3],
        "output rank": [ops + 4],
        "constant / view flags": [ops + 5, ops + 6],
        "conv attributes (area, stride, depthwise)": [e, e + 1, e + 2],
        "graph I/O (constant inputs, graph inputs, output)": [e + 3, e + 4, e + 5],
        "fan-in / fan-out": [e + 6, e + 7, e + 8],
        "output/input size ratio": [e + 9],
        "op kind one-hot": list(range(e + 10, e + 10 + len(KINDS))),
        "TVM op pattern one-hot": list(range(e + 10 + len(KINDS), e + 10 + len(KINDS) + len(TVM_PATTERN_COLUMNS))),
    }


#: Edge columns of the backend priors (the last two): each is zeroed when predicting for another backend.
EAGER_PRIOR_COLUMN = FUSION_EDGE_FEATURES - 2
TVM_PRIOR_COLUMN = FUSION_EDGE_FEATURES - 1
PRIOR_COLUMNS: dict[str, int] = {"eager": EAGER_PRIOR_COLUMN, "tvm": TVM_PRIOR_COLUMN}
#: The exporter-name flag (:mod:`lilou.fusion.export_names`), just before the priors; eager's only.
EXPORT_NAME_COLUMN = FUSION_EDGE_FEATURES - 3
#: Every column that only one backend sees: zeroed when predicting for the others.
BACKEND_COLUMNS: dict[str, tuple[int, ...]] = {"eager": (EXPORT_NAME_COLUMN, EAGER_PRIOR_COLUMN),
                                               "tvm": (TVM_PRIOR_COLUMN,)}


def with_backend_prior(edge_attr, backend: str):
    """``edge_attr`` (numpy or torch) as the GNN sees it for ``backend``: only that backend's own columns."""
    out = edge_attr.clone() if hasattr(edge_attr, "clone") else edge_attr.copy()
    for other, columns in BACKEND_COLUMNS.items():
        if other != backend:
            out[:, list(columns)] = 0
    return out


def edge_feature_groups() -> dict[str, list[int]]:
    """Edge-feature columns that ablations zero (``model.edge_feature_mask``)."""
    return {"eager view replay flag": [EAGER_PRIOR_COLUMN], "TVM FuseOps replay flag": [TVM_PRIOR_COLUMN],
            "exporter names: one aten call": [EXPORT_NAME_COLUMN]}


def backend_index(backend: str) -> int:
    return BACKENDS.index(backend)


def op_kind(op: str) -> str:
    return _KINDS.get(op, "other")


@dataclass
class _GraphContext:
    """Per-graph lookups shared by the node and edge features, read from the DAG once (networkx's views cost a
    call per lookup)."""

    constant_tensors: set[str]     # initializers and outputs of constant nodes
    graph_inputs: set[str]
    graph_outputs: set[str]
    runtime_in: dict[str, int]     # runtime producers per node
    runtime_out: dict[str, int]    # runtime consumers per node
    data: dict[str, dict]          # node -> its attribute dict
    in_degree: dict[str, int]      # producers per node, constant ones included


def _context(graph: ModelGraph) -> _GraphContext:
    dag = graph.dag
    data = dict(dag.nodes(data=True))
    runtime = {n for n, d in data.items() if not d["constant"]}
    return _GraphContext(
        graph.constant_tensors(), {t.name for t in graph.inputs}, {t.name for t in graph.outputs},
        {n: len(runtime.intersection(dag.predecessors(n))) for n in runtime},
        {n: len(runtime.intersection(dag.successors(n))) for n in runtime},
        data, dict(dag.in_degree()))


def _ints(value) -> list[int]:
    """An INTS attribute; [] when absent, or when a (hostile) file gives the name another type."""
    if isinstance(value, list | tuple) and all(isinstance(v, int) for v in value):
        return list(value)
    return []


def _extra_node_features(name: str, ctx: _GraphContext) -> list[float]:
    data = ctx.data[name]
    attrs = data["attributes"]
    kernel = _ints(attrs.get("kernel_shape"))
    strides = _ints(attrs.get("strides"))
    area = math.prod(kernel) if kernel else 0
    inputs = [t for t in data["inputs"] if t is not None]
    channels = inputs[0].shape[1] if inputs and inputs[0].shape and len(inputs[0].shape) > 1 else 0
    depthwise = float(data["op"] == "Conv" and attrs.get("group", 1) > 1 and attrs.get("group", 1) == channels)
    constant_inputs = sum(1 for t in inputs if t.name in ctx.constant_tensors)
    from_inputs = sum(1 for t in inputs if t.name in ctx.graph_inputs)
    is_output = float(any(t.name in ctx.graph_outputs for t in data["outputs"]))
    kind = op_kind(data["op"])
    pattern = tvm_pattern(data["op"], attrs)
    out_elements = sum(t.elements or 0 for t in data["outputs"])
    in_elements = max((t.elements or 0 for t in inputs if t.name not in ctx.constant_tensors), default=0)
    return [math.log1p(area), float(max(strides, default=1)), depthwise, float(constant_inputs), float(from_inputs),
            is_output, float(ctx.in_degree[name]), float(ctx.runtime_in.get(name, 0)),
            float(ctx.runtime_out.get(name, 0)),
            math.log((out_elements + 1) / (in_elements + 1)),  # < 0 reduces, > 0 expands
            *_KIND_ONE_HOT[kind], *_PATTERN_ONE_HOT.get(pattern, _NO_PATTERN)]


def _extra_edge_features(u: str, v: str, e: dict, ctx: _GraphContext, one_call: bool, eager_prior: bool,
                         tvm_prior: bool) -> list[float]:
    """The extra features of edge ``u -> v`` whose attribute dict is ``e``."""
    producer, consumer = ctx.data[u], ctx.data[v]
    tensors, shape, constant = e["tensors"], e["shape"], ctx.constant_tensors
    slots = [i for i, t in enumerate(consumer["inputs"]) if t is not None and t.name in tensors]
    slot = min(slots, default=0)
    out_shape = consumer["outputs"][0].shape if consumer["outputs"] else None
    others = [t for t in consumer["inputs"] if t is not None and t.name not in tensors]
    if others:
        producer_inputs = {t.name for t in producer["inputs"] if t is not None}
        shares_input = any(t.name in producer_inputs and t.name not in constant for t in others)
        other_constant = any(t.name in constant for t in others)
    else:
        shares_input = other_constant = False
    tensor_elements = max(1, math.prod(shape)) if shape else 1
    out_elements = max(1, math.prod(out_shape)) if out_shape else 1
    return [float(slot == 0), float(slot == 1), float(slot >= 2),
            float(shape is not None and shape == out_shape),
            float(any(t in ctx.graph_outputs for t in tensors)),
            float(shares_input),                              # x * sigmoid(x): one aten call, one kernel
            float(other_constant),                            # e.g. a bias or weight beside the tensor
            float(ctx.runtime_out.get(u, 0) == 1),            # the producer's only reader
            float(ctx.runtime_in.get(v, 0) == 1),             # the consumer's only producer
            math.log(out_elements / tensor_elements),         # > 0: the consumer broadcasts this input
            float(op_kind(producer["op"]) == op_kind(consumer["op"])),
            float(one_call),                                  # EXPORT_NAME_COLUMN
            float(eager_prior),                               # keep last two: PRIOR_COLUMNS
            float(tvm_prior)]


@dataclass
class FusionArrays:
    """Numpy features of one graph for the fusion GNN (see module docstring)."""

    node_names: list[str]
    edge_names: list[tuple[str, str]]
    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray
    edge_mask: np.ndarray               # bool: runtime edges, the ones classified
    labels: dict[str, np.ndarray]       # backend -> 0/1 per edge (0 off the mask)


def fusion_arrays(graph: ModelGraph, labels: Mapping[str, Partition] | None = None) -> FusionArrays:
    """Features for ``graph``; with ``labels`` (backend -> oracle partition) the fused-edge labels too."""
    base = graph_arrays(graph)
    names = base.node_names
    ctx = _context(graph)
    extra = np.array([_extra_node_features(n, ctx) for n in names],
                     dtype=np.float32).reshape(len(names), NUM_EXTRA_NODE_FEATURES)
    edges = base.edge_names
    runtime = set(runtime_edges(graph))
    eager_prior, tvm_prior = replayed_eager_fused_edges(graph), replayed_fused_edges(graph)
    one_call = edges_inside_one_call(graph)
    edge_data = {(u, v): e for u, v, e in graph.dag.edges(data=True)}
    edge_extra = [_extra_edge_features(u, v, edge_data[u, v], ctx, (u, v) in one_call,
                                       eager_prior.get((u, v), False), tvm_prior.get((u, v), False))
                  for u, v in edges]
    edge_attr = np.concatenate([base.edge_attr, np.array(edge_extra, dtype=np.float32)
                                .reshape(len(edges), NUM_EXTRA_EDGE_FEATURES)], axis=1)
    mask = np.array([e in runtime for e in edges], dtype=bool)
    label_arrays = {}
    for backend, partition in (labels or {}).items():
        fused = fused_edge_labels(graph, partition)
        label_arrays[backend] = np.array([fused.get(e, False) for e in edges], dtype=np.float32)
    return FusionArrays(names, edges, np.concatenate([base.x, extra], axis=1), base.edge_index, edge_attr,
                        mask, label_arrays)


def fusion_data(graph: ModelGraph, labels: Mapping[str, Partition] | None = None):
    """The same features as a PyG ``Data`` (``y_<backend>`` for each label) for training."""
    import torch
    from torch_geometric.data import Data

    arrays = fusion_arrays(graph, labels)
    data = Data(x=torch.from_numpy(arrays.x), edge_index=torch.from_numpy(arrays.edge_index),
                edge_attr=torch.from_numpy(arrays.edge_attr), num_nodes=len(arrays.node_names))
    data.edge_mask = torch.from_numpy(arrays.edge_mask)
    data.node_names = arrays.node_names
    data.edge_names = arrays.edge_names
    for backend, y in arrays.labels.items():
        data[f"y_{backend}"] = torch.from_numpy(y)
    return data
