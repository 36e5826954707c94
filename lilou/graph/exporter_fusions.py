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

from lilou.errors import LilouInputError
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
    if stash not in FLOAT_ELEMENT_TYPES:  # a damaged file's: the constants below are floats
        stash = onnx.TensorProto.FLOAT
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


#: Floating-point element types: what a written-back op's float constants may be stored in as they are.
FLOAT_ELEMENT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                                 onnx.TensorProto.DOUBLE})
#: The attribute types that a default of each kind takes (a float attribute may be written as an integer).
_KINDS = {int: (onnx.AttributeProto.INT,), float: (onnx.AttributeProto.FLOAT, onnx.AttributeProto.INT)}


def node_attribute(node: onnx.NodeProto, key: str, default, kind: int | None = None):
    """The value of ``node``'s attribute ``key``, or ``default`` where it has none. The attribute must be of
    ``default``'s kind (an integer: INT; a float: FLOAT or INT, read as a float) or of ``kind``: the exporter and
    onnxruntime ops read here have no schema ONNX's checks know, so a damaged file's attribute of another type (or
    of none) is bad input, said in one line."""
    found = next((a for a in node.attribute if a.name == key), None)
    if found is None:
        return default
    kinds = (kind,) if kind is not None else _KINDS.get(type(default))
    if found.type == onnx.AttributeProto.UNDEFINED or (kinds is not None and found.type not in kinds):
        wanted = "/".join(onnx.AttributeProto.AttributeType.Name(k) for k in kinds) if kinds else "a typed value"
        given = onnx.AttributeProto.AttributeType.Name(found.type) \
            if found.type in onnx.AttributeProto.AttributeType.values() else str(found.type)
        raise LilouInputError(f"attribute {protobuf_text(key)!r} of node {protobuf_text(node.name or node.op_type)!r} "
                              f"({protobuf_text(node.op_type)}) is {given}, but it must be {wanted}; the model is "
                              "damaged, re-export it")
    value = helper.get_attribute_value(found)
    return float(value) if isinstance(default, float) else value


def element_types(graph: onnx.GraphProto) -> dict[str, int]:
    """Element type of every tensor whose type the file states (inputs, value infos, outputs, initializers)."""
    types = {t.name: t.data_type for t in graph.initializer}
    for value in (*graph.input, *graph.value_info, *graph.output):
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            types.setdefault(value.name, value.type.tensor_type.elem_type)
    return types
