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

import functools
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper

from lilou.errors import LilouInputError
from lilou.graph.costs import SUPPORTED_OPS, CostInput, NodeCost, TensorInfo, batchnorm_training, node_cost
from lilou.graph.folded_norms import exported_in_training_mode, restore_folded_batchnorms
from lilou.graph.loading import load_onnx
from lilou.graph.shapes import MAX_DIM, MAX_ELEMENTS, apply_input_shapes, infer_shapes, runtime_inputs

if TYPE_CHECKING:
    import networkx as nx

# Ops whose output depends only on the *type or shape* of these input positions,
# so they are constant once shapes are static.
_METADATA_ONLY_INPUTS = {"Shape": {0}, "Size": {0}, "CastLike": {1}, "EyeLike": {0}}

#: Ops that run subgraphs; their bodies are not nodes of the DAG.
CONTROL_FLOW_OPS = frozenset({"Loop", "If", "Scan"})
_WINDOW_OPS = frozenset({"Conv", "MaxPool", "AveragePool", "LpPool"})


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

    def same_structure(self, other: ModelGraph) -> bool:
        """Whether ``other`` has the same nodes, edges and constant subgraphs (the same file read at another
        batch size, say), so that kernel groups of one fit the other."""
        if self.dag.number_of_nodes() != other.dag.number_of_nodes() or set(self.dag.edges) != set(other.dag.edges):
            return False
        mine, theirs = self.dag.nodes, other.dag.nodes
        return all(n in theirs and mine[n]["constant"] == theirs[n]["constant"] for n in mine)

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
               shapes: Mapping[str, Sequence[int]] | None = None, restore_folded: bool = True) -> ModelGraph:
    """Load an ONNX file, apply input-shape overrides, infer shapes and annotate every node."""
    model = load_onnx(path)
    name = os.path.splitext(os.path.basename(os.fspath(path)))[0]
    return build_graph(model, name=name, batch=batch, shapes=shapes, restore_folded=restore_folded)


def build_graph(model: onnx.ModelProto, name: str = "model", batch: int | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None, restore_folded: bool = True) -> ModelGraph:
    """``restore_folded``: put back the batch norms an exporter folded into convolutions, as eager runs them
    (:mod:`lilou.graph.folded_norms`); the fusion dataset keeps the file's own nodes, which its labels name."""
    return annotate_graph(shape_model(model, batch=batch, shapes=shapes, restore_folded=restore_folded), name=name)


@dataclass
class ShapedModel:
    """An ONNX model with its input shapes set and every tensor's shape inferred: the stage before the DAG.

    ``tensors`` maps every tensor name to its :class:`TensorInfo`; ``notes`` are what inference had to say
    (shapes completed by constant folding ...); ``evaluated`` the sizes of the tensors constant folding
    computed. :mod:`lilou.graph.batch_series` derives other batch sizes' tables from two of these."""

    model: onnx.ModelProto
    tensors: dict[str, TensorInfo]
    notes: list[str]
    evaluated: dict[str, int] = field(default_factory=dict)


def shape_model(model: onnx.ModelProto, batch: int | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None, restore_folded: bool = True) -> ShapedModel:
    """Check the file, set its input shapes (in place) and infer every tensor's shape (``restore_folded``: see
    :func:`build_graph`)."""
    _check_opset(model)
    _check_initializers(model)
    apply_input_shapes(model, batch=batch, shapes=shapes)
    _check_structure(model)
    _check_ranges(model.graph)
    notes: list[str] = []
    restored = restore_folded_batchnorms(model) if restore_folded else []
    if restored:
        notes.append(f"{len(restored)} BatchNormalization(s) that the exporter folded into the node before them "
                     f"({_listed(restored)}) are restored as their own kernels, as eager PyTorch runs them "
                     "(export with optimize=False to keep them)")
    _sort_topologically(model)
    evaluated: dict[str, int] = {}
    inferred = infer_shapes(model, notes=notes, evaluated=evaluated)
    return ShapedModel(model=inferred, tensors=_tensor_table(inferred), notes=notes, evaluated=evaluated)


def annotate_graph(shaped: ShapedModel, name: str = "model") -> ModelGraph:
    """The annotated DAG of a shaped model (FLOPs and bytes per node), after the checks that need shapes."""
    inferred, tensors, notes = shaped.model, shaped.tensors, list(shaped.notes)
    _check_sizes(tensors)
    dag = _build_dag(inferred, tensors, notes)
    _check_reshapes(dag)
    _check_windows(dag)
    _check_splits(inferred.graph, tensors)
    _mark_constant_subgraphs(dag, initializers={t.name for t in inferred.graph.initializer})
    _mark_shape_only_values(dag, graph_outputs={v.name for v in inferred.graph.output})
    warnings = _warnings(dag) + notes
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


def _check_opset(model: onnx.ModelProto) -> None:
    """An opset this ONNX release does not know (a future or made-up one) cannot be read reliably."""
    newest = onnx.defs.onnx_opset_version()
    if model.ir_version > onnx.IR_VERSION:
        raise LilouInputError(f"the model has ONNX IR version {model.ir_version}, newer than this ONNX release "
                              f"reads (IR version {onnx.IR_VERSION} at most); re-export it with an older IR version")
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx") and not 1 <= entry.version <= newest:
            raise LilouInputError(f"the model imports ONNX opset {entry.version}, which does not exist in "
                                  f"this ONNX release (opsets 1 to {newest}); re-export it with opset <= {newest}")


def _check_initializers(model: onnx.ModelProto) -> None:
    """Initializer dims must be sane, and any shape the file states for them must agree (stale value_info)."""
    graph = model.graph
    dims = {}
    known_types = set(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}
    for tensor in graph.initializer:
        if tensor.data_type not in known_types:
            raise LilouInputError(f"initializer {tensor.name!r} has element type {tensor.data_type}, which is not an "
                                  "ONNX tensor type; re-export the model")
        if any(d < 0 for d in tensor.dims):
            raise LilouInputError(f"initializer {tensor.name!r} has negative dims {list(tensor.dims)}")
        if math.prod(tensor.dims) > MAX_ELEMENTS:
            raise LilouInputError(f"initializer {tensor.name!r} has dims {list(tensor.dims)}, "
                                  f"{math.prod(tensor.dims):.3g} elements: above Lilou's limit of 2^48 per tensor")
        dims[tensor.name] = tuple(tensor.dims)
        _check_raw_size(tensor)
    for value in (*graph.input, *graph.value_info, *graph.output):
        if value.name not in dims or not value.type.tensor_type.HasField("shape"):
            continue
        stated = value.type.tensor_type.shape.dim
        if not all(d.HasField("dim_value") for d in stated):
            continue
        shape = tuple(d.dim_value for d in stated)
        if shape != dims[value.name]:
            raise LilouInputError(f"the file states shape {list(shape)} for {value.name!r}, but its initializer has "
                                  f"shape {list(dims[value.name])} (stale value_info); re-export the model")


def _sort_topologically(model: onnx.ModelProto) -> None:
    """Put nodes in a valid topological order (files in the wild break that rule), keeping file order
    where it is already valid, so such a file gives the same answer as its sorted copy."""
    graph = model.graph
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    reads = [_node_reads(node) for node in graph.node]
    if all(producer.get(t, -1) <= i for i, names in enumerate(reads) for t in names):
        return  # already in order (nearly every file), a node reading its own output aside
    needs = [sorted({producer[t] for t in names if t in producer and producer[t] != i}) for i, names in enumerate(reads)]
    import heapq

    waiting = [len(deps) for deps in needs]
    users: list[list[int]] = [[] for _ in graph.node]
    for i, deps in enumerate(needs):
        for j in deps:
            users[j].append(i)
    ready = [i for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for user in users[i]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    if len(order) != len(graph.node):
        raise LilouInputError("the graph has a cycle through a subgraph's outer-scope inputs; "
                              "an ONNX graph must be acyclic")
    nodes = [graph.node[i] for i in order]
    copies = [onnx.NodeProto() for _ in nodes]
    for copy, node in zip(copies, nodes):
        copy.CopyFrom(node)
    graph.ClearField("node")
    graph.node.extend(copies)


def _node_reads(node: onnx.NodeProto) -> set[str]:
    """Tensors a node reads: its inputs and the outer-scope names its subgraphs use."""
    reads = {t for t in node.input if t}
    for attr in node.attribute:
        for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else
                    list(attr.graphs) if attr.type == onnx.AttributeProto.GRAPHS else []):
            local = {v.name for v in sub.input} | {t.name for t in sub.initializer}
            local |= {out for n in sub.node for out in n.output}
            inner = set().union(*(_node_reads(n) for n in sub.node)) if len(sub.node) else set()
            inner |= {v.name for v in sub.output}
            reads |= inner - local
    return reads


def _check_sizes(tensors: Mapping[str, TensorInfo]) -> None:
    for info in tensors.values():
        if info.shape is not None and math.prod(info.shape) > MAX_ELEMENTS:
            raise LilouInputError(f"tensor {info.name!r} would have shape {list(info.shape)}, "
                                  f"{math.prod(info.shape):.3g} elements: above Lilou's limit of 2^48 per tensor; "
                                  "the model or its shapes are not realistic")


def _ints(value: Any, rank: int, default: int) -> list[int]:
    return [int(v) for v in value] if isinstance(value, (list, tuple)) and value else [default] * rank


def _check_windows(dag: nx.DiGraph) -> None:
    """Conv and pooling geometry: a group, stride or dilation that makes no sense, or a window
    larger than its padded input (which ONNX shape inference turns into 0 or negative sizes)."""
    for name, data in dag.nodes(data=True):
        op = data["op"]
        if op not in _WINDOW_OPS and op != "ConvTranspose":
            continue
        attrs = data["attributes"]
        group = attrs.get("group", 1)
        if op in ("Conv", "ConvTranspose") and (not isinstance(group, int) or group < 1):
            raise LilouInputError(f"{op} {name!r} has group={group}; group must be a positive integer")
        inputs = data["inputs"]
        x = inputs[0] if inputs else None
        w = inputs[1] if len(inputs) > 1 and op in ("Conv", "ConvTranspose") else None
        if x is None or x.shape is None or len(x.shape) < 3:
            continue
        spatial = x.shape[2:]
        rank = len(spatial)
        for key in ("strides", "dilations"):
            values = _ints(attrs.get(key), rank, 1)
            if any(v < 1 or v > MAX_DIM for v in values):
                raise LilouInputError(f"{op} {name!r} has {key}={values}; each must be between 1 and 2^40")
        if op == "ConvTranspose":
            continue
        if w is not None and w.shape is not None and len(w.shape) == len(x.shape):
            if x.shape[1] != w.shape[1] * group:
                raise LilouInputError(f"{op} {name!r}: input has {x.shape[1]} channels but the weight "
                                      f"{list(w.shape)} with group={group} expects {w.shape[1] * group}")
            kernel = list(w.shape[2:])
        else:
            kernel = _ints(attrs.get("kernel_shape"), rank, 1)
        auto_pad = attrs.get("auto_pad", "NOTSET")
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            continue
        pads = _ints(attrs.get("pads"), 2 * rank, 0) if auto_pad == "NOTSET" else [0] * (2 * rank)
        dilations = _ints(attrs.get("dilations"), rank, 1)
        strides = _ints(attrs.get("strides"), rank, 1)
        # Pooling with ceil_mode rounds the window count up: a window larger than its input still gives one output
        # while it starts inside (HF EfficientNet's pooler: AvgPool2d(1280, ceil_mode=True) over 7x7).
        ceil_mode = op != "Conv" and attrs.get("ceil_mode", 0) == 1
        for axis in range(min(rank, len(kernel), len(dilations), len(strides))):
            extent = (kernel[axis] - 1) * dilations[axis] + 1
            padded = spatial[axis] + pads[axis] + pads[axis + rank] if len(pads) == 2 * rank else spatial[axis]
            if extent > padded and not (ceil_mode and padded - extent > -strides[axis]):
                raise LilouInputError(
                    f"{op} {name!r}: its window ({extent} with dilation {dilations[axis]}) is larger than its padded "
                    f"input ({padded}) on spatial axis {axis}, so it has no output; check the model's shapes")
        out = data["outputs"][0] if data["outputs"] else None
        if out is not None and out.shape is not None and any(d <= 0 for d in out.shape):
            raise LilouInputError(f"{op} {name!r} has an empty output {list(out.shape)}; check the model's shapes")


def _split_sizes(node: onnx.NodeProto, graph: onnx.GraphProto) -> list[int] | None:
    """A Split node's sizes, from its ``split`` attribute (opset < 13) or a constant second input."""
    for attr in node.attribute:
        if attr.name == "split" and attr.ints:
            return list(attr.ints)
    if len(node.input) < 2 or not node.input[1]:
        return None
    name = node.input[1]
    found = next((t for t in graph.initializer if t.name == name), None)
    if found is None:
        found = next((a.t for n in graph.node if n.op_type == "Constant" and list(n.output) == [name]
                      for a in n.attribute if a.name == "value"), None)
    if found is None or math.prod(found.dims) > 4096 or found.data_location == onnx.TensorProto.EXTERNAL:
        return None
    try:
        return [int(v) for v in onnx.numpy_helper.to_array(found).reshape(-1)]
    except (ValueError, TypeError):
        return None


def _check_ranges(graph: onnx.GraphProto) -> None:
    """A Range of constant bounds must have fewer than 2^63 elements: ONNX's shape inference wraps the count of
    ``Range(-5, 2^62, 0.5)`` to a shape of [0] and the model would be priced as empty."""
    from lilou.graph.shape_completion import range_length, small_constants

    scalars = small_constants(graph, 1, skip=frozenset(value.name for value in graph.input))
    for node in graph.node:
        if node.op_type != "Range" or len(node.input) < 3:
            continue
        bounds = [scalars.get(name) for name in node.input[:3]]
        if any(b is None or b.size != 1 for b in bounds):
            continue
        start, limit, delta = (float(b.reshape(-1)[0]) for b in bounds)
        count = range_length(start, limit, delta)
        if count is not None and count >= 2**63:
            raise LilouInputError(f"Range {node.name or node.output[0]!r} from {start:g} to {limit:g} by {delta:g} makes "
                                  f"{count:,} elements: a dimension of 2^63 or more cannot exist (ONNX dims are "
                                  "int64); the file is malformed")


def _check_splits(graph: onnx.GraphProto, tensors: Mapping[str, TensorInfo]) -> None:
    """Split sizes must be non-negative and add up to the split axis (ONNX shape inference accepts
    negative sizes that add up, and gives the other outputs sizes larger than the input)."""
    for node in graph.node:
        if node.op_type != "Split" or node.domain not in ("", "ai.onnx"):
            continue
        sizes = _split_sizes(node, graph)
        if sizes is None:
            continue
        label = f"Split {node.name or node.output[0]!r}"
        if any(size < 0 for size in sizes):
            raise LilouInputError(f"{label} has negative split sizes {sizes}; each must be 0 or more")
        x = tensors.get(node.input[0]) if node.input else None
        axis = next((int(a.i) for a in node.attribute if a.name == "axis"), 0)
        if x is not None and x.shape is not None and -len(x.shape) <= axis < len(x.shape):
            dim = x.shape[axis]
            if sum(sizes) != dim:
                raise LilouInputError(f"{label} splits axis {axis} of size {dim} into {sizes}, which add up to "
                                      f"{sum(sizes)}; the sizes must add up to the axis")


_PACKED_TYPES = frozenset(getattr(onnx.TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1")
                          if hasattr(onnx.TensorProto, n))


def _check_raw_size(tensor: onnx.TensorProto) -> None:
    """Inline raw bytes must hold exactly the elements the dims declare (a weight-stripped or external
    tensor has none, which is fine)."""
    if not tensor.raw_data or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return
    try:
        itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return
    if tensor.data_type in (onnx.TensorProto.STRING,) or itemsize == 0:
        return
    expected = math.prod(tensor.dims) * itemsize
    if tensor.data_type in _PACKED_TYPES:  # two 4-bit elements per byte
        expected = (math.prod(tensor.dims) + 1) // 2
    if len(tensor.raw_data) != expected:
        raise LilouInputError(f"initializer {tensor.name!r} holds {len(tensor.raw_data)} bytes but its dims "
                              f"{list(tensor.dims)} need {expected}; the file is damaged, re-export it")


def _check_arity(graph: onnx.GraphProto, opsets: Mapping[str, int], schemas: dict | None = None) -> None:
    """A node with fewer inputs than its operator requires (a Conv without its weight), or an attribute of
    another type than its operator declares (a FLOAT ``axis``), is bad input."""
    schemas = {} if schemas is None else schemas
    for index, node in enumerate(graph.node):
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        if domain not in opsets:
            continue
        schema = _schema(node.op_type, opsets[domain], domain, schemas)
        if schema is None:
            continue
        min_input, declared_types = schema
        given = len(node.input)
        while given and not node.input[given - 1]:
            given -= 1
        if given < min_input:
            label = node.name or f"{node.op_type}_{index}"
            raise LilouInputError(f"node {label!r} ({node.op_type}) has {given} input(s) but needs at least "
                                  f"{min_input}; the model is incomplete")
        for attribute in node.attribute:
            declared = declared_types.get(attribute.name)
            if declared is not None and declared[0] != attribute.type:
                label = node.name or f"{node.op_type}_{index}"
                given_type = onnx.AttributeProto.AttributeType.Name(attribute.type) if attribute.type in \
                    onnx.AttributeProto.AttributeType.values() else str(attribute.type)
                raise LilouInputError(f"attribute {attribute.name!r} of node {label!r} ({node.op_type}) is "
                                      f"{given_type}, but the operator declares {declared[1]}; the model is "
                                      "damaged, re-export it")
    for node in graph.node:  # Loop / If / Scan bodies
        for attribute in node.attribute:
            for subgraph in (attribute.g, *attribute.graphs) if attribute.type in (
                    onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) else ():
                _check_arity(subgraph, opsets, schemas)


def _schema(op_type: str, version: int, domain: str, schemas: dict) -> tuple[int, dict[str, tuple[int, str]]] | None:
    """The operator's fewest inputs and declared attribute types (number, name), or None where ONNX has no schema.

    Looked up once per distinct op in ``schemas`` (a model has thousands of nodes but a few dozen ops, and each
    lookup, and each read of ``OpSchema.attributes``, converts C++ data). The memo lives for one check only."""
    key = (op_type, version, domain)
    if key not in schemas:
        try:
            schema = onnx.defs.get_schema(op_type, version, domain)
            schemas[key] = (schema.min_input, {name: (int(attr.type), attr.type.name)
                                               for name, attr in schema.attributes.items()})
        except onnx.defs.SchemaError:
            schemas[key] = None
    return schemas[key]


def _check_structure(model: onnx.ModelProto) -> None:
    """Dangling inputs, tensors written twice and cycles are bad input; say which tensor or node."""
    graph = model.graph
    _check_text(graph)
    _check_kernel_shapes(graph)
    available = {v.name for v in graph.input} | {t.name for t in graph.initializer} | {""}
    available |= {t.values.name for t in graph.sparse_initializer}
    produced = {out for node in graph.node for out in node.output}
    writers: dict[str, str] = {}
    for index, node in enumerate(graph.node):
        label = node.name or f"{node.op_type}_{index}"
        for out in node.output:
            if not out:
                continue
            if out in writers:
                raise LilouInputError(f"tensor {out!r} is written by two nodes ({writers[out]!r} and {label!r}); "
                                      "in ONNX every tensor has exactly one producer")
            if out in available:
                raise LilouInputError(f"node {label!r} writes tensor {out!r}, which is already a graph input or "
                                      "initializer; in ONNX every tensor has exactly one producer")
            writers[out] = label
    for node in graph.node:
        for tensor in node.input:
            if tensor not in available and tensor not in produced:
                label = node.name or node.op_type
                raise LilouInputError(
                    f"node {label!r} ({node.op_type}) reads tensor {tensor!r}, which no node, input or initializer provides")
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    _check_arity(graph, opsets)
    if not graph.output:
        raise LilouInputError("the graph declares no outputs; an ONNX graph must have at least one")
    for value in graph.output:
        if value.name not in available and value.name not in produced:
            raise LilouInputError(f"graph output {value.name!r} is produced by no node")
    _check_acyclic(graph)


def _check_text(graph: onnx.GraphProto) -> None:
    """Names, op types and domains must be text: protobuf hands invalid UTF-8 over as bytes."""
    values = [*graph.input, *graph.output, *graph.value_info]
    names = [v.name for v in values] + [t.name for t in graph.initializer]
    for node in graph.node:
        names += [node.op_type, node.domain, node.name, *node.input, *node.output]
    bad = next((n for n in names if not isinstance(n, str)), None)
    if bad is not None:
        raise LilouInputError(f"the file holds a name that is not valid UTF-8 text ({bytes(bad)[:40]!r}); "
                              "the file is damaged, re-export it")


def _check_kernel_shapes(graph: onnx.GraphProto) -> None:
    """A kernel_shape of 0, negative or astronomical size is bad input, whatever the node's input shapes."""
    for index, node in enumerate(graph.node):
        for attr in node.attribute:
            if attr.name == "kernel_shape" and any(k < 1 or k > MAX_DIM for k in attr.ints):
                label = node.name or f"{node.op_type}_{index}"
                raise LilouInputError(f"{node.op_type} {label!r} has kernel_shape={list(attr.ints)}; each size must be "
                                      "between 1 and 2^40")


def _check_acyclic(graph: onnx.GraphProto) -> None:
    position = {out: index for index, node in enumerate(graph.node) for out in node.output if out}
    if all(position[t] < index for index, node in enumerate(graph.node) for t in node.input if t in position):
        return  # every tensor is read after the node that writes it (nearly every file): no cycle
    import networkx as nx

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
    return _graph_tensor_table(model.graph)


def _graph_tensor_table(graph: onnx.GraphProto) -> dict[str, TensorInfo]:
    table: dict[str, TensorInfo] = {}
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
        values = tuple(d.dim_value for d in dims)
        # An unset (symbolic) dim reads as 0: only then is each dim asked whether it holds a value.
        if min(values, default=0) >= 0 and (0 not in values or all(d.HasField("dim_value") for d in dims)):
            shape = values
    return _make_info(value.name, shape, tensor_type.elem_type)


def _make_info(name: str, shape: tuple[int, ...] | None, elem_type: int) -> TensorInfo:
    dtype, itemsize = _element_type(elem_type)
    return TensorInfo(name=name, shape=shape, dtype=dtype, itemsize=itemsize)


@functools.lru_cache(maxsize=64)
def _element_type(elem_type: int) -> tuple[str, int]:
    """(numpy dtype name, item size) of an ONNX element type, ("unknown", 0) for one numpy lacks; once per type
    (``np.dtype(...).name`` costs microseconds, and a model has thousands of tensors)."""
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
        return dtype.name, dtype.itemsize
    except (KeyError, TypeError, ValueError):
        return "unknown", 0


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
    if node.op_type == "BatchNormalization" and not values.get("training_mode") and exported_in_training_mode(node):
        values["training_mode"] = 1
    return values


def _small_int_constants(graph: onnx.GraphProto) -> dict[str, int]:
    """Scalar integer constants of a graph (initializers and Constant nodes), e.g. Loop trip counts."""
    values: dict[str, int] = {}
    tensors = [(t.name, t) for t in graph.initializer]
    tensors += [(n.output[0], a.t) for n in graph.node if n.op_type == "Constant" and n.output
                for a in n.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR]
    for name, tensor in tensors:
        if tensor.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and math.prod(tensor.dims) == 1 \
                and tensor.data_location != onnx.TensorProto.EXTERNAL:
            try:
                values[name] = int(onnx.numpy_helper.to_array(tensor).reshape(-1)[0])
            except (ValueError, TypeError):
                continue
    return values


def _subgraph_cost(graph: onnx.GraphProto, outer: Mapping[str, TensorInfo], constants: Mapping[str, int],
                   notes: list[str]) -> NodeCost:
    """Sum of the costs of a subgraph's nodes (control flow inside costed the same way)."""
    tensors = {**outer, **_graph_tensor_table(graph)}
    constants = {**constants, **_small_int_constants(graph)}
    flops = read = written = 0
    for node in graph.node:
        cost = _node_cost(node, tensors, constants, notes)
        flops, read, written = flops + cost.flops, read + cost.bytes_read, written + cost.bytes_written
    return NodeCost(flops=flops, bytes_read=read, bytes_written=written)


def _node_cost(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo], constants: Mapping[str, int],
               notes: list[str], attributes: Mapping[str, Any] | None = None,
               io: tuple[list[TensorInfo | None], list[TensorInfo]] | None = None) -> NodeCost:
    """FLOPs and bytes of one node (``attributes``: its :func:`_attributes`, ``io``: its :func:`_node_io`, when the
    caller has them)."""
    inputs, outputs = _node_io(node, tensors) if io is None else io
    attributes = _attributes(node) if attributes is None else attributes
    cost = node_cost(CostInput(op=node.op_type, attributes=attributes, inputs=inputs, outputs=outputs))
    if node.domain not in ("", "ai.onnx") or node.op_type not in ("Loop", "If", "Scan"):
        return cost
    graphs = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
    label = node.name or node.op_type
    if node.op_type == "If" and "then_branch" in graphs and "else_branch" in graphs:
        branches = [_subgraph_cost(graphs[b], tensors, constants, notes) for b in ("then_branch", "else_branch")]
        larger = max(branches, key=lambda c: (c.flops, c.bytes_read + c.bytes_written))
        notes.append(f"If {label!r} is costed as its larger branch (the condition is known only at run time)")
        return larger
    if node.op_type == "Loop" and "body" in graphs:
        body = _subgraph_cost(graphs["body"], tensors, constants, notes)
        trip = constants.get(node.input[0]) if node.input and node.input[0] else None
        if trip is None or trip < 0:
            notes.append(f"Loop {label!r} has no constant trip count: costed as one iteration of its body")
            trip = 1
        else:
            notes.append(f"Loop {label!r} is costed as its body times its trip count ({trip}), as one kernel")
        return NodeCost(flops=body.flops * trip, bytes_read=body.bytes_read * trip,
                        bytes_written=body.bytes_written * trip)
    if node.op_type == "Scan" and "body" in graphs:
        body = _subgraph_cost(graphs["body"], tensors, constants, notes)
        trip = _scan_length(node, inputs)
        if trip is None:
            notes.append(f"Scan {label!r} has no scan length known from its input shapes: costed as one iteration "
                         "of its body")
            trip = 1
        else:
            notes.append(f"Scan {label!r} is costed as its body times its scan length ({trip}), as one kernel")
        return NodeCost(flops=body.flops * trip, bytes_read=body.bytes_read * trip,
                        bytes_written=body.bytes_written * trip)
    return cost


def _scan_length(node: onnx.NodeProto, inputs: Sequence[TensorInfo | None]) -> int | None:
    """Iterations of a Scan (opset 9+): the length of its first scan input along its scan axis."""
    attrs = {a.name: a for a in node.attribute}
    count = int(attrs["num_scan_inputs"].i) if "num_scan_inputs" in attrs else 0
    if count < 1 or count > len(inputs):
        return None
    first = inputs[len(inputs) - count]
    axes = list(attrs["scan_input_axes"].ints) if "scan_input_axes" in attrs else []
    axis = int(axes[0]) if axes else 0
    if first is None or first.shape is None or not -len(first.shape) <= axis < len(first.shape):
        return None
    length = int(first.shape[axis])
    return length if length >= 0 else None


def _build_dag(model: onnx.ModelProto, tensors: Mapping[str, TensorInfo],
               notes: list[str] | None = None) -> nx.DiGraph:
    import networkx as nx  # here, not at the top: its import overlaps ONNX shape inference (lilou.api)

    graph = model.graph
    dag = nx.DiGraph()
    producer: dict[str, str] = {}
    names = unique_node_names(graph)
    constants = _small_int_constants(graph) if any(n.op_type in CONTROL_FLOW_OPS for n in graph.node) else {}
    notes = [] if notes is None else notes
    for order, (node, name) in enumerate(zip(graph.node, names)):
        io = _node_io(node, tensors)
        attributes = _attributes(node)
        supported = node.domain in ("", "ai.onnx") and node.op_type in SUPPORTED_OPS
        cost = _node_cost(node, tensors, constants, notes, attributes, io)
        dag.add_node(name, op=node.op_type, domain=node.domain, attributes=attributes,
                     inputs=io[0], outputs=io[1], flops=cost.flops, bytes_read=cost.bytes_read,
                     bytes_written=cost.bytes_written, constant=False, order=order, supported=supported)
        for tensor in node.output:
            if tensor:
                producer[tensor] = name
    dag.add_edges_from((source, name, edge) for (source, name), edge in _edges(graph, names, producer, tensors).items())
    return dag


def _node_io(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> tuple[list[TensorInfo | None],
                                                                                 list[TensorInfo]]:
    """A node's input infos (None for an omitted optional) and output infos."""
    return ([tensors.get(t) or _unknown(t) if t else None for t in node.input],
            [tensors.get(t) or _unknown(t) for t in node.output])


def _edges(graph: onnx.GraphProto, names: Sequence[str], producer: Mapping[str, str],
           tensors: Mapping[str, TensorInfo]) -> dict[tuple[str, str], dict[str, Any]]:
    """Edge attributes by (producer, reader), in the order the readers read them (built in a plain dict: asking
    networkx about each of thousands of edges costs more than the rest of the DAG)."""
    edges: dict[tuple[str, str], dict[str, Any]] = {}
    for name, node in zip(names, graph.node):
        for tensor in node.input:
            source = producer.get(tensor)
            if source is None:
                continue
            info = tensors.get(tensor) or _unknown(tensor)
            edge = edges.get((source, name))
            if edge is None:
                edges[source, name] = {"tensor": tensor, "tensors": [tensor], "shape": info.shape,
                                       "dtype": info.dtype, "bytes": info.nbytes or 0}
            elif tensor not in edge["tensors"]:
                edge["tensors"].append(tensor)
                edge["bytes"] += info.nbytes or 0
    return edges


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
    for name in _file_order(dag):
        data = dag.nodes[name]
        metadata_only = _METADATA_ONLY_INPUTS.get(data["op"], set())
        value_inputs = [t for i, t in enumerate(data["inputs"]) if t is not None and i not in metadata_only]
        if all(t.name in constant_tensors for t in value_inputs):
            data["constant"] = True
            constant_tensors.update(t.name for t in data["outputs"])


def _mark_shape_only_values(dag: nx.DiGraph, graph_outputs: set[str]) -> None:
    """A node whose values are read only for their shape (through ``Shape``/``Size``, possibly via other such
    nodes) computes nothing a runtime needs: it is marked constant, with ``shape_only``.

    The TorchScript exporter writes ``torch.broadcast_tensors`` (inside ``F.mse_loss``, for one) as
    ``ConstantOfShape`` + ``Add`` of the inputs, read only by the ``Shape`` that sizes the ``Expand`` after it;
    eager PyTorch computes broadcast shapes without touching the data, and every ONNX runtime drops such
    values. Before, each ``Add`` was priced as a kernel (a 2-kernel ``mse_loss`` exported as 8).
    """
    if not any(data["op"] in _METADATA_ONLY_INPUTS for _, data in dag.nodes(data=True)):
        return  # no node reads a value for its shape alone (most dynamo exports)
    for name in reversed(_file_order(dag)):
        data = dag.nodes[name]
        if data["constant"] or not data["outputs"] or any(t.name in graph_outputs for t in data["outputs"]):
            continue
        produced = {t.name for t in data["outputs"]}
        readers = list(dag.successors(name))
        if readers and all(dag.nodes[r].get("shape_only") or _reads_only_metadata(dag.nodes[r], produced)
                           for r in readers):
            data["constant"] = data["shape_only"] = True


def _file_order(dag: nx.DiGraph) -> list[str]:
    """The nodes in file order, a topological order of the DAG (:func:`_sort_topologically` made it one); cheaper
    than networkx's sort, and each marking pass gives the same marks in any topological order."""
    return sorted(dag.nodes, key=lambda name: dag.nodes[name]["order"])


def _reads_only_metadata(reader: dict, tensors: set[str]) -> bool:
    """Does this node read ``tensors`` only at inputs whose shape or type it uses, not their values?"""
    metadata_only = _METADATA_ONLY_INPUTS.get(reader["op"], set())
    return all(i in metadata_only for i, t in enumerate(reader["inputs"]) if t is not None and t.name in tensors)


def _listed(names: Sequence[str], limit: int = 5) -> str:
    return ", ".join(names[:limit]) + (" ..." if len(names) > limit else "")


def _warnings(dag: nx.DiGraph) -> list[str]:
    warnings = []
    unsupported = sorted({d["op"] for _, d in dag.nodes(data=True)
                          if not d["supported"] and not d["constant"] and d["op"] not in CONTROL_FLOW_OPS})
    if unsupported:
        warnings.append(f"no cost formula for op(s) {', '.join(unsupported)}: counted as 0 FLOPs, bytes from tensor sizes")
    control = sorted({d["op"] for _, d in dag.nodes(data=True) if d["op"] in CONTROL_FLOW_OPS})
    if control:
        warnings.append(f"control flow ({', '.join(control)}) is approximated: a Loop costs its body times a constant "
                        "trip count, a Scan its body times its scan length, an If its larger branch; each runs as "
                        "one fallback kernel")
    training = sum(1 for _, d in dag.nodes(data=True) if not d["constant"]
                   and batchnorm_training(CostInput(d["op"], d["attributes"], d["inputs"], d["outputs"])))
    if training:
        warnings.append(f"{training} BatchNormalization node(s) run in training mode (batch statistics, as a module "
                        "left in train() runs): priced with a second pass over their input; export after model.eval() "
                        "to predict inference")
    unknown = [n for n, d in dag.nodes(data=True)
               if not d["constant"] and any(t.shape is None for t in d["outputs"])]
    if unknown:
        shown = _listed(unknown)
        warnings.append(f"{len(unknown)} node(s) have outputs of unknown shape ({shown}); their costs are incomplete")
    return warnings
