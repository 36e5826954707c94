"""Graph -> PyG ``Data`` for the fusion GNN: node/edge features and fused-edge labels.

Every ONNX node is a graph node (constant subgraphs included: a MatMul fed by a
weight transpose looks different from one fed by two activations), but only
*runtime* edges (see :func:`~lilou.fusion.partition.runtime_edges`) are
classified; ``edge_mask`` marks them. Features come from the ONNX graph alone:
the GNN never reads exporter metadata.

Node features: the op one-hot and scalars of :func:`lilou.graph.pyg.to_pyg`, then
key attributes (kernel area, stride, depthwise), how many inputs are weights
(initializers) or graph inputs, whether an output is a graph output, fan-in.
Edge features: log bytes, producer fan-out, tensor rank (from ``to_pyg``), the
consumer input slot (one-hot 0/1/2+), whether the tensor has the consumer's
output shape (no broadcast) and whether it is also a graph output.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch_geometric.data import Data

from lilou.fusion.partition import Partition, fused_edge_labels, runtime_edges
from lilou.graph.dag import ModelGraph
from lilou.graph.pyg import NUM_EDGE_FEATURES, NUM_NODE_FEATURES, to_pyg

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


def fusion_data(graph: ModelGraph, labels: Mapping[str, Partition] | None = None) -> Data:
    """Features for ``graph``; with ``labels`` (backend -> oracle partition) adds ``y_<backend>``."""
    base = to_pyg(graph)
    names: list[str] = base.node_names
    index = {n: i for i, n in enumerate(names)}
    dag = graph.dag
    produced = {t.name for n in names for t in dag.nodes[n]["outputs"]}
    outputs = {t.name for t in graph.outputs}
    extra = torch.tensor([_extra_node_features(graph, n, produced, outputs) for n in names],
                         dtype=torch.float32).reshape(len(names), NUM_EXTRA_NODE_FEATURES)
    x = torch.cat([base.x, extra], dim=1)

    edges = [(names[u], names[v]) for u, v in base.edge_index.t().tolist()]
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
    edge_attr = torch.cat([base.edge_attr, torch.tensor(edge_extra, dtype=torch.float32)
                           .reshape(len(edges), NUM_EXTRA_EDGE_FEATURES)], dim=1)
    data = Data(x=x, edge_index=base.edge_index, edge_attr=edge_attr, num_nodes=len(names))
    data.edge_mask = torch.tensor([e in runtime for e in edges], dtype=torch.bool)
    data.node_names = names
    data.edge_names = edges
    for backend, partition in (labels or {}).items():
        fused = fused_edge_labels(graph, partition)
        data[f"y_{backend}"] = torch.tensor([fused.get(e, False) for e in edges], dtype=torch.float32)
    assert all(index[u] < index[v] for u, v in edges)  # file order is topological
    return data
