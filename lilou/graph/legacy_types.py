"""Types and shapes of the opset 1-5 ops ONNX has no shape inference for.

ONNX's first versions of ``Relu``, ``Sigmoid``, ``Add`` (with ``broadcast``), ``BatchNormalization``, ``Gemm`` and
others have no type and shape inference: their outputs have no type, and strict inference stops at the next op
("Input 0 expected to have type but instead is null"), so a Conv -> Relu -> Conv file at opset 3 (the old Model
Zoo's AlexNet, VGG, SqueezeNet) could not be read at all. ``onnx.version_converter`` fails on the same files.
Each such op keeps its first input's type and shape (``Gemm``: [M, N]; ``Concat``: the sum along its axis;
``Reshape``: its ``shape`` attribute), so
:func:`type_legacy_outputs` writes that as ``value_info`` and infers again, until nothing more is learnt.
"""
from __future__ import annotations

import math

import onnx
from onnx import defs, shape_inference

_ONNX = ("", "ai.onnx")
#: Ops whose output 0 has their input 0's type and shape at every version before opset 6 (Add, Sub, Mul, Div:
#: the second input broadcast to the first, as ``broadcast=1`` meant; Max, Min, Sum, Mean: inputs of one shape).
SAME_AS_INPUT = frozenset({"Abs", "Add", "BatchNormalization", "Ceil", "Clip", "Div", "Dropout", "Elu", "Exp", "Floor",
                           "HardSigmoid", "InstanceNormalization", "LeakyRelu", "Log", "Max", "Mean", "Min", "Mul",
                           "Neg", "PRelu", "Reciprocal", "Relu", "Selu", "Sigmoid", "Softmax", "Sqrt", "Sub", "Sum",
                           "Tanh"})
#: Rounds of inference at most (each one types the next op of a chain).
MAX_ROUNDS = 1000


def default_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in _ONNX), 0)


def _untyped(node: onnx.NodeProto, opset: int) -> bool:
    if node.domain not in _ONNX or node.op_type not in SAME_AS_INPUT | {"Gemm", "Concat", "Reshape"}:
        return False
    try:
        return not defs.get_schema(node.op_type, opset).has_type_and_shape_inference_function
    except defs.SchemaError:
        return False


def needs_legacy_types(model: onnx.ModelProto) -> bool:
    """Whether the graph has an op of opset < 6 that ONNX cannot type."""
    opset = default_opset(model)
    return 0 < opset < 6 and any(_untyped(node, opset) for node in model.graph.node)


def _known(graph: onnx.GraphProto) -> dict[str, onnx.TypeProto]:
    types: dict[str, onnx.TypeProto] = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        t = value.type
        if t.HasField("tensor_type") and t.tensor_type.elem_type and t.tensor_type.HasField("shape"):
            types.setdefault(value.name, t)
    for tensor in graph.initializer:
        types[tensor.name] = onnx.helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))
    return types


def _attribute(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def _output_type(node: onnx.NodeProto, types: dict[str, onnx.TypeProto]) -> onnx.TypeProto | None:
    inputs = [types.get(name) for name in node.input if name]
    if not inputs or inputs[0] is None:
        return None
    if node.op_type in SAME_AS_INPUT:
        return inputs[0]
    if node.op_type == "Gemm":  # A [M, K] (transA: [K, M]), B [K, N] (transB: [N, K]): Y [M, N]
        if len(inputs) < 2 or inputs[1] is None:
            return None
        a, b = inputs[0].tensor_type.shape.dim, inputs[1].tensor_type.shape.dim
        if len(a) != 2 or len(b) != 2:
            return None
        result = onnx.TypeProto()
        result.CopyFrom(inputs[0])
        dims = result.tensor_type.shape.dim
        dims[0].CopyFrom(a[1 if _attribute(node, "transA", 0) else 0])
        dims[1].CopyFrom(b[0 if _attribute(node, "transB", 0) else 1])
        return result
    if node.op_type == "Reshape":
        return _reshaped(node, inputs[0])
    # Concat-1: the sum of the inputs' sizes along ``axis`` (1 by default)
    if any(t is None for t in inputs):
        return None
    rank = len(inputs[0].tensor_type.shape.dim)
    axis = _attribute(node, "axis", 1)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank or any(len(t.tensor_type.shape.dim) != rank for t in inputs):
        return None
    sizes = [t.tensor_type.shape.dim[axis] for t in inputs]
    result = onnx.TypeProto()
    result.CopyFrom(inputs[0])
    along = result.tensor_type.shape.dim[axis]
    along.Clear()
    if all(d.HasField("dim_value") for d in sizes):
        along.dim_value = sum(d.dim_value for d in sizes)
    return result


def _reshaped(node: onnx.NodeProto, source: onnx.TypeProto) -> onnx.TypeProto | None:
    """Reshape-1: the ``shape`` attribute, 0 copying the input's size and one -1 what the others leave."""
    shape = next((list(a.ints) for a in node.attribute if a.name == "shape"), None)
    dims = source.tensor_type.shape.dim
    if shape is None or not all(d.HasField("dim_value") for d in dims):
        return None
    sizes = [d.dim_value for d in dims]
    out = [sizes[i] if size == 0 and i < len(sizes) else size for i, size in enumerate(shape)]
    if out.count(-1) > 1 or any(size < -1 for size in out):
        return None
    total, rest = math.prod(sizes), math.prod(size for size in out if size != -1)
    if -1 in out:
        if rest == 0 or total % rest:
            return None
        out[out.index(-1)] = total // rest
    if math.prod(out) != total:
        return None
    return onnx.helper.make_tensor_type_proto(source.tensor_type.elem_type, out)


def type_legacy_outputs(inferred: onnx.ModelProto) -> list[str]:
    """Give the outputs of the untyped ops of opset < 6 their type and shape (``value_info``, in place), inferring
    the model again after each round; the names typed. ``inferred``: the model after one non-strict inference."""
    opset = default_opset(inferred)
    pending = [node for node in inferred.graph.node if _untyped(node, opset)]
    typed: list[str] = []
    for _ in range(MAX_ROUNDS):
        types = _known(inferred.graph)
        added = []
        for node in pending:
            if not node.output or not node.output[0] or node.output[0] in types:
                continue
            found = _output_type(node, types)
            if found is not None:
                value = onnx.ValueInfoProto(name=node.output[0])
                value.type.CopyFrom(found)
                added.append(value)
                types[value.name] = found
        if not added:
            break
        typed.extend(v.name for v in added)
        work = onnx.ModelProto()
        work.CopyFrom(inferred)
        work.graph.value_info.extend(added)
        again = shape_inference.infer_shapes(work, check_type=False, strict_mode=False)
        inferred.graph.ClearField("value_info")
        inferred.graph.value_info.extend(again.graph.value_info)
    return typed
