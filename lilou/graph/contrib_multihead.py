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
from one (:func:`lilou.graph.contrib_attention.raw_masks`); the attention bias. Packed forms too, as onnxruntime's
diffusion fusions write them (``enable_packed_qkv``, ``enable_packed_kv``, their default): one ``MatMul`` whose
weight interleaves every head's query, key and value (or key and value) columns, viewed as (batch, sequence, heads,
3 or 2, head size). Eager ran one ``Linear`` per projection (diffusers' ``to_q``, ``to_k``, ``to_v``), so that
``MatMul`` and its view are written back as one ``MatMul`` per projection, each on its columns of the packed weight
(a constant slice: no kernel). Left as they are, and named unsupported: keys and values already split into heads
(4-D, a cross-attention cache), past key and value, causal (``unidirectional``) attention, any other mask form, a
packed input not written by a ``MatMul`` with a constant weight, and a node whose head size its projections and bias
do not give. (In a file onnxruntime-genai built, these ops, caches and 4-D keys included, are written back by
:mod:`lilou.graph.contrib_sdpa`.)
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import onnx
from onnx import numpy_helper

from lilou.graph.contrib_attention import attend, to_heads
from lilou.graph.contrib_writer import OpWriter, add_bias, node_input, node_output
from lilou.graph.exporter_fusions import node_attribute

#: MultiHeadAttention's inputs.
_QUERY, _KEY, _VALUE, _BIAS, _MASK, _ATTENTION_BIAS = 0, 1, 2, 3, 4, 5
#: The first input the rewrite does not reproduce (past key, past value, past length, cache indirection).
_PAST = 6
#: Ops whose output is a projection (batch, sequence, hidden) and whose weight gives its width.
_PROJECTIONS = frozenset({"MatMul", "Gemm"})


@dataclass(frozen=True)
class PackedProjection:
    """One ``MatMul`` writing the query, key and value (``parts`` 3) or key and value (2) of every head, viewed as
    (batch, sequence, heads, parts, head size)."""

    source: str
    weight: str
    heads: int
    parts: int
    head_size: int
    nodes: tuple[onnx.NodeProto, onnx.NodeProto]  # the MatMul and its view, which the rewrite replaces


@dataclass(frozen=True)
class MultiHeadForm:
    """What :func:`write_multihead` needs of a node: the query, key and value widths and the packed inputs."""

    widths: tuple[int, int, int]
    packed_qkv: PackedProjection | None = None
    packed_kv: PackedProjection | None = None

    @property
    def absorbed(self) -> tuple[onnx.NodeProto, ...]:
        return tuple(n for packed in (self.packed_qkv, self.packed_kv) if packed is not None for n in packed.nodes)


def multihead_form(node: onnx.NodeProto, dims: Mapping[str, tuple[int, ...]],
                   producers: Mapping[str, onnx.NodeProto], initializers: Mapping[str, onnx.TensorProto],
                   reads: Mapping[str, int]) -> MultiHeadForm | None:
    """The node's form: separate Q, K and V (:func:`multihead_widths`), packed QKV (the query alone) or packed KV
    (query and key, no value); None where the inputs are none of these or a packed input is not a MatMul's view."""
    query, key, value = (node_input(node, index) for index in (_QUERY, _KEY, _VALUE))
    heads = int(node_attribute(node, "num_heads", 0))
    if query and key and value:
        widths = multihead_widths(node, dims, producers)
        return MultiHeadForm(widths) if widths is not None else None
    if query and not key and not value:
        packed = packed_projection(query, 3, producers, dims, initializers, reads)
        if packed is None or packed.heads != heads:
            return None
        width = packed.heads * packed.head_size
        return MultiHeadForm((width, width, width), packed_qkv=packed)
    if query and key and not value:
        packed = packed_projection(key, 2, producers, dims, initializers, reads)
        if packed is None or packed.heads != heads:
            return None
        width = packed.heads * packed.head_size
        query_width = _projection_width(producers.get(query), dims) or width
        return MultiHeadForm((query_width, width, width), packed_kv=packed)
    return None


def packed_projection(name: str, parts: int, producers: Mapping[str, onnx.NodeProto],
                      dims: Mapping[str, tuple[int, ...]], initializers: Mapping[str, onnx.TensorProto],
                      reads: Mapping[str, int]) -> PackedProjection | None:
    """``Reshape(MatMul(x, W), [0, 0, heads, parts, head size])`` behind ``name``, each read only by the next, with
    W a constant (C, heads x parts x head size); None otherwise."""
    view = producers.get(name)
    if view is None or view.op_type != "Reshape" or len(view.input) != 2 or reads.get(name, 0) != 1:
        return None
    shape = _int_values(initializers.get(view.input[1]))
    matmul = producers.get(view.input[0])
    if shape is None or len(shape) != 5 or shape[:2] != [0, 0] or shape[3] != parts or min(shape[2], shape[4]) <= 0:
        return None
    if matmul is None or matmul.op_type != "MatMul" or len(matmul.input) != 2 or reads.get(view.input[0], 0) != 1:
        return None
    weight = dims.get(matmul.input[1])
    if weight is None or len(weight) != 2 or weight[1] != shape[2] * parts * shape[4]:
        return None
    return PackedProjection(matmul.input[0], matmul.input[1], shape[2], parts, shape[4], (matmul, view))


def _int_values(tensor: onnx.TensorProto | None) -> list[int] | None:
    if tensor is None or tensor.data_type != onnx.TensorProto.INT64 or len(tensor.dims) != 1 or tensor.dims[0] > 8 \
            or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None
    try:
        return [int(v) for v in numpy_helper.to_array(tensor).reshape(-1)]
    except (ValueError, TypeError):  # a damaged tensor
        return None


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


def multihead_applies(node: onnx.NodeProto, form: MultiHeadForm | None, mask_is_raw: bool, opset: int) -> bool:
    """Whether :func:`write_multihead` reproduces this node (see the module docstring): a form it knows, no past or
    present, not causal, a mask it can read, widths that split into the heads, no bias beside a packed input."""
    heads = int(node_attribute(node, "num_heads", 0))
    if opset < 13 or heads <= 0 or form is None or not node_output(node, 0):
        return False
    if any(node.input[_PAST:]) or any(node.output[1:]) or node_attribute(node, "unidirectional", 0):
        return False
    if node_input(node, _MASK) and not mask_is_raw:
        return False
    if node_input(node, _BIAS) and (form.packed_qkv or form.packed_kv):
        return False
    widths = form.widths
    return widths[0] == widths[1] and all(width % heads == 0 for width in widths)


def write_multihead(w: OpWriter, node: onnx.NodeProto, form: MultiHeadForm, raw_masks: Mapping[str, str]) -> None:
    """The attention of ``node`` (checked by :func:`multihead_applies`) after its projections."""
    heads, widths = int(node_attribute(node, "num_heads", 0)), form.widths
    bias = node_input(node, _BIAS)
    dtype = w.type_of(bias, node_input(node, _QUERY))
    if bias and w.is_zero(bias):  # the projections had no bias (diffusers' to_q, to_k, to_v)
        bias = ""
    values = [node_input(node, index) for index in (_QUERY, _KEY, _VALUE)]
    if form.packed_qkv is not None:
        values = [_projection(w, form.packed_qkv, part, name) for part, name in enumerate("qkv")]
    elif form.packed_kv is not None:
        values[1:] = [_projection(w, form.packed_kv, part, name) for part, name in enumerate("kv")]
    starts = [0, widths[0], widths[0] + widths[1]]
    projected = []
    for value, name, start, width, perm in zip(values, "qkv", starts, widths,
                                               ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3])):
        if bias:
            bounds = [w.ints(f"{name}_start", [start]), w.ints(f"{name}_end", [start + width]),
                      w.ints(f"{name}_axis", [0])]
            value = add_bias(w, value, w.op("Slice", [bias, *bounds], f"{name}_bias"), f"{name}_add")
        projected.append(to_heads(w, value, name, heads, width // heads, perm))
    mask = node_input(node, _MASK)
    attend(w, node, projected, widths[0] // heads, raw_masks.get(mask, mask) if mask else "",
           node_input(node, _ATTENTION_BIAS), dtype, widths[2])


def _projection(w: OpWriter, packed: PackedProjection, part: int, name: str) -> str:
    """One projection of a packed MatMul: ``x`` times its columns of the packed weight (head by head, the
    ``part``-th block of each: a constant slice)."""
    heads, size = packed.heads, packed.head_size
    blocks = w.op("Reshape", [packed.weight, w.ints(f"{name}_blocks", [0, heads, packed.parts, size])],
                  f"{name}_weight_blocks")
    column = w.op("Slice", [blocks, w.ints(f"{name}_part_start", [part]), w.ints(f"{name}_part_end", [part + 1]),
                            w.ints(f"{name}_part_axis", [2])], f"{name}_weight_part")
    weight = w.op("Reshape", [column, w.ints(f"{name}_columns", [0, heads * size])], f"{name}_weight")
    return w.op("MatMul", [packed.source, weight], f"{name}_projection")
