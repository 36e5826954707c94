"""onnxruntime's BERT attention and embedding ops written back as the nodes the exporter writes for the modules.

``com.microsoft::Attention`` is a BERT self-attention block from the three projections to the merged heads, with
its Q, K and V weights concatenated into one initializer (hidden x 3 hidden). Eager runs what the module did: three
``Linear`` calls, ``Q.K^T`` scaled, the additive mask, softmax, ``P.V`` and the head merge (a copy). It is
written back as the TorchScript export of that module: per projection a ``Slice`` of the concatenated weight and
bias (constants: no kernel), ``MatMul`` + ``Add``, ``Reshape`` and ``Transpose`` to heads; then ``MatMul``, ``Div``
by sqrt(head size) (``Mul`` by the ``scale`` attribute when it is set), ``Add`` of the extended mask, ``Softmax``,
``MatMul``, ``Transpose``, ``Reshape``. The extended mask, ``(1 - mask[:, None, None, :]) * -10000`` in the
model's dtype, is written once per raw mask, as the model computed it once for every layer.

``com.microsoft::EmbedLayerNormalization`` is BERT's embeddings: three ``Gather`` (words, positions, token
types), their sum and a layer norm. Its second output, the mask index (lengths per sequence) that the attention
ops read, is replaced by the raw mask it was computed from (the op's ``mask`` input).

Only the forms these rewrites reproduce are written back: no past state or attention bias, not unidirectional,
no rotary embedding, weights and biases that are initializers; anything else stays and is named unsupported.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import onnx
from onnx import TensorProto, numpy_helper

from lilou.graph.contrib_writer import OpWriter, add_bias, layer_norm, node_input, node_output
from lilou.graph.exporter_fusions import node_attribute

#: The inputs EmbedLayerNormalization's mask and position ids are at.
_EMBED_MASK, _EMBED_POSITIONS = 7, 8


def attention_applies(node: onnx.NodeProto, dims: Mapping[str, tuple[int, ...]], opset: int) -> bool:
    """Whether :func:`write_attention` reproduces this Attention node (see the module docstring)."""
    weights, bias = dims.get(node_input(node, 1)), dims.get(node_input(node, 2))
    heads = int(node_attribute(node, "num_heads", 0))
    if opset < 10 or heads <= 0 or weights is None or bias is None or len(weights) != 2 or len(bias) != 1:
        return False
    if any(node.input[4:]) or any(node.output[1:]):  # past / attention bias / past length; present
        return False
    if node_attribute(node, "unidirectional", 0) or node_attribute(node, "do_rotary", 0):
        return False
    sizes = qkv_sizes(node, weights)
    return sizes is not None and bias[0] == sum(sizes) and sizes[0] == sizes[1] \
        and all(size % heads == 0 for size in sizes)


def qkv_sizes(node: onnx.NodeProto, weights: tuple[int, ...]) -> tuple[int, int, int] | None:
    """The Q, K and V widths of an Attention's packed weights: its ``qkv_hidden_sizes``, else a third each."""
    sizes = node_attribute(node, "qkv_hidden_sizes", None, kind=onnx.AttributeProto.INTS)
    if sizes:
        return tuple(int(s) for s in sizes) if len(sizes) == 3 and sum(sizes) == weights[1] else None
    return (weights[1] // 3,) * 3 if weights[1] % 3 == 0 else None


def write_attention(w: OpWriter, node: onnx.NodeProto, raw_masks: Mapping[str, str]) -> None:
    """The self-attention block of ``node`` (checked by :func:`attention_applies`)."""
    x, weights, bias, mask = (node_input(node, i) for i in range(4))
    heads = int(node_attribute(node, "num_heads", 0))
    sizes = qkv_sizes(node, w.dims[weights])
    dtype = w.type_of(bias, weights, x)
    starts = [0, sizes[0], sizes[0] + sizes[1]]
    with_bias = not w.is_zero(bias)  # a zero bias: the projections had none (diffusers' attention)
    projected = []
    for name, start, size, perm in zip("qkv", starts, sizes, ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3])):
        bounds = [w.ints(f"{name}_start", [start]), w.ints(f"{name}_end", [start + size])]
        weight = w.op("Slice", [weights, *bounds, w.ints(f"{name}_axis", [1])], f"{name}_weight")
        part = w.op("Slice", [bias, *bounds, w.ints(f"{name}_bias_axis", [0])], f"{name}_bias") if with_bias else ""
        value = add_bias(w, w.op("MatMul", [x, weight], f"{name}_matmul"), part, f"{name}_add")
        projected.append(to_heads(w, value, name, heads, size // heads, perm))
    attend(w, node, projected, sizes[0] // heads, raw_masks.get(mask, ""), "", dtype, sizes[2])


def to_heads(w: OpWriter, value: str, name: str, heads: int, head_size: int, perm: list[int]) -> str:
    """A projection (batch, sequence, heads x head size) viewed as heads and transposed (``view``, ``permute``)."""
    heads_view = w.op("Reshape", [value, w.ints(f"{name}_shape", [0, 0, heads, head_size])], f"{name}_heads")
    return w.op("Transpose", [heads_view], f"{name}_transposed", perm=perm)


def attend(w: OpWriter, node: onnx.NodeProto, qkv: list[str], head_size: int, raw_mask: str, attention_bias: str,
           dtype: int | None, width: int) -> None:
    """Eager attention over heads Q, K^T and V into ``node``'s output: ``Q.K^T`` scaled (``Mul`` by the node's
    ``scale``, else ``Div`` by sqrt(head size)), the extended raw mask and the attention bias added, softmax,
    ``P.V``, the heads merged to ``width``."""
    query, key, value = qkv
    scores = w.op("MatMul", [query, key], "scores")
    scale = float(node_attribute(node, "scale", 0.0))
    if scale:
        scores = w.op("Mul", [scores, w.constant("scale", scale, scores, dtype)], "scaled")
    else:
        scores = w.op("Div", [scores, w.constant("sqrt_head", math.sqrt(head_size), scores, dtype)], "scaled")
    if raw_mask:
        scores = w.op("Add", [scores, extended_mask(w, raw_mask, dtype)], "masked")
    if attention_bias:
        scores = w.op("Add", [scores, attention_bias], "biased")
    probabilities = w.op("Softmax", [scores], "softmax", axis=-1)
    context = w.op("Transpose", [w.op("MatMul", [probabilities, value], "context")], "merged", perm=[0, 2, 1, 3])
    w.op("Reshape", [context, w.ints("out_shape", [0, 0, width])], "out", node.output[0])


def extended_mask(w: OpWriter, raw: str, dtype: int | None) -> str:
    """``(1 - mask[:, None, None, :]) * -10000`` in ``dtype``, written once per raw mask."""
    if raw in w.shared:
        return w.shared[raw]
    wide = w.op("Cast", [w.unsqueeze(raw, [1, 2], "mask_unsqueezed")], "mask_cast",
                to=dtype if dtype is not None else TensorProto.FLOAT)
    inverted = w.op("Sub", [w.constant("one", 1.0, wide, dtype), wide], "mask_inverted")
    w.shared[raw] = w.op("Mul", [inverted, w.constant("mask_value", -10000.0, inverted, dtype)], "mask_extended")
    return w.shared[raw]


def embed_applies(node: onnx.NodeProto, dims: Mapping[str, tuple[int, ...]], opset: int,
                  mask_readers_rewritten: bool) -> bool:
    """Whether :func:`write_embedding` reproduces this EmbedLayerNormalization node: tables that are initializers,
    and a mask index read by nothing or only by Attention nodes that are written back too."""
    tables = [node_input(node, i) for i in (2, 3)] + ([node_input(node, 4)] if node_input(node, 1) else [])
    if opset < 11 or not all(t in dims for t in tables) or not node_input(node, 5):
        return False
    return not node_output(node, 1) or mask_readers_rewritten


def write_embedding(w: OpWriter, node: onnx.NodeProto) -> None:
    """BERT's embeddings: Gather of words, positions (given, or 0 ... S-1) and token types, summed, layer norm."""
    ids, segments, words, positions_table, segment_table, gamma, beta = (node_input(node, i) for i in range(7))
    position_ids = node_input(node, _EMBED_POSITIONS)
    if not position_ids:  # 0 ... S-1 for every sequence, from the ids' shape
        length = w.op("Gather", [w.op("Shape", [ids], "ids_shape"), w.scalar_int("seq_axis", 1)], "seq_length")
        steps = w.op("Range", [w.scalar_int("zero", 0), length, w.scalar_int("one", 1)], "positions")
        position_ids = w.unsqueeze(steps, [0], "position_ids")
    total = w.op("Add", [w.op("Gather", [words, ids], "words"), w.op("Gather", [positions_table, position_ids],
                                                                       "positions_embedded")], "sum", None)
    if segments and segment_table:
        total = w.op("Add", [total, w.op("Gather", [segment_table, segments], "segments")], "sum_segments")
    if node_output(node, 2):  # the embedding sum, read by someone
        total = w.op("Identity", [total], "embedding_sum", node_output(node, 2))
    layer_norm(w, total, gamma, beta, float(node_attribute(node, "epsilon", 1e-12)), node.output[0],
               w.type_of(gamma, words))


def raw_masks(graph: onnx.GraphProto) -> dict[str, str]:
    """Mask index -> the raw (batch, sequence) mask it came from: an EmbedLayerNormalization's second output, or
    the lengths per sequence onnxruntime's attention fusion computes from a raw mask (``ReduceSum`` over its second
    axis, not kept); a raw mask itself -> itself."""
    masks = {node.output[1]: node.input[_EMBED_MASK] for node in graph.node
             if node.op_type == "EmbedLayerNormalization" and len(node.output) > 1 and node.output[1]
             and len(node.input) > _EMBED_MASK and node.input[_EMBED_MASK]}
    ranks = declared_ranks(graph)
    constants = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "ReduceSum" and node.input and node.output and ranks.get(node.input[0]) == 2 \
                and not node_attribute(node, "keepdims", 1) and _reduced_axes(node, constants) in ([1], [-1]):
            masks[node.output[0]] = node.input[0]
    masks.update({name: name for name, rank in ranks.items() if rank == 2 and name not in masks})
    return masks


def declared_ranks(graph: onnx.GraphProto) -> dict[str, int]:
    """The rank of every graph input that declares one, and of the casts of them (the int32 copy of a mask)."""
    ranks = {value.name: len(value.type.tensor_type.shape.dim) for value in graph.input
             if value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape")}
    for node in graph.node:
        if node.op_type == "Cast" and node.input and node.output and node.input[0] in ranks:
            ranks[node.output[0]] = ranks[node.input[0]]
    return ranks


def _reduced_axes(node: onnx.NodeProto, constants: Mapping[str, onnx.TensorProto]) -> list[int] | None:
    """A ReduceSum's axes: an attribute before opset 13, its second input from it, read where it is a constant."""
    attribute = node_attribute(node, "axes", None)
    if attribute is not None:
        return list(attribute) if isinstance(attribute, list) and all(isinstance(v, int) for v in attribute) else None
    axes = constants.get(node_input(node, 1))
    if axes is None or axes.data_type != TensorProto.INT64 or len(axes.dims) != 1 or axes.dims[0] != 1:
        return None
    return [int(value) for value in numpy_helper.to_array(axes).reshape(-1)]
