"""Raise a graph's ONNX opset where its ops mean the same at the new one.

Writing an onnxruntime decoder-attention op back as ONNX's own ``Attention`` and ``RotaryEmbedding``
(:mod:`lilou.graph.contrib_decoder`) needs opset 23, and the files that hold such ops are older
(onnxruntime-genai's model builder writes opset 14, 21 or 22). ONNX's ``version_converter`` refuses a graph
with contrib ops in it, so this module does what those files need: from opset 13 on, an op's meaning changes
only where listed here. The reductions take their axes as an input from opset 18 (rewritten), ``DFT`` its axis
from 20 and ``GroupNormalization`` per-channel scales from 21 (not rewritten: such a graph is not raised), and a
deprecated op (``Upsample``, ``Scatter``) has no opset-23 form.
"""
from __future__ import annotations

import onnx
from onnx import TensorProto, helper

_ONNX = ("", "ai.onnx")
#: Reductions whose ``axes`` moved from an attribute to the second input at opset 18 (ReduceSum at 13).
_REDUCTIONS_18 = frozenset({"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                            "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
#: Ops whose meaning changed after opset 13 in a way not rewritten here, and the opset that changed it.
_CHANGED = {"DFT": 20, "GroupNormalization": 21}
#: Ops ONNX deprecated: no form at a later opset.
_DEPRECATED = frozenset({"Upsample", "Scatter"})
#: The oldest opset this module raises from (Split, Squeeze and Unsqueeze changed their inputs at 13).
OLDEST = 13


def default_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in _ONNX), 0)


def can_raise(model: onnx.ModelProto, target: int) -> bool:
    """Whether :func:`raise_opset` can take ``model`` to ``target`` with every op meaning the same."""
    opset = default_opset(model)
    if opset >= target:
        return True
    if opset < OLDEST:
        return False
    for node in _all_nodes(model.graph):
        if node.domain not in _ONNX:
            continue
        if node.op_type in _DEPRECATED or opset < _CHANGED.get(node.op_type, 0) <= target:
            return False
    return True


def raise_opset(model: onnx.ModelProto, target: int) -> None:
    """Raise the default opset to ``target`` in place (checked by :func:`can_raise`), rewriting the reductions."""
    opset = default_opset(model)
    if opset >= target:
        return
    if opset < 18 <= target:
        for graph in _all_graphs(model.graph):
            for node in graph.node:
                if node.domain in _ONNX and node.op_type in _REDUCTIONS_18:
                    _axes_to_input(graph, node)
    for entry in model.opset_import:
        if entry.domain in _ONNX:
            entry.version = target


def _axes_to_input(graph: onnx.GraphProto, node: onnx.NodeProto) -> None:
    """A reduction's ``axes`` attribute as a constant second input (opset 18's form)."""
    axes = next((attribute for attribute in node.attribute if attribute.name == "axes"), None)
    if axes is None:
        return  # every axis, as at opset 18 without the input
    name = f"{node.name or node.output[0]}/axes_opset18"
    graph.initializer.append(helper.make_tensor(name, TensorProto.INT64, [len(axes.ints)], list(axes.ints)))
    node.attribute.remove(axes)
    del node.input[1:]
    node.input.append(name)


def _all_graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    graphs, pending = [], [graph]
    while pending:
        current = pending.pop()
        graphs.append(current)
        for node in current.node:
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    pending.append(attribute.g)
                elif attribute.type == onnx.AttributeProto.GRAPHS:
                    pending.extend(attribute.graphs)
    return graphs


def _all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    return [node for current in _all_graphs(graph) for node in current.node]
