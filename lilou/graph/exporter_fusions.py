"""Norms that the exporter fused out of a module eager runs op by op.

At opset 23, ``torch.onnx.export(..., dynamo=True)`` optimises by default with onnxscript's opset-23 fusions:
a Python-written RMS norm (Hugging Face's ``LlamaRMSNorm`` and its copies: ``x * rsqrt(mean(x ** 2) + eps) *
weight``) becomes one ``RMSNormalization`` node. Eager PyTorch runs the module's ops, one kernel each (pow, mean,
add, rsqrt, mul, mul, and the casts of a half-precision model). The fused node carries the rule's name in its
metadata (``pkg.onnxscript.rewriter.rule_name``: ``RmsNormFusion1``/``2``), so the fusion can be undone:
:func:`restore_exporter_fusions` writes back the ops the rule matched (its pattern, in
``onnxscript.rewriter.rules.fusion._rms_normalization``), the graph a lower opset's export has.
An ``RMSNormalization`` without that metadata (``F.rms_norm``, ``nn.RMSNorm``) is the op the model called and
stays one node.
"""
from __future__ import annotations

import onnx
from onnx import helper

from lilou.graph.names import protobuf_text

#: The metadata key onnxscript's rewriter writes on the nodes a rule produced.
RULE_NAME = "pkg.onnxscript.rewriter.rule_name"
_RMS_NORM_RULES = ("RmsNormFusion",)


def restore_exporter_fusions(model: onnx.ModelProto) -> list[str]:
    """Write every exporter-fused RMS norm back as the ops eager runs (in place); the fused nodes' names."""
    graph = model.graph
    types = element_types(graph)
    restored: list[str] = []
    nodes: list[onnx.NodeProto] = []
    for index, node in enumerate(graph.node):
        if not _fused_rms_norm(node):
            nodes.append(node)
            continue
        label = node.name or f"RMSNormalization_{index}"
        nodes.extend(_rms_norm_ops(node, label, types, graph))
        restored.append(label)
    if restored:
        del graph.node[:]
        graph.node.extend(nodes)
    return restored


def _fused_rms_norm(node: onnx.NodeProto) -> bool:
    if node.op_type != "RMSNormalization" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return False
    rule = protobuf_text(next((p.value for p in node.metadata_props if p.key == RULE_NAME), ""))
    return rule.startswith(_RMS_NORM_RULES) and node_attribute(node, "axis", -1) == -1


def _rms_norm_ops(node: onnx.NodeProto, label: str, types: dict[str, int], graph: onnx.GraphProto
                  ) -> list[onnx.NodeProto]:
    """What the rule matched: [Cast] Pow(x, 2), ReduceMean over the last axis, Add(eps), Sqrt, Reciprocal, Mul(x),
    [Cast], Mul(scale); the constants as small initializers."""
    x, scale = node.input
    stash = node_attribute(node, "stash_type", onnx.TensorProto.FLOAT)
    target = types.get(scale, types.get(x, stash))

    def name(step: str) -> str:
        return f"{label}/lilou_unfused/{step}"

    def constant(step: str, values: list, data_type: int) -> str:
        graph.initializer.append(helper.make_tensor(name(step), data_type, [len(values)] if step == "axes" else [],
                                                    values))
        return name(step)

    ops, value = [], x
    if types.get(x, stash) != stash:
        ops.append(helper.make_node("Cast", [x], [name("cast_in")], to=stash))
        value = name("cast_in")
    epsilon = float(node_attribute(node, "epsilon", 1e-5))
    ops += [helper.make_node("Pow", [value, constant("two", [2.0], stash)], [name("pow")]),
            helper.make_node("ReduceMean", [name("pow"), constant("axes", [-1], onnx.TensorProto.INT64)],
                             [name("mean")], keepdims=1),
            helper.make_node("Add", [name("mean"), constant("epsilon", [epsilon], stash)], [name("add")]),
            helper.make_node("Sqrt", [name("add")], [name("sqrt")]),
            helper.make_node("Reciprocal", [name("sqrt")], [name("reciprocal")]),
            helper.make_node("Mul", [value, name("reciprocal")], [name("normalized")])]
    normalized = name("normalized")
    if target != stash:
        ops.append(helper.make_node("Cast", [normalized], [name("cast_out")], to=target))
        normalized = name("cast_out")
    ops.append(helper.make_node("Mul", [normalized, scale], list(node.output), name=label))
    for index, op in enumerate(ops[:-1]):
        op.name = name(f"{index}_{op.op_type}")
    for op in ops:  # the module's call stack and names, for whoever reads them (the fusion model's name features)
        op.metadata_props.extend(p for p in node.metadata_props if p.key != RULE_NAME)
    return ops


def node_attribute(node: onnx.NodeProto, key: str, default):
    found = next((a for a in node.attribute if a.name == key), None)
    return default if found is None else helper.get_attribute_value(found)


def element_types(graph: onnx.GraphProto) -> dict[str, int]:
    """Element type of every tensor whose type the file states (inputs, value infos, outputs, initializers)."""
    types = {t.name: t.data_type for t in graph.initializer}
    for value in (*graph.input, *graph.value_info, *graph.output):
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            types.setdefault(value.name, value.type.tensor_type.elem_type)
    return types
