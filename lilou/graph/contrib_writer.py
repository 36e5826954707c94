"""Writing standard ONNX nodes in place of one contrib node (:mod:`lilou.graph.contrib_ops`), at the file's opset."""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lilou.graph.exporter_fusions import FLOAT_ELEMENT_TYPES

#: What the names of written-back nodes and constants carry after the contrib node's name.
MARK = "/lilou_unfused/"


def weight_dims(graph: onnx.GraphProto) -> dict[str, tuple[int, ...]]:
    """The shape of every weight: each initializer, and each one's dequantized copy (a ``DequantizeLinear`` of an
    initializer: ONNX's or onnxruntime's), the weight a contrib op reads in a file quantized after it was optimized
    (:mod:`lilou.graph.quantized` then reads it as the weight stored quantized)."""
    dims = {t.name: tuple(t.dims) for t in graph.initializer}
    for name, source in dequantized_weights(graph).items():
        dims.setdefault(name, dims[source])
    return dims


def dequantized_weights(graph: onnx.GraphProto) -> dict[str, str]:
    """Output -> the initializer it dequantizes, for every ``DequantizeLinear`` of an initializer."""
    from lilou.graph.quantized import op_key

    initializers = {t.name for t in graph.initializer}
    return {node.output[0]: node.input[0] for node in graph.node
            if op_key(node) == ("", "DequantizeLinear") and node.input and node.input[0] in initializers
            and node.output and node.output[0]}


def dequantized_types(graph: onnx.GraphProto, types: dict[str, int]) -> dict[str, int]:
    """``types`` with each dequantized weight's element type: its scale's (a float)."""
    weights = dequantized_weights(graph)
    scales = {node.output[0]: node.input[1] for node in graph.node
              if node.output and node.output[0] in weights and len(node.input) > 1}
    return {**{name: types[scale] for name, scale in scales.items() if types.get(scale) in FLOAT_ELEMENT_TYPES}, **types}


class OpWriter:
    """Builds the standard nodes of one contrib node: names under ``<node>/lilou_unfused/``, constants as small
    initializers in the element type of the tensor they meet, the last node writing the contrib node's output."""

    def __init__(self, graph: onnx.GraphProto, opset: int, types: dict[str, int]) -> None:
        self.graph, self.opset, self.types = graph, opset, types
        self.dims = weight_dims(graph)  # weights' shapes (their data may be stripped)
        self.nodes: list[onnx.NodeProto] = []
        self.shared: dict[str, str] = {}  # values written once for several contrib nodes (an attention mask)

    def start(self, node: onnx.NodeProto, label: str) -> None:
        self.node, self.label, self.nodes = node, label, []

    def name(self, step: str) -> str:
        return f"{self.label}{MARK}{step}"

    def type_of(self, *tensors: str) -> int | None:
        return next((self.types[t] for t in tensors if t in self.types), None)

    def op(self, op_type: str, inputs: list[str], step: str, output: str | None = None, **attributes) -> str:
        out = output or self.name(step)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.name(f"{len(self.nodes)}_{op_type}"),
                                           **attributes))
        return out

    def constant(self, step: str, value: float, like: str, data_type: int | None) -> str:
        """A scalar for an elementwise op with ``like``: in ``data_type``; when that is unknown, or not a floating-point
        type (a damaged file's text or integer attention scores), a float32 scalar cast like ``like`` (CastLike,
        opset 15; shape inference then judges the types), or float32 before it."""
        if data_type not in FLOAT_ELEMENT_TYPES:
            data_type = None
        known = data_type if data_type is not None else TensorProto.FLOAT
        name = self.name(f"constant_{step}")  # apart from the nodes' outputs
        self.graph.initializer.append(helper.make_tensor(name, known, [], [value]))
        if data_type is None and self.opset >= 15:
            return self.op("CastLike", [name, like], f"constant_{step}_like")
        return name

    def is_zero(self, name: str) -> bool:
        """Whether ``name`` is a small initializer stored in the file whose values are all zero (the bias
        onnxruntime's attention fusion writes for projections that had none)."""
        tensor = next((t for t in self.graph.initializer if t.name == name), None)
        if tensor is None or tensor.data_location == TensorProto.EXTERNAL or math.prod(tensor.dims) > 1 << 16:
            return False
        try:
            return not numpy_helper.to_array(tensor).any()
        except (ValueError, TypeError):  # a damaged tensor: not known to be zero
            return False

    def filled(self, step: str, value: float, count: int, data_type: int | None) -> str:
        """A 1-D constant of ``count`` copies of ``value`` in ``data_type`` (float32 when unknown or not floating
        point, as :meth:`constant`)."""
        name = self.name(f"constant_{step}")
        dtype = helper.tensor_dtype_to_np_dtype(data_type if data_type in FLOAT_ELEMENT_TYPES else TensorProto.FLOAT)
        self.graph.initializer.append(numpy_helper.from_array(np.full(count, value, dtype=dtype), name))
        return name

    def ints(self, step: str, values: list[int]) -> str:
        """A 1-D int64 constant (shapes, axes, slice bounds)."""
        name = self.name(f"constant_{step}")
        self.graph.initializer.append(helper.make_tensor(name, TensorProto.INT64, [len(values)], values))
        return name

    def scalar_int(self, step: str, value: int) -> str:
        """A 0-d int64 constant (a Gather index, a Range bound)."""
        name = self.name(f"constant_{step}")
        self.graph.initializer.append(helper.make_tensor(name, TensorProto.INT64, [], [value]))
        return name

    def stub(self, step: str, data_type: int, dims: tuple[int, ...]) -> str:
        """A weight with its type and shape but no bytes (as ``lilou zoo export --strip-weights`` writes weights): the
        layout the standard op reads, where the contrib op stored the weight otherwise."""
        name = self.name(f"weight_{step}")
        tensor = TensorProto(name=name, data_type=data_type, dims=list(dims))
        tensor.data_location = TensorProto.EXTERNAL
        nbytes = math.prod(dims) * helper.tensor_dtype_to_np_dtype(data_type).itemsize
        for key, value in (("location", "lilou-layout"), ("offset", "0"), ("length", str(nbytes))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        self.graph.initializer.append(tensor)
        return name

    def unsqueeze(self, value: str, axes: list[int], step: str) -> str:
        """Unsqueeze (axes an attribute before opset 13, an input from it)."""
        if self.opset >= 13:
            return self.op("Unsqueeze", [value, self.ints(f"{step}_axes", axes)], step)
        return self.op("Unsqueeze", [value], step, axes=axes)

    def reduce_mean(self, value: str, step: str) -> str:
        """Mean over the last axis, kept (axes an attribute before opset 18, an input from it)."""
        if self.opset >= 18:
            axes = self.name(f"constant_{step}_axes")
            self.graph.initializer.append(helper.make_tensor(axes, TensorProto.INT64, [1], [-1]))
            return self.op("ReduceMean", [value, axes], step, keepdims=1)
        return self.op("ReduceMean", [value], step, axes=[-1], keepdims=1)

    def finish(self) -> list[onnx.NodeProto]:
        self.nodes[-1].name = self.label  # the contrib node's name stays on the node writing its output
        for op in self.nodes:
            op.metadata_props.extend(self.node.metadata_props)
        return self.nodes


def producers_and_reads(graph: onnx.GraphProto) -> tuple[dict[str, onnx.NodeProto], dict[str, int]]:
    """The node that writes each tensor, and how many node inputs read each (graph outputs not counted)."""
    producers = {out: node for node in graph.node for out in node.output if out}
    reads: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            reads[name] = reads.get(name, 0) + 1
    return producers, reads


def node_input(node: onnx.NodeProto, index: int) -> str:
    return node.input[index] if len(node.input) > index else ""


def node_output(node: onnx.NodeProto, index: int) -> str:
    return node.output[index] if len(node.output) > index else ""


def add_bias(w: OpWriter, value: str, bias: str, step: str) -> str:
    """``value + bias`` (a Linear's bias, which eager adds in the GEMM: the exporter writes MatMul, Add)."""
    return w.op("Add", [value, bias], step) if bias else value


def layer_norm(w: OpWriter, value: str, gamma: str, beta: str, epsilon: float, output: str, dtype: int | None) -> None:
    """``nn.LayerNorm`` over the last axis: one LayerNormalization from opset 17, the pre-17 export before it."""
    if w.opset >= 17:
        w.op("LayerNormalization", [value, gamma, beta] if beta else [value, gamma], "layer_norm", output,
             axis=-1, epsilon=epsilon)
        return
    mean = w.reduce_mean(value, "mean")
    centred = w.op("Sub", [value, mean], "centred")
    square = w.op("Pow", [centred, w.constant("two", 2.0, centred, dtype)], "square")
    variance = w.reduce_mean(square, "variance")
    shifted = w.op("Add", [variance, w.constant("epsilon", epsilon, variance, dtype)], "shifted")
    normalized = w.op("Div", [centred, w.op("Sqrt", [shifted], "std")], "normalized")
    if beta:
        w.op("Add", [w.op("Mul", [normalized, gamma], "scaled"), beta], "shifted_out", output)
    else:
        w.op("Mul", [normalized, gamma], "scaled", output)


def gelu(w: OpWriter, value: str, output: str | None, dtype: int | None) -> str:
    """``F.gelu`` (erf) as exported before opset 20: Div(sqrt 2), Erf, Add(1), Mul(x), Mul(0.5)."""
    erf = w.op("Erf", [w.op("Div", [value, w.constant("sqrt_two", math.sqrt(2.0), value, dtype)], "scaled")], "erf")
    shifted = w.op("Add", [erf, w.constant("one", 1.0, erf, dtype)], "shifted")
    product = w.op("Mul", [value, shifted], "product")
    return w.op("Mul", [product, w.constant("half", 0.5, product, dtype)], "gelu", output)


def rms_norm(w: OpWriter, value: str, scale: str, epsilon: float, stash: int, output: str | None,
             prefix: str = "") -> str:
    """A Python RMS norm (T5LayerNorm, LlamaRMSNorm) as TorchScript exports it: [Cast] Pow(2), ReduceMean,
    Add(eps), Sqrt, Div(1, .), Mul(x), [Cast], Mul(scale). ``prefix`` names its steps apart from another's in the
    same rewrite."""
    source = w.type_of(value, scale)
    if source is not None and source != stash:
        value = w.op("Cast", [value], f"{prefix}cast_in", to=stash)
    square = w.op("Pow", [value, w.constant(f"{prefix}two", 2.0, value, stash)], f"{prefix}square")
    mean = w.reduce_mean(square, f"{prefix}mean")
    shifted = w.op("Add", [mean, w.constant(f"{prefix}epsilon", epsilon, mean, stash)], f"{prefix}shifted")
    inverse = w.op("Div", [w.constant(f"{prefix}one", 1.0, shifted, stash), w.op("Sqrt", [shifted], f"{prefix}rms")],
                   f"{prefix}inverse")
    normalized = w.op("Mul", [value, inverse], f"{prefix}normalized")
    target = w.type_of(scale)
    if target is not None and target != stash:
        normalized = w.op("Cast", [normalized], f"{prefix}cast_out", to=target)
    return w.op("Mul", [scale, normalized], f"{prefix}scaled", output)
