"""Is this ONNX file one Lilou can read and price honestly? Every check raises a one-line
:class:`~lilou.errors.LilouInputError` that names the tensor or node.

Before shape inference (:func:`check_opset`, :func:`check_initializers`, :func:`check_structure`,
:func:`check_ranges`): what ONNX's own inference would crash, hang, allocate gigabytes or silently wrap on
(unknown opsets, damaged initializers, dangling or twice-written tensors, wrong arity, cycles, ranges of 2^63
elements). After it (:func:`check_sizes`, :func:`check_reshapes`, :func:`check_windows`, :func:`check_splits`):
shapes the inference accepted but no real model has (tensors above 2^48 elements, reshapes that change the element
count after --batch, impossible convolution windows, splits that do not add up).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper

from lilou.errors import LilouInputError
from lilou.graph.costs import TensorInfo
from lilou.graph.names import unique_node_names
from lilou.graph.shapes import MAX_DIM, MAX_ELEMENTS

if TYPE_CHECKING:
    import networkx as nx

_WINDOW_OPS = frozenset({"Conv", "MaxPool", "AveragePool", "LpPool"})


def check_opset(model: onnx.ModelProto) -> None:
    """An opset this ONNX release does not know (a future or made-up one) cannot be read reliably."""
    newest = onnx.defs.onnx_opset_version()
    if model.ir_version > onnx.IR_VERSION:
        raise LilouInputError(f"the model has ONNX IR version {model.ir_version}, newer than this ONNX release "
                              f"reads (IR version {onnx.IR_VERSION} at most); re-export it with an older IR version")
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx") and not 1 <= entry.version <= newest:
            raise LilouInputError(f"the model imports ONNX opset {entry.version}, which does not exist in "
                                  f"this ONNX release (opsets 1 to {newest}); re-export it with opset <= {newest}")


def check_initializers(model: onnx.ModelProto) -> None:
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


def _weightless_export_hint(model: onnx.ModelProto) -> str:
    """Why a PyTorch export may read tensors nothing provides: the dynamo exporter with ``export_params=False``
    writes neither the weights nor inputs for them (the TorchScript exporter lists them as inputs)."""
    if model.producer_name != "pytorch" or model.graph.initializer:
        return ""
    return ("; torch.onnx.export(..., dynamo=True, export_params=False) writes no weights and no inputs for them: "
            "export with the weights (ONNX's external data keeps the .onnx small), or with dynamo=False")


def check_structure(model: onnx.ModelProto) -> None:
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
                    f"node {label!r} ({node.op_type}) reads tensor {tensor!r}, which no node, input or initializer "
                    f"provides{_weightless_export_hint(model)}")
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    _check_arity(graph, opsets)
    if not graph.output:
        raise LilouInputError("the graph declares no outputs; an ONNX graph must have at least one")
    for value in graph.output:
        if value.name not in available and value.name not in produced:
            raise LilouInputError(f"graph output {value.name!r} is produced by no node")
    _check_acyclic(graph)


def _check_text(graph: onnx.GraphProto) -> None:
    """Names, op types and domains must be text: protobuf hands invalid UTF-8 over as bytes. Subgraphs (the
    branches of an ``If``, the body of a ``Loop``) too: a branch is inlined and checked as the graph's own."""
    names: list = []
    graphs = [graph]
    while graphs:
        current = graphs.pop()
        values = [*current.input, *current.output, *current.value_info]
        names += [v.name for v in values] + [t.name for t in current.initializer]
        for node in current.node:
            names += [node.op_type, node.domain, node.name, *node.input, *node.output]
            for attribute in node.attribute:
                names.append(attribute.name)
                if attribute.type == onnx.AttributeProto.GRAPH:
                    graphs.append(attribute.g)
                elif attribute.type == onnx.AttributeProto.GRAPHS:
                    graphs.extend(attribute.graphs)
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


def check_ranges(graph: onnx.GraphProto) -> None:
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


def check_sizes(tensors: Mapping[str, TensorInfo]) -> None:
    for info in tensors.values():
        if info.shape is not None and math.prod(info.shape) > MAX_ELEMENTS:
            raise LilouInputError(f"tensor {info.name!r} would have shape {list(info.shape)}, "
                                  f"{math.prod(info.shape):.3g} elements: above Lilou's limit of 2^48 per tensor; "
                                  "the model or its shapes are not realistic")


def check_reshapes(dag: nx.DiGraph) -> None:
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


def check_windows(dag: nx.DiGraph) -> None:
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


def _ints(value: Any, rank: int, default: int) -> list[int]:
    return [int(v) for v in value] if isinstance(value, (list, tuple)) and value else [default] * rank


def check_splits(graph: onnx.GraphProto, tensors: Mapping[str, TensorInfo]) -> None:
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
