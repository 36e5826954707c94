"""ONNX model -> annotated DAG (networkx).

Nodes of the DiGraph are ONNX node names, with attributes:
``op``, ``domain``, ``attributes`` (plain Python values), ``inputs`` and
``outputs`` (lists of :class:`TensorInfo`, ``None`` for omitted optionals),
``flops``, ``bytes_read``, ``bytes_written``, ``constant`` (True when the node
only computes a constant or a shape and a runtime would fold it), ``order``
(position in the file, a valid topological order) and ``supported``.
An edge ``u -> v`` means v consumes a tensor u produces; its attributes are
``tensor`` (first such tensor), ``tensors`` (all), ``shape``, ``dtype`` and ``bytes``.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np
import onnx
from onnx import helper

from lilou.errors import LilouInputError
from lilou.graph.costs import SUPPORTED_OPS, CostInput, TensorInfo, node_cost
from lilou.graph.loading import load_onnx
from lilou.graph.shapes import apply_input_shapes, infer_shapes, runtime_inputs

# Ops whose output depends only on the *type or shape* of these input positions,
# so they are constant once shapes are static.
_METADATA_ONLY_INPUTS = {"Shape": {0}, "Size": {0}, "CastLike": {1}, "EyeLike": {0}}


@dataclass
class ModelGraph:
    """An ONNX model as an annotated DAG plus what the user should know about it."""

    name: str
    dag: nx.DiGraph
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    opset: int
    warnings: list[str] = field(default_factory=list)

    def nodes_in_order(self) -> list[str]:
        return sorted(self.dag.nodes, key=lambda n: self.dag.nodes[n]["order"])

    def runtime_nodes(self) -> list[str]:
        """Nodes a runtime executes (constant/shape subgraphs excluded), in file order."""
        return [n for n in self.nodes_in_order() if not self.dag.nodes[n]["constant"]]

    def constant_tensors(self) -> set[str]:
        """Initializers and outputs of constant subgraphs (weights, biases, folded shapes)."""
        data = self.dag.nodes
        produced = {t.name for n in data for t in data[n]["outputs"]}
        inputs = {t.name for t in self.inputs}
        constant = {t.name for n in data if data[n]["constant"] for t in data[n]["outputs"]}
        constant.update(t.name for n in data for t in data[n]["inputs"]
                        if t is not None and t.name not in produced and t.name not in inputs)
        return constant

    def totals(self) -> dict[str, int]:
        nodes = self.runtime_nodes()
        data = self.dag.nodes
        return {
            "nodes": len(nodes),
            "flops": sum(data[n]["flops"] for n in nodes),
            "bytes": sum(data[n]["bytes_read"] + data[n]["bytes_written"] for n in nodes),
        }

    @property
    def unsupported_ops(self) -> list[str]:
        return sorted({d["op"] for _, d in self.dag.nodes(data=True) if not d["supported"]})


def load_graph(path: str | os.PathLike[str], batch: int | None = None,
               shapes: Mapping[str, Sequence[int]] | None = None) -> ModelGraph:
    """Load an ONNX file, apply input-shape overrides, infer shapes and annotate every node."""
    model = load_onnx(path)
    name = os.path.splitext(os.path.basename(os.fspath(path)))[0]
    return build_graph(model, name=name, batch=batch, shapes=shapes)


def build_graph(model: onnx.ModelProto, name: str = "model", batch: int | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None) -> ModelGraph:
    apply_input_shapes(model, batch=batch, shapes=shapes)
    _check_structure(model)
    inferred = infer_shapes(model)
    tensors = _tensor_table(inferred)
    dag = _build_dag(inferred, tensors)
    _check_reshapes(dag)
    _mark_constant_subgraphs(dag, initializers={t.name for t in inferred.graph.initializer})
    warnings = _warnings(dag)
    return ModelGraph(
        name=name,
        dag=dag,
        inputs=[tensors[v.name] for v in runtime_inputs(inferred)],
        outputs=[tensors.get(v.name) or _unknown(v.name) for v in inferred.graph.output],
        opset=_default_opset(inferred),
        warnings=warnings,
    )


def _default_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _unknown(name: str) -> TensorInfo:
    return TensorInfo(name=name, shape=None, dtype="unknown", itemsize=0)


def _check_structure(model: onnx.ModelProto) -> None:
    """Dangling inputs and cycles are bad input; say which tensor or node."""
    graph = model.graph
    available = {v.name for v in graph.input} | {t.name for t in graph.initializer} | {""}
    available |= {t.values.name for t in graph.sparse_initializer}
    produced = {out for node in graph.node for out in node.output}
    for node in graph.node:
        for tensor in node.input:
            if tensor not in available and tensor not in produced:
                label = node.name or node.op_type
                raise LilouInputError(
                    f"node {label!r} ({node.op_type}) reads tensor {tensor!r}, which no node, input or initializer provides")
    for value in graph.output:
        if value.name not in available and value.name not in produced:
            raise LilouInputError(f"graph output {value.name!r} is produced by no node")
    _check_acyclic(graph)


def _check_acyclic(graph: onnx.GraphProto) -> None:
    names = unique_node_names(graph)
    producer = {out: name for name, node in zip(names, graph.node) for out in node.output if out}
    links = nx.DiGraph()
    links.add_nodes_from(names)
    links.add_edges_from((producer[t], name) for name, node in zip(names, graph.node)
                         for t in node.input if t in producer)
    if not nx.is_directed_acyclic_graph(links):
        cycle = nx.find_cycle(links)
        path = " -> ".join([u for u, _ in cycle] + [cycle[0][0]])
        raise LilouInputError(f"the graph has a cycle ({path}); an ONNX graph must be acyclic")


def _tensor_table(model: onnx.ModelProto) -> dict[str, TensorInfo]:
    table: dict[str, TensorInfo] = {}
    graph = model.graph
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        info = _tensor_info_from_value(value)
        known = table.get(value.name)
        if info is not None and (known is None or known.shape is None):  # never forget a known shape
            table[value.name] = info
    for tensor in graph.initializer:
        table[tensor.name] = _make_info(tensor.name, tuple(int(d) for d in tensor.dims), tensor.data_type)
    for node in graph.node:  # Constant nodes carry their value's shape in an attribute
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                    table[node.output[0]] = _make_info(node.output[0], tuple(attr.t.dims), attr.t.data_type)
    return table


def _tensor_info_from_value(value: onnx.ValueInfoProto) -> TensorInfo | None:
    if not value.type.HasField("tensor_type"):
        return None
    tensor_type = value.type.tensor_type
    shape: tuple[int, ...] | None = None
    if tensor_type.HasField("shape"):
        dims = tensor_type.shape.dim
        if all(d.HasField("dim_value") and d.dim_value >= 0 for d in dims):
            shape = tuple(int(d.dim_value) for d in dims)
    return _make_info(value.name, shape, tensor_type.elem_type)


def _make_info(name: str, shape: tuple[int, ...] | None, elem_type: int) -> TensorInfo:
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
        return TensorInfo(name=name, shape=shape, dtype=dtype.name, itemsize=dtype.itemsize)
    except (KeyError, TypeError, ValueError):
        return TensorInfo(name=name, shape=shape, dtype="unknown", itemsize=0)


def unique_node_names(graph: onnx.GraphProto) -> list[str]:
    """ONNX node names may be empty or repeated; make them unique and keep good ones as they are."""
    seen: set[str] = set()
    names: list[str] = []
    for index, node in enumerate(graph.node):
        base = node.name or f"{node.op_type}_{index}"
        candidate, suffix = base, 1
        while candidate in seen:
            candidate, suffix = f"{base}__{suffix}", suffix + 1
        seen.add(candidate)
        names.append(candidate)
    return names


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attr in node.attribute:
        if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            values[attr.name] = "<subgraph>"
        elif attr.type == onnx.AttributeProto.TENSOR:
            values[attr.name] = f"<tensor {list(attr.t.dims)}>"
        else:
            value = helper.get_attribute_value(attr)
            if isinstance(value, bytes):
                value = value.decode(errors="replace")
            elif isinstance(value, list):
                value = [v.decode(errors="replace") if isinstance(v, bytes) else v for v in value]
            values[attr.name] = value
    return values


def _build_dag(model: onnx.ModelProto, tensors: Mapping[str, TensorInfo]) -> nx.DiGraph:
    graph = model.graph
    dag = nx.DiGraph()
    producer: dict[str, str] = {}
    names = unique_node_names(graph)
    for order, (node, name) in enumerate(zip(graph.node, names)):
        inputs = [tensors.get(t) or _unknown(t) if t else None for t in node.input]
        outputs = [tensors.get(t) or _unknown(t) for t in node.output]
        attributes = _attributes(node)
        supported = node.domain in ("", "ai.onnx") and node.op_type in SUPPORTED_OPS
        cost = node_cost(CostInput(op=node.op_type, attributes=attributes, inputs=inputs, outputs=outputs))
        dag.add_node(name, op=node.op_type, domain=node.domain, attributes=attributes,
                     inputs=inputs, outputs=outputs, flops=cost.flops, bytes_read=cost.bytes_read,
                     bytes_written=cost.bytes_written, constant=False, order=order, supported=supported)
        for tensor in node.output:
            if tensor:
                producer[tensor] = name
    for name, node in zip(names, graph.node):
        for tensor in node.input:
            source = producer.get(tensor)
            if source is None:
                continue
            info = tensors.get(tensor) or _unknown(tensor)
            if dag.has_edge(source, name):
                edge = dag.edges[source, name]
                if tensor not in edge["tensors"]:
                    edge["tensors"].append(tensor)
                    edge["bytes"] += info.nbytes or 0
            else:
                dag.add_edge(source, name, tensor=tensor, tensors=[tensor], shape=info.shape,
                             dtype=info.dtype, bytes=info.nbytes or 0)
    return dag


def _check_reshapes(dag: nx.DiGraph) -> None:
    """A Reshape must keep the element count; ONNX shape inference does not check a
    constant target shape against its input, so a model exported with a fixed batch
    would otherwise be costed at a silently wrong size after --batch or --shape."""
    for name, data in dag.nodes(data=True):
        if data["op"] != "Reshape" or data["inputs"][0] is None:
            continue
        before, after = data["inputs"][0].elements, data["outputs"][0].elements
        if before is not None and after is not None and before != after:
            raise LilouInputError(
                f"Reshape {name!r} turns {data['inputs'][0].shape} into {data['outputs'][0].shape}: the model has "
                "fixed shapes baked in; re-export it with the batch and shapes you want")


def _mark_constant_subgraphs(dag: nx.DiGraph, initializers: set[str]) -> None:
    """A node is constant when every input it reads by value is a constant or initializer."""
    constant_tensors = set(initializers)
    for name in nx.topological_sort(dag):
        data = dag.nodes[name]
        metadata_only = _METADATA_ONLY_INPUTS.get(data["op"], set())
        value_inputs = [t for i, t in enumerate(data["inputs"]) if t is not None and i not in metadata_only]
        if all(t.name in constant_tensors for t in value_inputs):
            data["constant"] = True
            constant_tensors.update(t.name for t in data["outputs"])


def _warnings(dag: nx.DiGraph) -> list[str]:
    warnings = []
    unsupported = sorted({d["op"] for _, d in dag.nodes(data=True) if not d["supported"] and not d["constant"]})
    if unsupported:
        warnings.append(f"no cost formula for op(s) {', '.join(unsupported)}: counted as 0 FLOPs, bytes from tensor sizes")
    unknown = [n for n, d in dag.nodes(data=True)
               if not d["constant"] and any(t.shape is None for t in d["outputs"])]
    if unknown:
        shown = ", ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        warnings.append(f"{len(unknown)} node(s) have outputs of unknown shape ({shown}); their costs are incomplete")
    return warnings
