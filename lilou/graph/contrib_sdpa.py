"""onnxruntime-genai's encoder-decoder attention (Whisper) written back as the SDPA calls eager runs.

onnxruntime-genai's model builder writes Whisper as two files: the encoder, whose self-attention is one
``com.microsoft::Attention`` per layer (the packed Q, K and V weights in, no bias input: the Q and V biases are added
by the op from a constant the builder folds in, or not at all), and the decoder step, whose self-attention is one
``MultiHeadAttention`` per layer reading the Q, K and V projections and the cache of earlier tokens (``past_key`` and
``past_value``, written back grown as ``present_*``, ``unidirectional``) and whose cross-attention is one
``MultiHeadAttention`` reading the query and the encoder's keys and values, already split into heads (4-D inputs of
the decoder). ONNX's shape inference knows neither op.

These files are built from a Hugging Face model's weights, not traced from an export, so what eager runs is that
model with its default attention (``attn_implementation="sdpa"``): per layer the projections, the heads viewed, the
cache grown by ``torch.cat``, one ``F.scaled_dot_product_attention`` call, the heads merged. That is written here as
the dynamo exporter writes it at opset 23, ONNX's ``Attention`` priced as the one fused kernel (as
:mod:`lilou.graph.contrib_decoder` does for the builder's ``GroupQueryAttention``). The file is known by its
``producer_name`` (``onnxruntime-genai``); the same ops from onnxruntime's optimizer (``onnxruntime.transformers``)
replaced an exported pattern and are written back as that pattern (:mod:`lilou.graph.contrib_attention`,
:mod:`lilou.graph.contrib_multihead`).

Written back: ``Attention`` without past, mask or attention bias (its projections and biases as they are given);
``MultiHeadAttention`` with separate Q, K and V projections (and the past of the same layer, with its present
outputs) or with K and V already split into heads, no bias, mask or attention bias input. Anything else stays, named
unsupported.
"""
from __future__ import annotations

from collections.abc import Mapping

import onnx

from lilou.graph.contrib_attention import qkv_sizes, to_heads
from lilou.graph.contrib_writer import OpWriter, add_bias, node_input, node_output
from lilou.graph.exporter_fusions import node_attribute

#: The ``producer_name`` onnxruntime-genai's model builder writes.
GENAI = "onnxruntime-genai"
#: The opset of ONNX's ``Attention``.
OPSET = 23
#: MultiHeadAttention's inputs (:mod:`lilou.graph.contrib_multihead`).
_QUERY, _KEY, _VALUE, _BIAS, _MASK, _ATTENTION_BIAS, _PAST_KEY, _PAST_VALUE = range(8)
#: (batch, sequence, heads, head size) -> (batch, heads, sequence, head size).
_HEADS_FIRST = [0, 2, 1, 3]


def sdpa_attention_applies(node: onnx.NodeProto, dims: Mapping[str, tuple[int, ...]]) -> bool:
    """An encoder ``Attention``: packed constant weights whose Q, K and V widths split into the heads, a bias input
    (if any) as wide as they are together, no mask, past or attention bias, one output, not causal."""
    heads = int(node_attribute(node, "num_heads", 0))
    weights = dims.get(node_input(node, 1))
    if heads <= 0 or weights is None or len(weights) != 2 or not node_input(node, 0) or not node_output(node, 0):
        return False
    if any(node.input[3:]) or any(node.output[1:]) or node_attribute(node, "do_rotary", 0):
        return False
    sizes = qkv_sizes(node, weights)
    bias = dims.get(node_input(node, 2)) if node_input(node, 2) else None
    if sizes is None or sizes[0] != sizes[1] or any(size % heads for size in sizes):
        return False
    return not node_input(node, 2) or (bias is not None and bias == (sum(sizes),))


def write_sdpa_attention(w: OpWriter, node: onnx.NodeProto) -> None:
    heads = int(node_attribute(node, "num_heads", 0))
    x, weights, bias = node_input(node, 0), node_input(node, 1), node_input(node, 2)
    sizes = qkv_sizes(node, w.dims[weights])
    starts = [0, sizes[0], sizes[0] + sizes[1]]
    projected = []
    for name, start, size in zip("qkv", starts, sizes):
        bounds = [w.ints(f"{name}_start", [start]), w.ints(f"{name}_end", [start + size])]
        weight = w.op("Slice", [weights, *bounds, w.ints(f"{name}_axis", [1])], f"{name}_weight")
        value = w.op("MatMul", [x, weight], f"{name}_projection")
        if bias and not w.is_zero(bias):
            part = w.op("Slice", [bias, *bounds, w.ints(f"{name}_bias_axis", [0])], f"{name}_bias")
            value = add_bias(w, value, part, f"{name}_add")
        projected.append(to_heads(w, value, name, heads, size // heads, _HEADS_FIRST))
    _sdpa(w, node, *projected)


def sdpa_multihead_applies(node: onnx.NodeProto, ranks: Mapping[str, int]) -> bool:
    """A decoder ``MultiHeadAttention``: separate 3-D Q, K and V (with the layer's past and present, or neither) or a
    3-D query with K and V split into heads (4-D: declared so by the file's inputs); no bias, mask or attention bias."""
    heads = int(node_attribute(node, "num_heads", 0))
    query, key, value = (node_input(node, index) for index in (_QUERY, _KEY, _VALUE))
    if heads <= 0 or not (query and key and value) or not node_output(node, 0) or len(node.input) > _PAST_VALUE + 1:
        return False
    if any(node_input(node, index) for index in (_BIAS, _MASK, _ATTENTION_BIAS)):
        return False
    past = [node_input(node, index) for index in (_PAST_KEY, _PAST_VALUE)]
    present = [node_output(node, index) for index in (1, 2)]
    if ranks.get(key) == 4 and ranks.get(value) == 4:  # cross-attention over the encoder's cached keys and values
        return not any(past) and not any(present) and not node_attribute(node, "unidirectional", 0)
    return all(past) == all(present) and any(past) == all(past) and any(present) == all(present)


def write_sdpa_multihead(w: OpWriter, node: onnx.NodeProto, ranks: Mapping[str, int]) -> None:
    heads = int(node_attribute(node, "num_heads", 0))
    query, key, value = (node_input(node, index) for index in (_QUERY, _KEY, _VALUE))
    q = to_heads(w, query, "q", heads, -1, _HEADS_FIRST)  # the head size from the projection's width
    if ranks.get(key) == 4 and ranks.get(value) == 4:
        _sdpa(w, node, q, key, value)
        return
    grown = []
    for index, (new, name) in enumerate(((key, "key"), (value, "value"))):
        split = to_heads(w, new, name[0], heads, -1, _HEADS_FIRST)
        past = node_input(node, _PAST_KEY + index)
        grown.append(w.op("Concat", [past, split], f"present_{name}", node_output(node, 1 + index), axis=2)
                     if past else split)
    _sdpa(w, node, q, *grown)


def _sdpa(w: OpWriter, node: onnx.NodeProto, q: str, k: str, v: str) -> None:
    """One ``F.scaled_dot_product_attention`` over heads, the heads merged into the node's output."""
    attributes = {"is_causal": 1} if node_attribute(node, "unidirectional", 0) else {}
    scale = float(node_attribute(node, "scale", 0.0))
    if scale:
        attributes["scale"] = scale
    context = w.op("Attention", [q, k, v], "attention", **attributes)
    merged = w.op("Transpose", [context], "merged", perm=[0, 2, 1, 3])
    w.op("Reshape", [merged, w.ints("out_shape", [0, 0, -1])], "out", node.output[0])
