"""Batch norms that an exporter folded into the convolution (or linear layer) before them.

torch.onnx's dynamo exporter runs an optimiser by default (``optimize=True``) that folds a
``BatchNormalization`` into the ``Conv``/``ConvTranspose``/``Gemm``/``MatMul`` it follows. Eager PyTorch
never does: cuDNN runs the convolution, then the batch norm, as two kernels, and a module left in
``train()`` normalises with the batch's own statistics, a second pass over the activation. The fused node
keeps the batch norm's metadata (its ``namespace`` ends in ``aten._native_batch_norm_legit_no_training``,
``..._functional`` ...), so the fold can be undone: :func:`restore_folded_batchnorms` puts a
``BatchNormalization`` back after the node, with per-channel parameters of the right size, and moves the
metadata to it (which tells a training-mode one: :func:`exported_in_training_mode`).
TorchScript exports (``dynamo=False``) fold eval-mode batch norms into convolutions too and keep no metadata,
but the fold leaves a trace: the convolution's weight and bias are new constants, which that exporter names
after the op (``onnx::Conv_123``; numbers alone before torch 1.12), where a convolution's own parameters keep
their module names (``layer1.0.conv1.weight``) and a convolution without a bias has none
(:func:`_torchscript_folded`). Other files without metadata cannot be told apart from a model without batch
norms.
"""
from __future__ import annotations

import re

import onnx
from onnx import helper

from lilou.graph.names import protobuf_text

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
    weights = _weight_types(graph)
    restored: list[str] = []
    nodes = []
    torchscript = model.producer_name == "pytorch"
    for node in graph.node:
        nodes.append(node)
        folded = _holds_folded_batch_norm(node) or (torchscript and _torchscript_folded(node))
        channels = _output_channels(node, weights) if folded else None
        if channels is None or len(node.output) != 1:
            continue
        nodes.append(_batch_norm_after(node, channels, weights[node.input[1]][1], graph))
        if _bias_from_the_fold(node, torchscript):
            del node.input[2:]  # the restored norm adds the shift the fold had put there
        restored.append(node.name or node.op_type)
    if restored:
        del graph.node[:]
        graph.node.extend(nodes)
    return restored


def _holds_folded_batch_norm(node: onnx.NodeProto) -> bool:
    """A Conv/Gemm/... node whose metadata names an aten batch-norm call as the last one it computes."""
    if node.op_type not in _FOLDED_INTO or node.domain not in ("", "ai.onnx"):
        return False
    namespace = protobuf_text(next((p.value for p in node.metadata_props if p.key == "namespace"), ""))
    return bool(_BATCH_NORM_CALL.match(namespace.rsplit(": ", 1)[-1]))


#: The names TorchScript's exporter gives a constant it computed (a folded weight or bias) that feeds a Conv.
_TORCHSCRIPT_FOLDED_CONSTANT = re.compile(r"(onnx::Conv_)?\d+")


def _torchscript_folded(node: onnx.NodeProto) -> bool:
    """A Conv of a TorchScript export (no dynamo metadata) whose weight and bias are both constants the exporter
    computed: the eval-mode batch norm after it was folded in (see the module docstring)."""
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or len(node.input) < 3:
        return False
    if any(protobuf_text(p.key).startswith("pkg.torch.onnx.") for p in node.metadata_props):
        return False
    return all(_TORCHSCRIPT_FOLDED_CONSTANT.fullmatch(name) for name in node.input[1:3])


def _bias_from_the_fold(node: onnx.NodeProto, torchscript: bool) -> bool:
    """Whether a convolution's bias is the folded batch norm's shift rather than its own: the dynamo exporter names
    the bias it makes for a bias-free convolution after the weight (``0.weight_bias``; one of its own keeps its
    module name, ``3.bias``); TorchScript names both ``onnx::Conv_<n>``, and a convolution before a batch norm has no
    bias of its own (``bias=False``, as ResNets, MobileNets and timm write it). Pricing that bias added an
    element-wise pass: +5.6 % on a 3x3 depthwise convolution's FLOPs."""
    if node.op_type not in ("Conv", "ConvTranspose") or len(node.input) < 3 or not node.input[2]:
        return False
    return torchscript and _torchscript_folded(node) or node.input[2] == f"{node.input[1]}_bias"


def _weight_types(graph: onnx.GraphProto) -> dict[str, tuple[list[int], int]]:
    """The dims and element type of each initializer, and of each graph input of known dims: a file exported with
    ``export_params=False`` feeds its (folded) weights as inputs."""
    types = {value.name: ([d.dim_value for d in value.type.tensor_type.shape.dim], value.type.tensor_type.elem_type)
             for value in graph.input if value.type.HasField("tensor_type")
             and all(d.dim_value > 0 for d in value.type.tensor_type.shape.dim)}
    types.update((t.name, (list(t.dims), t.data_type)) for t in graph.initializer)
    return types


def _output_channels(node: onnx.NodeProto, weights: dict[str, tuple[list[int], int]]) -> int | None:
    """The channels (features) the batch norm normalised: read from the weight's dims."""
    if len(node.input) < 2 or node.input[1] not in weights:
        return None
    dims = weights[node.input[1]][0]
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


#: What the name of a restored batch norm, and of the tensor it reads, end with.
_NORM_SUFFIX, _BEFORE_SUFFIX = "__batch_norm", "__before_batch_norm"


def is_restored_batch_norm(name: str, data: dict) -> bool:
    """Whether a node of an annotated graph is a batch norm :func:`restore_folded_batchnorms` put back."""
    first = data["inputs"][0] if data["op"] == "BatchNormalization" and data["inputs"] else None
    return name.endswith(_NORM_SUFFIX) and first is not None and first.name.endswith(_BEFORE_SUFFIX)


def _batch_norm_after(node: onnx.NodeProto, channels: int, data_type: int, graph: onnx.GraphProto) -> onnx.NodeProto:
    """A BatchNormalization reading the node's output, which now goes to a new tensor; the metadata moves."""
    base = node.name or node.output[0]
    before = f"{node.output[0]}{_BEFORE_SUFFIX}"
    if data_type not in _FLOAT_TYPES:
        data_type = onnx.TensorProto.FLOAT
    parameters = []
    for role in ("scale", "bias", "mean", "var"):
        parameters.append(f"{base}__batch_norm_{role}")
        graph.initializer.append(_weight_free(parameters[-1], data_type, channels))
    # no training_mode attribute (ONNX would want the running statistics as outputs too): the moved metadata names
    # the training-mode aten call, which is how the graph reader tells (:func:`exported_in_training_mode`)
    norm = helper.make_node("BatchNormalization", [before, *parameters], [node.output[0]],
                            name=f"{base}{_NORM_SUFFIX}", epsilon=1e-5)
    kept = [p for p in node.metadata_props if p.key not in _CALL_METADATA]
    moved = [p for p in node.metadata_props if p.key in _CALL_METADATA]
    norm.metadata_props.extend(moved)
    del node.metadata_props[:]
    node.metadata_props.extend(kept)
    node.output[0] = before
    return norm


def _weight_free(name: str, data_type: int, channels: int) -> onnx.TensorProto:
    """A per-channel parameter with its dims and type but no bytes (as ``lilou zoo export --strip-weights`` writes
    weights): a file that claims a billion channels must not make Lilou allocate them."""
    tensor = onnx.TensorProto(name=name, data_type=data_type, dims=[channels])
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", "restored-batch-norm"), ("offset", "0"),
                       ("length", str(channels * helper.tensor_dtype_to_np_dtype(data_type).itemsize))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


#: The aten batch norms that normalise with the batch's statistics (``_no_training`` and ``_no_update`` do not).
_TRAINING_BATCH_NORM = re.compile(r"_native_batch_norm_legit(?!_no_training)|_batch_norm_with_update")


def exported_in_training_mode(node: onnx.NodeProto) -> bool:
    """A BatchNormalization that the dynamo exporter wrote for a training-mode aten batch norm: it writes
    ``_native_batch_norm_legit_functional`` (a module left in ``train()``) as an ONNX BatchNormalization without
    ``training_mode``, but names the aten op in the node's name and metadata, and PyTorch ran it with the batch's
    statistics. Batch norms restored here carry that metadata too."""
    texts = [node.name] + [p.value for p in node.metadata_props if p.key in ("namespace", "pkg.torch.onnx.fx_node")]
    return any(_TRAINING_BATCH_NORM.search(protobuf_text(text)) for text in texts)
