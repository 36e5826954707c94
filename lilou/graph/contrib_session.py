"""onnxruntime's session-level fusions (``FusedConv``, ``FusedGemm``, ``FusedMatMul``) written back as the ops eager
runs.

A model onnxruntime saved after optimizing it (``SessionOptions.optimized_model_filepath`` at the default level,
``ORT_ENABLE_ALL``, or ``ORT_ENABLE_EXTENDED``: what users save to see what onnxruntime did, and what some model
repositories ship) holds the fusions its runtime applies: a convolution with the activation after it (and the
residual add before that) one ``com.microsoft::FusedConv``, a ``Gemm`` and its activation one ``FusedGemm``, a
``MatMul`` with the scalar scale after it (or the transpose before it) one ``FusedMatMul``. ONNX's shape inference
knows none of them. Eager runs the modules as the export wrote them: the convolution, the add and the activation are
each a kernel; so are a GEMM and its activation, a matmul and its scale.

Written back: ``FusedConv`` as ``Conv`` (+ ``Add`` of its fourth input) + the activation; ``FusedGemm`` as ``Gemm``
+ the activation; ``FusedMatMul`` as ``MatMul`` + ``Mul`` by ``alpha`` (when not 1), a transposed operand only where
it is a constant matrix (a weight: the transpose launches nothing). Activations: ``Relu``, ``Sigmoid``, ``Tanh``,
``LeakyRelu``, ``Clip`` (ReLU6), ``HardSigmoid``; any other, and batch transposes, stay unsupported and named.
"""
from __future__ import annotations

from collections.abc import Mapping

import onnx

from lilou.graph.contrib_writer import OpWriter, node_input, node_output
from lilou.graph.exporter_fusions import node_attribute

#: Activations the fused ops name, and how many parameters each reads.
_ACTIVATIONS = {"Relu": 0, "Sigmoid": 0, "Tanh": 0, "LeakyRelu": 1, "Clip": 2, "HardSigmoid": 2}
#: Conv and Gemm attributes the fused ops carry over.
_CONV_ATTRIBUTES = frozenset({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})
_GEMM_ATTRIBUTES = frozenset({"alpha", "beta", "transA", "transB"})


def _activation(node: onnx.NodeProto) -> tuple[str, list[float]] | None:
    """The activation a fused node applies and its parameters: ``activation_params`` (FusedConv) or
    ``activation_alpha`` / ``activation_beta`` (FusedGemm); None where it is not one this module writes."""
    name = node_attribute(node, "activation", b"")
    name = name.decode() if isinstance(name, bytes) else ""
    if name not in _ACTIVATIONS:
        return None
    params = node_attribute(node, "activation_params", None)
    if params is None:
        params = [node_attribute(node, key, None) for key in ("activation_alpha", "activation_beta")]
        params = [p for p in params if p is not None]
        if name == "LeakyRelu" and not params:
            params = [node_attribute(node, "leaky_relu_alpha", 0.01)]
    if not isinstance(params, list) or not all(isinstance(p, float) for p in params):
        return None
    if len(params) < _ACTIVATIONS[name]:
        return None
    return name, params[:_ACTIVATIONS[name]]


def _activate(w: OpWriter, value: str, activation: tuple[str, list[float]], output: str) -> None:
    name, params = activation
    dtype = w.type_of(value)
    if name == "LeakyRelu":
        w.op("LeakyRelu", [value], "activation", output, alpha=params[0])
    elif name == "HardSigmoid":
        w.op("HardSigmoid", [value], "activation", output, alpha=params[0], beta=params[1])
    elif name == "Clip":
        bounds = [w.constant(f"clip_{bound}", limit, value, dtype) for bound, limit in zip(("min", "max"), params)]
        w.op("Clip", [value, *bounds], "activation", output)
    else:
        w.op(name, [value], "activation", output)


def fused_conv_applies(node: onnx.NodeProto) -> bool:
    return len(node.input) >= 2 and all(node.input[:2]) and bool(node_output(node, 0)) \
        and _activation(node) is not None \
        and all(a.name in _CONV_ATTRIBUTES or a.name in ("activation", "activation_params") for a in node.attribute)


def write_fused_conv(w: OpWriter, node: onnx.NodeProto) -> None:
    conv = w.op("Conv", [node.input[0], node.input[1]] + ([node_input(node, 2)] if node_input(node, 2) else []),
                "conv")
    w.nodes[-1].attribute.extend(a for a in node.attribute if a.name in _CONV_ATTRIBUTES)
    if node_input(node, 3):  # the residual added before the activation
        conv = w.op("Add", [conv, node_input(node, 3)], "residual")
    _activate(w, conv, _activation(node), node.output[0])


def fused_gemm_applies(node: onnx.NodeProto) -> bool:
    return len(node.input) >= 2 and all(node.input[:2]) and bool(node_output(node, 0)) \
        and _activation(node) is not None


def write_fused_gemm(w: OpWriter, node: onnx.NodeProto) -> None:
    gemm = w.op("Gemm", list(node.input[:2]) + ([node.input[2]] if node_input(node, 2) else []), "gemm")
    w.nodes[-1].attribute.extend(a for a in node.attribute if a.name in _GEMM_ATTRIBUTES)
    _activate(w, gemm, _activation(node), node.output[0])


def fused_matmul_applies(node: onnx.NodeProto, dims: Mapping[str, tuple[int, ...]]) -> bool:
    """Two operands, no batch transposes, a transposed operand only where it is a constant matrix."""
    if len(node.input) != 2 or not all(node.input) or not node_output(node, 0):
        return False
    if node_attribute(node, "transBatchA", 0) or node_attribute(node, "transBatchB", 0):
        return False
    alpha = node_attribute(node, "alpha", 1.0)
    if not isinstance(alpha, float):
        return False
    return all(not node_attribute(node, flag, 0) or len(dims.get(operand, ())) == 2
               for flag, operand in (("transA", node.input[0]), ("transB", node.input[1])))


def write_fused_matmul(w: OpWriter, node: onnx.NodeProto) -> None:
    operands = []
    for flag, operand, name in (("transA", node.input[0], "a"), ("transB", node.input[1], "b")):
        if node_attribute(node, flag, 0):  # a constant matrix: its transpose is folded
            operand = w.op("Transpose", [operand], f"{name}_transposed", perm=[1, 0])
        operands.append(operand)
    alpha = float(node_attribute(node, "alpha", 1.0))
    if alpha == 1.0:
        w.op("MatMul", operands, "matmul", node.output[0])
        return
    product = w.op("MatMul", operands, "matmul")
    w.op("Mul", [product, w.constant("alpha", alpha, product, w.type_of(*node.input))], "scaled", node.output[0])
