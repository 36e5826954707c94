"""onnxruntime's Stable Diffusion ops (UNet, VAE) written back as the NCHW modules eager PyTorch runs.

onnxruntime's transformer optimizer for diffusion models (``optimize_model(model_type="unet" | "vae")``, which the
Stable Diffusion pipelines of onnxruntime and Olive run) moves the convolutions and group norms to channels-last:
each ``Conv`` becomes ``com.microsoft::NhwcConv`` between two ``Transpose`` nodes (its weight stored O, kH, kW, I),
``nn.GroupNorm`` and the SiLU after it one ``GroupNorm`` (``channels_last`` 1 by default), the time-embedding add
before a group norm one ``SkipGroupNorm``, GEGLU's bias add, split and GELU one ``BiasSplitGelu``, and the
transposes between channels-last ops are dropped. ONNX's shape inference knows none of these ops.

Eager runs the diffusers modules in NCHW. Each op is written back as the TorchScript export of its module, with a
``Transpose`` from and to channels-last around it where the op reads or writes NHWC; the pairs of transposes that
undo each other are then removed (:mod:`lilou.graph.transposes`), so a chain of channels-last ops becomes the NCHW
chain of the export, and a transpose stays only where the export has one (the permute before an attention block's
flatten). Written back:

- ``NhwcConv``: ``Conv`` (its weight transposed back to O, I, kH, kW: a constant, no kernel).
- ``GroupNorm``: ``nn.GroupNorm`` as exported (``Reshape`` to groups, ``InstanceNormalization``, ``Reshape``
  back, ``Mul`` by gamma, ``Add`` of beta), then ``Sigmoid`` and ``Mul`` where ``activation`` is 1 (SiLU).
- ``SkipGroupNorm``: the sum ``x (+ bias) + skip`` (``temb[:, :, None, None]``: a view where the skip is the
  unsqueezed time embedding), the sum written out where a second output asks for it, then the group norm.
- ``BiasSplitGelu``: GEGLU, ``(x + bias).chunk(2, -1)``, the first half times ``gelu`` of the second.
"""
from __future__ import annotations

from collections.abc import Mapping

import onnx

from lilou.graph.contrib_writer import OpWriter, gelu, node_input, node_output
from lilou.graph.exporter_fusions import node_attribute
from lilou.graph.transposes import LAYOUT

#: Axis orders between channels-last and channels-first.
NHWC_TO_NCHW = [0, 3, 1, 2]
NCHW_TO_NHWC = [0, 2, 3, 1]
#: The ops whose rewrite writes transposes to and from channels-last (:mod:`lilou.graph.transposes` removes the
#: pairs once the types are known).
CHANNELS_LAST_OPS = frozenset({"NhwcConv", "GroupNorm", "SkipGroupNorm"})
#: The most groups a group norm is written back with (its InstanceNormalization constants hold one value per
#: group: a file declaring billions must not make Lilou allocate them; real models use 32).
_MAX_GROUPS = 1 << 12
#: Conv attributes NhwcConv carries over.
_CONV_ATTRIBUTES = frozenset({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})


def _layout(w: OpWriter, value: str, perm: list[int], step: str, output: str | None = None) -> str:
    """A transpose between channels-last and channels-first, marked as one (:mod:`lilou.graph.transposes`)."""
    out = w.op("Transpose", [value], step, output, perm=perm)
    w.nodes[-1].doc_string = LAYOUT
    return out


def nhwc_conv_applies(node: onnx.NodeProto, dims: Mapping[str, tuple[int, ...]]) -> bool:
    """A 2-D convolution whose weight is a constant (O, kH, kW, I): transposing it back launches nothing."""
    weight = dims.get(node_input(node, 1))
    return bool(node_input(node, 0)) and weight is not None and len(weight) == 4 and bool(node_output(node, 0)) \
        and all(a.name in _CONV_ATTRIBUTES for a in node.attribute)


def write_nhwc_conv(w: OpWriter, node: onnx.NodeProto) -> None:
    x = _layout(w, node_input(node, 0), NHWC_TO_NCHW, "to_nchw")
    weight = w.op("Transpose", [node_input(node, 1)], "weight_oihw", perm=NHWC_TO_NCHW)
    conv = w.op("Conv", [x, weight] + ([node_input(node, 2)] if node_input(node, 2) else []), "conv")
    w.nodes[-1].attribute.extend(node.attribute)
    _layout(w, conv, NCHW_TO_NHWC, "to_nhwc", node.output[0])


def group_norm_applies(node: onnx.NodeProto, dims: Mapping[str, tuple[int, ...]]) -> bool:
    """Constant per-channel gamma and beta whose channels split into the groups, the attributes the op defines."""
    gamma, beta = dims.get(node_input(node, 1)), dims.get(node_input(node, 2))
    groups = node_attribute(node, "groups", 0)
    if not isinstance(groups, int) or not 0 < groups <= _MAX_GROUPS or gamma is None or beta is None or gamma != beta \
            or len(gamma) != 1:
        return False
    if node_attribute(node, "channels_last", 1) not in (0, 1) or node_attribute(node, "activation", 0) not in (0, 1):
        return False
    return gamma[0] % groups == 0 and bool(node_input(node, 0)) and bool(node_output(node, 0))


def skip_group_norm_applies(node: onnx.NodeProto, dims: Mapping[str, tuple[int, ...]]) -> bool:
    bias = dims.get(node_input(node, 4)) if node_input(node, 4) else None
    return group_norm_applies(node, dims) and bool(node_input(node, 3)) and \
        (not node_input(node, 4) or bias == dims.get(node_input(node, 1)))


def write_group_norm(w: OpWriter, node: onnx.NodeProto) -> None:
    channels_last = node_attribute(node, "channels_last", 1)
    x = node_input(node, 0)
    if channels_last:
        x = _layout(w, x, NHWC_TO_NCHW, "to_nchw")
    _group_norm(w, node, x, None if channels_last else node.output[0], channels_last)


def write_skip_group_norm(w: OpWriter, node: onnx.NodeProto, producers: Mapping[str, onnx.NodeProto]) -> None:
    channels_last = node_attribute(node, "channels_last", 1)
    x, skip, bias = node_input(node, 0), node_input(node, 3), node_input(node, 4)
    if channels_last:
        x = _layout(w, x, NHWC_TO_NCHW, "to_nchw")
    total = x
    if bias:
        total = w.op("Add", [total, w.unsqueeze(bias, [1, 2], "bias_channels")], "bias")
    if channels_last:
        producer = producers.get(skip)
        if producer is not None and producer.op_type == "Unsqueeze":  # temb[:, None, None, :]: (N, 1, 1, C)
            skip = w.op("Reshape", [skip, w.ints("skip_shape", [0, -1, 1, 1])], "skip_channels")
        else:
            skip = _layout(w, skip, NHWC_TO_NCHW, "skip_to_nchw")
    total = w.op("Add", [total, skip], "skip")
    if node_output(node, 1):  # the sum, read by a residual connection
        if channels_last:
            _layout(w, total, NCHW_TO_NHWC, "sum_to_nhwc", node_output(node, 1))
        else:
            total = w.op("Identity", [total], "sum", node_output(node, 1))
    _group_norm(w, node, total, None if channels_last else node.output[0], channels_last)


def _group_norm(w: OpWriter, node: onnx.NodeProto, x: str, output: str | None, channels_last: int) -> None:
    """``nn.GroupNorm`` on NCHW ``x`` as TorchScript exports it, SiLU after it where the node says so; the result
    transposed back to channels-last into the node's output where the node writes NHWC."""
    gamma, beta = node_input(node, 1), node_input(node, 2)
    groups = int(node_attribute(node, "groups", 0))
    dtype = w.type_of(gamma, beta)
    grouped = w.op("Reshape", [x, w.ints("group_shape", [0, groups, -1])], "grouped")
    normalized = w.op("InstanceNormalization", [grouped, w.filled("ones", 1.0, groups, dtype),
                                                w.filled("zeros", 0.0, groups, dtype)], "instance_norm",
                      epsilon=float(node_attribute(node, "epsilon", 1e-5)))
    restored = w.op("Reshape", [normalized, w.op("Shape", [x], "shape")], "restored")
    activation = bool(node_attribute(node, "activation", 0))
    last = output if not activation and not channels_last else None
    scaled = w.op("Mul", [restored, w.unsqueeze(gamma, [1, 2], "gamma_channels")], "scaled")
    value = w.op("Add", [scaled, w.unsqueeze(beta, [1, 2], "beta_channels")], "shifted", last)
    if activation:
        last = output if not channels_last else None
        value = w.op("Mul", [value, w.op("Sigmoid", [value], "sigmoid")], "silu", last)
    if channels_last:
        _layout(w, value, NCHW_TO_NHWC, "to_nhwc", node.output[0])


def bias_split_gelu_applies(node: onnx.NodeProto, dims: Mapping[str, tuple[int, ...]]) -> bool:
    bias = dims.get(node_input(node, 1))
    return bool(node_input(node, 0)) and bias is not None and len(bias) == 1 and bias[0] % 2 == 0 \
        and bool(node_output(node, 0))


def write_bias_split_gelu(w: OpWriter, node: onnx.NodeProto) -> None:
    width = w.dims[node_input(node, 1)][0]
    dtype = w.type_of(node_input(node, 1), node_input(node, 0))
    total = w.op("Add", [node_input(node, 0), node_input(node, 1)], "bias")
    halves = [w.op("Slice", [total, w.ints(f"{name}_start", [start]), w.ints(f"{name}_end", [end]),
                             w.ints(f"{name}_axis", [-1])], name)
              for name, start, end in (("hidden", 0, width // 2), ("gate", width // 2, width))]
    w.op("Mul", [halves[0], gelu(w, halves[1], None, dtype)], "geglu", node.output[0])
