"""onnxruntime's contrib ops written back as the standard ops eager PyTorch runs.

onnxruntime's transformer optimizer (``onnxruntime.transformers.optimizer``, which Hugging Face Optimum's
``ORTOptimizer`` runs) rewrites an exported model for onnxruntime: the bias add, residual add and layer norm
after an attention or MLP block become one ``com.microsoft::SkipLayerNormalization``, a bias add and GELU one
``BiasGelu``, an RMS norm one ``SimplifiedLayerNormalization``. ONNX's shape inference does not know these ops,
so every tensor after the first had no shape (the costs of the whole model after it incomplete), and the fusion
model never saw them. Eager PyTorch runs the modules the optimizer matched, not its kernels: each contrib op is
written back as the nodes the TorchScript exporter writes for those modules at the file's opset (the patterns
the optimizer's fusions match, ``onnxruntime/python/tools/transformers/fusion_*.py``), so the rest of Lilou
prices an optimized file as the export it came from.

Written back: ``SkipLayerNormalization``, ``SkipSimplifiedLayerNormalization``, ``SimplifiedLayerNormalization``
and, in a file of opset < 17, ``LayerNormalization`` (onnxruntime registers both in the ONNX domain), ``BiasGelu``,
``Gelu``, ``FastGelu``, ``QuickGelu`` and ``BiasAdd``. A node whose extra outputs (mean, inverse standard
deviation) something reads stays as it is, and so do the attention ops (``Attention``, ``MultiHeadAttention``,
``GroupQueryAttention``; current exports of Hugging Face models do not match their patterns) and the quantized
ones (``MatMulNBits`` ...): what they replaced is not in the file, and the warnings name them as unsupported.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import onnx
from onnx import TensorProto, helper

from lilou.graph.exporter_fusions import element_types, node_attribute

MICROSOFT = "com.microsoft"
_ONNX = ("", "ai.onnx")


def restore_contrib_ops(model: onnx.ModelProto) -> Counter[str]:
    """Write every contrib op this module knows back as standard ops (in place); how many of each op type."""
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in _ONNX), 0)
    read = {name for node in graph.node for name in node.input} | {v.name for v in graph.output}
    writer = _Writer(graph, opset, element_types(graph))
    taken = {name.partition(_MARK)[0] for name in _names(graph) if _MARK in name}  # labels a file already uses
    restored: Counter[str] = Counter()
    nodes: list[onnx.NodeProto] = []
    for index, node in enumerate(graph.node):
        rewrite = _REWRITES.get((node.domain if node.domain not in _ONNX else "", node.op_type))
        if node.op_type == "LayerNormalization" and (opset >= 17 or node_attribute(node, "axis", -1) != -1):
            rewrite = None  # a standard op from opset 17; before it, onnxruntime's own (last axis only here)
        extra_read = any(out in read for out in node.output[1:3])  # mean / inverse std: no eager twin
        if rewrite is None or extra_read or not _complete(node):
            nodes.append(node)
            continue
        label = node.name or f"{node.op_type}_{index}"
        if label in taken:  # a repeated node name: its new tensors must not collide
            label = f"{label}_{index}"
        taken.add(label)
        writer.start(node, label)
        rewrite(writer, node)
        nodes.extend(writer.finish())
        restored[node.op_type] += 1
    if restored:
        del graph.node[:]
        graph.node.extend(nodes)
    return restored


#: What the names of written-back nodes and constants carry after the contrib node's name.
_MARK = "/lilou_unfused/"


def _names(graph: onnx.GraphProto) -> set[str]:
    return ({t.name for t in graph.initializer} | {v.name for v in graph.input}
            | {out for node in graph.node for out in node.output} | {node.name for node in graph.node})


def _complete(node: onnx.NodeProto) -> bool:
    """The inputs the op requires are there, and the output it is read by (a hostile file may drop either)."""
    required = _REQUIRED_INPUTS[node.op_type]
    return len(node.input) >= required and all(node.input[:required]) and bool(_output(node, 0))


class _Writer:
    """Builds the standard nodes of one contrib node: names under ``<node>/lilou_unfused/``, constants as small
    initializers in the element type of the tensor they meet, the last node writing the contrib node's output."""

    def __init__(self, graph: onnx.GraphProto, opset: int, types: dict[str, int]) -> None:
        self.graph, self.opset, self.types = graph, opset, types
        self.nodes: list[onnx.NodeProto] = []

    def start(self, node: onnx.NodeProto, label: str) -> None:
        self.node, self.label, self.nodes = node, label, []

    def name(self, step: str) -> str:
        return f"{self.label}{_MARK}{step}"

    def type_of(self, *tensors: str) -> int | None:
        return next((self.types[t] for t in tensors if t in self.types), None)

    def op(self, op_type: str, inputs: list[str], step: str, output: str | None = None, **attributes) -> str:
        out = output or self.name(step)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.name(f"{len(self.nodes)}_{op_type}"),
                                           **attributes))
        return out

    def constant(self, step: str, value: float, like: str, data_type: int | None) -> str:
        """A scalar for an elementwise op with ``like``: in ``data_type``; when that is unknown, a float32 scalar
        cast like ``like`` (CastLike, opset 15), or float32 before it."""
        known = data_type if data_type is not None else TensorProto.FLOAT
        name = self.name(f"constant_{step}")  # apart from the nodes' outputs
        self.graph.initializer.append(helper.make_tensor(name, known, [], [value]))
        if data_type is None and self.opset >= 15:
            return self.op("CastLike", [name, like], f"constant_{step}_like")
        return name

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


def _input(node: onnx.NodeProto, index: int) -> str:
    return node.input[index] if len(node.input) > index else ""


def _output(node: onnx.NodeProto, index: int) -> str:
    return node.output[index] if len(node.output) > index else ""


def _add_bias(w: _Writer, value: str, bias: str, step: str) -> str:
    """``value + bias`` (a Linear's bias, which eager adds in the GEMM: the exporter writes MatMul, Add)."""
    return w.op("Add", [value, bias], step) if bias else value


def _layer_norm(w: _Writer, value: str, gamma: str, beta: str, epsilon: float, output: str, dtype: int | None) -> None:
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


def _rms_norm(w: _Writer, value: str, scale: str, epsilon: float, stash: int, output: str) -> None:
    """A Python RMS norm (T5LayerNorm, LlamaRMSNorm) as TorchScript exports it: [Cast] Pow(2), ReduceMean,
    Add(eps), Sqrt, Div(1, .), Mul(x), [Cast], Mul(scale)."""
    source = w.type_of(value, scale)
    if source is not None and source != stash:
        value = w.op("Cast", [value], "cast_in", to=stash)
    square = w.op("Pow", [value, w.constant("two", 2.0, value, stash)], "square")
    mean = w.reduce_mean(square, "mean")
    shifted = w.op("Add", [mean, w.constant("epsilon", epsilon, mean, stash)], "shifted")
    inverse = w.op("Div", [w.constant("one", 1.0, shifted, stash), w.op("Sqrt", [shifted], "rms")], "inverse")
    normalized = w.op("Mul", [value, inverse], "normalized")
    target = w.type_of(scale)
    if target is not None and target != stash:
        normalized = w.op("Cast", [normalized], "cast_out", to=target)
    w.op("Mul", [scale, normalized], "scaled", output)


def _gelu(w: _Writer, value: str, output: str, dtype: int | None) -> None:
    """``F.gelu`` (erf) as exported before opset 20: Div(sqrt 2), Erf, Add(1), Mul(x), Mul(0.5)."""
    erf = w.op("Erf", [w.op("Div", [value, w.constant("sqrt_two", math.sqrt(2.0), value, dtype)], "scaled")], "erf")
    shifted = w.op("Add", [erf, w.constant("one", 1.0, erf, dtype)], "shifted")
    product = w.op("Mul", [value, shifted], "product")
    w.op("Mul", [product, w.constant("half", 0.5, product, dtype)], "gelu", output)


def _tanh_gelu(w: _Writer, value: str, output: str, dtype: int | None) -> None:
    """GPT-2's ``gelu_new`` as exported: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    half = w.op("Mul", [value, w.constant("half", 0.5, value, dtype)], "half")
    cube = w.op("Pow", [value, w.constant("three", 3.0, value, dtype)], "cube")
    term = w.op("Mul", [cube, w.constant("coefficient", 0.044715, cube, dtype)], "term")
    inner = w.op("Add", [value, term], "inner")
    tanh = w.op("Tanh", [w.op("Mul", [inner, w.constant("scale", math.sqrt(2.0 / math.pi), inner, dtype)],
                                "scaled")], "tanh")
    shifted = w.op("Add", [tanh, w.constant("one", 1.0, tanh, dtype)], "shifted")
    w.op("Mul", [half, shifted], "gelu", output)


def _skip_sum(w: _Writer, node: onnx.NodeProto, bias: str) -> str:
    """input (+ bias) + skip: the residual add, into the node's fourth output when it has one."""
    value = _add_bias(w, _input(node, 0), bias, "bias")
    return w.op("Add", [value, _input(node, 1)], "residual", _output(node, 3) or None)


def _skip_layer_norm(w: _Writer, node: onnx.NodeProto) -> None:
    total = _skip_sum(w, node, _input(node, 4))
    dtype = w.type_of(_input(node, 2), _input(node, 0))
    _layer_norm(w, total, _input(node, 2), _input(node, 3), float(node_attribute(node, "epsilon", 1e-12)),
                node.output[0], dtype)


def _skip_simplified_layer_norm(w: _Writer, node: onnx.NodeProto) -> None:
    total = _skip_sum(w, node, _input(node, 3))
    _rms_norm(w, total, _input(node, 2), float(node_attribute(node, "epsilon", 1e-6)), TensorProto.FLOAT,
              node.output[0])


def _simplified_layer_norm(w: _Writer, node: onnx.NodeProto) -> None:
    _rms_norm(w, _input(node, 0), _input(node, 1), float(node_attribute(node, "epsilon", 1e-5)),
              int(node_attribute(node, "stash_type", TensorProto.FLOAT)), node.output[0])


def _old_layer_norm(w: _Writer, node: onnx.NodeProto) -> None:
    """onnxruntime's LayerNormalization in a file of opset < 17, where ONNX has none: the pre-17 export."""
    dtype = w.type_of(_input(node, 1), _input(node, 0))
    _layer_norm(w, _input(node, 0), _input(node, 1), _input(node, 2), float(node_attribute(node, "epsilon", 1e-5)),
                node.output[0], dtype)


def _bias_gelu(w: _Writer, node: onnx.NodeProto) -> None:
    dtype = w.type_of(_input(node, 1), _input(node, 0))
    _gelu(w, _add_bias(w, _input(node, 0), _input(node, 1), "bias"), node.output[0], dtype)


def _fast_gelu(w: _Writer, node: onnx.NodeProto) -> None:
    dtype = w.type_of(_input(node, 1), _input(node, 0))
    _tanh_gelu(w, _add_bias(w, _input(node, 0), _input(node, 1), "bias"), node.output[0], dtype)


def _quick_gelu(w: _Writer, node: onnx.NodeProto) -> None:
    """CLIP's QuickGELU, x * sigmoid(alpha x), as exported: Mul, Sigmoid, Mul."""
    value, dtype = _input(node, 0), w.type_of(_input(node, 0))
    scaled = w.op("Mul", [value, w.constant("alpha", float(node_attribute(node, "alpha", 1.702)), value, dtype)],
                  "scaled")
    w.op("Mul", [value, w.op("Sigmoid", [scaled], "sigmoid")], "gelu", node.output[0])


def _bias_add(w: _Writer, node: onnx.NodeProto) -> None:
    w.op("Add", [w.op("Add", [_input(node, 0), _input(node, 1)], "bias"), _input(node, 2)], "residual",
         node.output[0])


#: Inputs each op requires (the others are optional and may be empty names).
_REQUIRED_INPUTS = {"LayerNormalization": 2, "SkipLayerNormalization": 3, "SkipSimplifiedLayerNormalization": 3,
                    "SimplifiedLayerNormalization": 2, "BiasGelu": 2, "Gelu": 1, "FastGelu": 1, "QuickGelu": 1,
                    "BiasAdd": 3}

_REWRITES: dict[tuple[str, str], Callable[[_Writer, onnx.NodeProto], None]] = {
    (MICROSOFT, "SkipLayerNormalization"): _skip_layer_norm,
    (MICROSOFT, "SkipSimplifiedLayerNormalization"): _skip_simplified_layer_norm,
    ("", "SimplifiedLayerNormalization"): _simplified_layer_norm,
    ("", "LayerNormalization"): _old_layer_norm,
    (MICROSOFT, "SimplifiedLayerNormalization"): _simplified_layer_norm,
    (MICROSOFT, "BiasGelu"): _bias_gelu,
    (MICROSOFT, "Gelu"): lambda w, node: _gelu(w, _input(node, 0), node.output[0], w.type_of(_input(node, 0))),
    (MICROSOFT, "FastGelu"): _fast_gelu,
    (MICROSOFT, "QuickGelu"): _quick_gelu,
    (MICROSOFT, "BiasAdd"): _bias_add,
}
