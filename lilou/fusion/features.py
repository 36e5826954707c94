"""Graph -> fusion GNN inputs (numpy arrays, or a PyG ``Data`` for training) and labels.

Every ONNX node is a graph node (constant subgraphs included: a MatMul fed by a
weight transpose looks different from one fed by two activations), but only
*runtime* edges (see :func:`~lilou.fusion.partition.runtime_edges`) are
classified; ``edge_mask`` marks them. Features come from the ONNX graph alone:
the GNN never reads exporter metadata.

Node features: the op one-hot and scalars of :mod:`lilou.graph.features`, then
key attributes (kernel area, stride, depthwise), how many inputs are weights
(initializers) or graph inputs, whether an output is a graph output, fan-in.
Edge features: log bytes, producer fan-out, tensor rank (from ``to_pyg``), the
consumer input slot (one-hot 0/1/2+), whether the tensor has the consumer's
output shape (no broadcast) and whether it is also a graph output.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from lilou.fusion.partition import Partition, fused_edge_labels, runtime_edges
from lilou.graph.dag import ModelGraph
from lilou.graph.features import NUM_EDGE_FEATURES, NUM_NODE_FEATURES, graph_arrays

BACKENDS: tuple[str, ...] = ("eager", "tvm")
NUM_EXTRA_NODE_FEATURES = 7
NUM_EXTRA_EDGE_FEATURES = 5
FUSION_NODE_FEATURES = NUM_NODE_FEATURES + NUM_EXTRA_NODE_FEATURES
FUSION_EDGE_FEATURES = NUM_EDGE_FEATURES + NUM_EXTRA_EDGE_FEATURES


def backend_index(backend: str) -> int:
    return BACKENDS.index(backend)


def _extra_node_features(graph: ModelGraph, name: str, produced: set[str], outputs: set[str]) -> list[float]:
    data = graph.dag.nodes[name]
    attrs = data["attributes"]
    kernel = attrs.get("kernel_shape") or []
    strides = attrs.get("strides") or []
    area = math.prod(kernel) if kernel else 0
    inputs = [t for t in data["inputs"] if t is not None]
    channels = inputs[0].shape[1] if inputs and inputs[0].shape and len(inputs[0].shape) > 1 else 0
    depthwise = float(data["op"] == "Conv" and attrs.get("group", 1) > 1 and attrs.get("group", 1) == channels)
    weights = sum(1 for t in inputs if t.name not in produced and t.name not in graph_input_names(graph))
    from_inputs = sum(1 for t in inputs if t.name in graph_input_names(graph))
    is_output = float(any(t.name in outputs for t in data["outputs"]))
    return [math.log1p(area), float(max(strides, default=1)), depthwise, float(weights), float(from_inputs),
            is_output, float(graph.dag.in_degree(name))]


def graph_input_names(graph: ModelGraph) -> set[str]:
    cached = getattr(graph, "_input_names", None)
    if cached is None:
        cached = {t.name for t in graph.inputs}
        graph._input_names = cached  # type: ignore[attr-defined]
    return cached


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
    dag = graph.dag
    produced = {t.name for n in names for t in dag.nodes[n]["outputs"]}
    outputs = {t.name for t in graph.outputs}
    extra = np.array([_extra_node_features(graph, n, produced, outputs) for n in names],
                     dtype=np.float32).reshape(len(names), NUM_EXTRA_NODE_FEATURES)
    edges = base.edge_names
    runtime = set(runtime_edges(graph))
    edge_extra = []
    for u, v in edges:
        e = dag.edges[u, v]
        consumer = dag.nodes[v]
        slots = [i for i, t in enumerate(consumer["inputs"]) if t is not None and t.name in e["tensors"]]
        slot = min(slots, default=0)
        out_shape = consumer["outputs"][0].shape if consumer["outputs"] else None
        edge_extra.append([float(slot == 0), float(slot == 1), float(slot >= 2),
                           float(e["shape"] is not None and e["shape"] == out_shape),
                           float(any(t in outputs for t in e["tensors"]))])
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
