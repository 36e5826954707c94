"""onnxruntime's ``com.microsoft::MultiHeadAttention`` written back as the attention the exporter wrote.

onnxruntime's transformer optimizer writes ``MultiHeadAttention`` where its attention fusion leaves the three
projections outside the op (``FusionOptions.use_multi_head_attention``; BERT-like encoders optimized that way, and
the form its fusions for CLIP, UNet and VAE attention write): the query, key and value ``MatMul`` stay, and the op
adds their biases (one concatenated input), splits the heads, computes ``softmax(Q.K^T scale + mask) V`` and merges
the heads. ONNX's shape inference does not know it: every shape after the first layer was unknown.

Eager runs the module the op replaced. It is written back as the TorchScript export of that module (the pattern the
optimizer's fusion matched, as :mod:`lilou.graph.contrib_attention` does for ``Attention``): per Q, K and V the
bias ``Add``, ``Reshape`` to heads and ``Transpose``; ``MatMul``, ``Div`` by sqrt(head size) (``Mul`` by the
``scale`` attribute when it is set), ``Add`` of the extended key-padding mask and of the attention bias,
``Softmax``, ``MatMul``, ``Transpose``, ``Reshape``.

Written back: query, key and value each a projection's output (batch, sequence, hidden): self- or
cross-attention; the key-padding mask as the raw (batch, key length) mask or as the mask index onnxruntime computed
from one (:func:`lilou.graph.contrib_attention.raw_masks`); the attention bias. Left as they are, and named
unsupported: packed QKV or KV (5-D query or key), keys and values already split into heads (4-D, a cross-attention
cache), past key and value, causal (``unidirectional``) attention, any other mask form, and a node whose head size
its projections and bias do not give.
"""
from __future__ import annotations

from collections.abc import Mapping

import onnx

from lilou.graph.contrib_attention import attend, to_heads
from lilou.graph.contrib_writer import OpWriter, add_bias, node_input, node_output
from lilou.graph.exporter_fusions import node_attribute

#: MultiHeadAttention's inputs.
_QUERY, _KEY, _VALUE, _BIAS, _MASK, _ATTENTION_BIAS = 0, 1, 2, 3, 4, 5
#: The first input the rewrite does not reproduce (past key, past value, past length, cache indirection).
_PAST = 6
#: Ops whose output is a projection (batch, sequence, hidden) and whose weight gives its width.
_PROJECTIONS = frozenset({"MatMul", "Gemm"})


def multihead_widths(node: onnx.NodeProto, dims: Mapping[str, tuple[int, ...]],
                     producers: Mapping[str, onnx.NodeProto]) -> tuple[int, int, int] | None:
    """The query, key and value widths (heads x head size): each projection's weight width, or a third of the
    concatenated bias where no weight gives them; None where neither does or they disagree with the bias."""
    widths = [_projection_width(producers.get(node_input(node, index)), dims) for index in (_QUERY, _KEY, _VALUE)]
    bias = dims.get(node_input(node, _BIAS)) if node_input(node, _BIAS) else None
    if bias is not None and len(bias) != 1:
        return None
    if not all(widths):
        if bias is None or bias[0] % 3 or any(width and width != bias[0] // 3 for width in widths):
            return None
        widths = [bias[0] // 3] * 3
    if bias is not None and bias[0] != sum(widths):
        return None
    return widths[0], widths[1], widths[2]


def _projection_width(producer: onnx.NodeProto | None, dims: Mapping[str, tuple[int, ...]]) -> int:
    if producer is None or producer.op_type not in _PROJECTIONS or len(producer.input) < 2:
        return 0
    weight = dims.get(producer.input[1])
    if weight is None or len(weight) != 2:
        return 0
    transposed = producer.op_type == "Gemm" and node_attribute(producer, "transB", 0)
    return int(weight[0] if transposed else weight[1])


def multihead_applies(node: onnx.NodeProto, widths: tuple[int, int, int] | None, mask_is_raw: bool,
                      opset: int) -> bool:
    """Whether :func:`write_multihead` reproduces this node (see the module docstring): separate projected query,
    key and value, no past or present, not causal, a mask it can read, widths that split into the heads."""
    heads = int(node_attribute(node, "num_heads", 0))
    if opset < 13 or heads <= 0 or widths is None or not node_output(node, 0):
        return False
    if not all(node_input(node, index) for index in (_QUERY, _KEY, _VALUE)):
        return False  # packed QKV (the query alone) or packed KV (the key alone)
    if any(node.input[_PAST:]) or any(node.output[1:]) or node_attribute(node, "unidirectional", 0):
        return False
    if node_input(node, _MASK) and not mask_is_raw:
        return False
    return widths[0] == widths[1] and all(width % heads == 0 for width in widths)


def write_multihead(w: OpWriter, node: onnx.NodeProto, widths: tuple[int, int, int],
                    raw_masks: Mapping[str, str]) -> None:
    """The attention of ``node`` (checked by :func:`multihead_applies`) after its projections."""
    heads = int(node_attribute(node, "num_heads", 0))
    bias = node_input(node, _BIAS)
    dtype = w.type_of(bias, node_input(node, _QUERY))
    starts = [0, widths[0], widths[0] + widths[1]]
    projected = []
    for index, name, start, width, perm in zip((_QUERY, _KEY, _VALUE), "qkv", starts, widths,
                                               ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3])):
        value = node_input(node, index)
        if bias:
            bounds = [w.ints(f"{name}_start", [start]), w.ints(f"{name}_end", [start + width]),
                      w.ints(f"{name}_axis", [0])]
            value = add_bias(w, value, w.op("Slice", [bias, *bounds], f"{name}_bias"), f"{name}_add")
        projected.append(to_heads(w, value, name, heads, width // heads, perm))
    mask = node_input(node, _MASK)
    attend(w, node, projected, widths[0] // heads, raw_masks.get(mask, mask) if mask else "",
           node_input(node, _ATTENTION_BIAS), dtype, widths[2])
