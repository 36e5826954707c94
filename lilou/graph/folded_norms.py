"""Batch norms that an exporter folded into the convolution (or linear layer) before them.

torch.onnx's dynamo exporter runs an optimiser by default (``optimize=True``) that folds a
``BatchNormalization`` into the ``Conv``/``ConvTranspose``/``Gemm``/``MatMul`` it follows. Eager PyTorch
never does: cuDNN runs the convolution, then the batch norm, as two kernels, and a module left in
``train()`` normalises with the batch's own statistics, a second pass over the activation. The fused node
keeps the batch norm's metadata (its ``namespace`` ends in ``aten._native_batch_norm_legit_no_training``,
``..._functional`` ...), so the fold can be undone: :func:`restore_folded_batchnorms` puts a
``BatchNormalization`` back after the node, with per-channel parameters of the right size, and moves the
metadata to it (which tells a training-mode one: :func:`lilou.graph.dag._exported_in_training_mode`).
Files without that metadata (TorchScript exports fold eval-mode batch norms too) cannot be told apart
from a model without batch norms.
"""
from __future__ import annotations

import re

import onnx
from onnx import helper

#: The aten batch-norm call a fused node's ``namespace`` metadata ends with.
_BATCH_NORM_CALL = re.compile(r"aten\.(_native_batch_norm_legit\w*|native_batch_norm|batch_norm|"
                              r"_batch_norm_with_update|_batch_norm_no_update|cudnn_batch_norm)\.")
#: Metadata keys that describe the aten call a node came from: they move to the restored batch norm.
_CALL_METADATA = ("namespace", "pkg.torch.onnx.fx_node", "pkg.torch.onnx.class_hierarchy",
                  "pkg.torch.onnx.name_scopes", "pkg.torch.onnx.stack_trace")
_FOLDED_INTO = ("Conv", "ConvTranspose", "Gemm", "MatMul")
_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                onnx.TensorProto.DOUBLE)


def restore_folded_batchnorms(model: onnx.ModelProto) -> list[str]:
    """Put back every batch norm folded into the node before it (in place); the nodes it was folded into."""
    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    restored: list[str] = []
    nodes = []
    for node in graph.node:
        nodes.append(node)
        channels = _output_channels(node, weights) if _holds_folded_batch_norm(node) else None
        if channels is None or len(node.output) != 1:
            continue
        nodes.append(_batch_norm_after(node, channels, weights[node.input[1]].data_type, graph))
        restored.append(node.name or node.op_type)
    if restored:
        del graph.node[:]
        graph.node.extend(nodes)
    return restored


def _holds_folded_batch_norm(node: onnx.NodeProto) -> bool:
    """A Conv/Gemm/... node whose metadata names an aten batch-norm call as the last one it computes."""
    if node.op_type not in _FOLDED_INTO or node.domain not in ("", "ai.onnx"):
        return False
    namespace = next((p.value for p in node.metadata_props if p.key == "namespace"), "")
    return bool(_BATCH_NORM_CALL.match(namespace.rsplit(": ", 1)[-1]))


def _output_channels(node: onnx.NodeProto, weights: dict[str, onnx.TensorProto]) -> int | None:
    """The channels (features) the batch norm normalised: read from the weight's dims."""
    if len(node.input) < 2 or node.input[1] not in weights:
        return None
    dims = list(weights[node.input[1]].dims)
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Conv" and len(dims) >= 3:
        return dims[0]
    if node.op_type == "ConvTranspose" and len(dims) >= 3:
        return dims[1] * int(attributes.get("group", 1))
    if node.op_type == "Gemm" and len(dims) == 2:
        return dims[0] if attributes.get("transB", 0) else dims[1]
    if node.op_type == "MatMul" and len(dims) == 2:
        return dims[1]
    return None


def _batch_norm_after(node: onnx.NodeProto, channels: int, data_type: int, graph: onnx.GraphProto) -> onnx.NodeProto:
    """A BatchNormalization reading the node's output, which now goes to a new tensor; the metadata moves."""
    base = node.name or node.output[0]
    before = f"{node.output[0]}__before_batch_norm"
    parameters = []
    for role in ("scale", "bias", "mean", "var"):
        name = f"{base}__batch_norm_{role}"
        parameters.append(name)
        graph.initializer.append(helper.make_tensor(name, data_type, [channels], [1.0] * channels))
    if data_type not in _FLOAT_TYPES:
        data_type = onnx.TensorProto.FLOAT
    # no training_mode attribute (ONNX would want the running statistics as outputs too): the moved metadata names
    # the training-mode aten call, which is how the graph reader tells (lilou.graph.dag._exported_in_training_mode)
    norm = helper.make_node("BatchNormalization", [before, *parameters], [node.output[0]],
                            name=f"{base}__batch_norm", epsilon=1e-5)
    kept = [p for p in node.metadata_props if p.key not in _CALL_METADATA]
    moved = [p for p in node.metadata_props if p.key in _CALL_METADATA]
    norm.metadata_props.extend(moved)
    del node.metadata_props[:]
    node.metadata_props.extend(kept)
    node.output[0] = before
    return norm
