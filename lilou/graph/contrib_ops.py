"""onnxruntime's contrib ops written back as the standard ops eager PyTorch runs.

onnxruntime's transformer optimizer (``onnxruntime.transformers.optimizer``, which Hugging Face Optimum's
``ORTOptimizer`` runs) rewrites an exported model for onnxruntime: the bias add, residual add and layer norm
after an attention or MLP block become one ``com.microsoft::SkipLayerNormalization``, a bias add and GELU one
``BiasGelu``, an RMS norm one ``SimplifiedLayerNormalization``. ONNX's shape inference does not know these ops,
so every tensor after the first had no shape (the costs of the whole model after it incomplete), and the fusion
model never saw them. Eager PyTorch runs the modules the optimizer matched, not its kernels: each contrib op is
written back as the nodes the TorchScript exporter writes for those modules at the file's opset (the patterns
the optimizer's fusions match, ``onnxruntime/python/tools/transformers/fusion_*.py``), so the rest of Lilou
prices an optimized file as the export it came from.

Written back: ``SkipLayerNormalization``, ``SkipSimplifiedLayerNormalization``, ``SimplifiedLayerNormalization``
and, in a file of opset < 17, ``LayerNormalization`` (onnxruntime registers both in the ONNX domain), ``BiasGelu``,
``Gelu``, ``FastGelu``, ``QuickGelu`` and ``BiasAdd``; BERT's ``Attention`` and ``EmbedLayerNormalization`` in
:mod:`lilou.graph.contrib_attention`, ``MultiHeadAttention`` in :mod:`lilou.graph.contrib_multihead` (both, in a file
onnxruntime-genai built, in :mod:`lilou.graph.contrib_sdpa`), Stable Diffusion's channels-last ops in
:mod:`lilou.graph.contrib_diffusion`, a saved session's fusions in :mod:`lilou.graph.contrib_session`;
``quantize_dynamic``'s ``DynamicQuantizeLSTM`` as the float LSTM a GPU runs (onnxruntime runs it on the CPU only), and the
``MatMulIntegerToFloat`` and ``DynamicQuantizeMatMul`` a session writes for a dynamically quantized model as the ops
``quantize_dynamic`` wrote (:mod:`lilou.graph.quantized` then reads those as INT8 matmuls). A node whose
extra outputs (mean, inverse standard deviation) something reads stays as it is, and so does an attention form those
modules do not reproduce: the warnings name them as unsupported (the quantized ops are :mod:`lilou.graph.quantized`'s).
onnxruntime-genai's decoder attention, ``GroupQueryAttention``, is written back in :mod:`lilou.graph.contrib_decoder`
(at opset 23, the file's opset raised where its ops mean the same there)."""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping

import onnx
from onnx import TensorProto

from lilou.graph.constants import constant_tensors
from lilou.graph.contrib_attention import (attention_applies, declared_ranks, embed_applies, raw_masks,
                                           write_attention, write_embedding)
from lilou.graph.contrib_decoder import OPSET as DECODER_OPSET
from lilou.graph.contrib_diffusion import (bias_split_gelu_applies, group_norm_applies, nhwc_conv_applies,
                                           skip_group_norm_applies, write_bias_split_gelu, write_group_norm,
                                           write_nhwc_conv, write_skip_group_norm)
from lilou.graph.contrib_decoder import fold_rotary_embeddings, gqa_applies, gqa_head_size, write_gqa
from lilou.graph.contrib_sdpa import GENAI as SDPA_PRODUCER
from lilou.graph.contrib_sdpa import (sdpa_attention_applies, sdpa_multihead_applies, write_sdpa_attention,
                                      write_sdpa_multihead)
from lilou.graph.contrib_session import (fused_conv_applies, fused_gemm_applies, fused_matmul_applies,
                                         write_fused_conv, write_fused_gemm, write_fused_matmul)
from lilou.graph.contrib_multihead import multihead_applies, multihead_form, write_multihead
from lilou.graph.contrib_writer import (MARK, OpWriter, add_bias, dequantized_types, gelu, layer_norm, node_input,
                                       node_output, producers_and_reads, rms_norm)
from lilou.graph.exporter_fusions import element_types, node_attribute
from lilou.graph.opset_upgrade import can_raise, raise_opset

MICROSOFT = "com.microsoft"
_ONNX = ("", "ai.onnx")
#: onnxruntime's encoder attention ops, which read a mask index, and the input they read it at.
_MASK_INPUTS = {"Attention": 3, "MultiHeadAttention": 4}
_ATTENTIONS = frozenset(_MASK_INPUTS)
#: Rewrites with a check of their own (weights' shapes, attributes): onnxruntime's channels-last ops of diffusion
#: models (SkipGroupNorm apart, which needs the producers) and its session-level fusions.
_CHECKED = {(MICROSOFT, "NhwcConv"): (nhwc_conv_applies, write_nhwc_conv),
            (MICROSOFT, "GroupNorm"): (group_norm_applies, write_group_norm),
            (MICROSOFT, "BiasSplitGelu"): (bias_split_gelu_applies, write_bias_split_gelu),
            (MICROSOFT, "FusedConv"): (lambda node, dims: fused_conv_applies(node), write_fused_conv),
            (MICROSOFT, "FusedGemm"): (lambda node, dims: fused_gemm_applies(node), write_fused_gemm),
            (MICROSOFT, "FusedMatMul"): (fused_matmul_applies, write_fused_matmul),
            (MICROSOFT, "DynamicQuantizeLSTM"): (lambda node, dims: _quantized_lstm_applies(node, dims),
                                                 lambda w, node: _quantized_lstm(w, node)),
            (MICROSOFT, "MatMulIntegerToFloat"): (lambda node, dims: _has_inputs(node, 4),
                                                  lambda w, node: _matmul_integer_to_float(w, node)),
            (MICROSOFT, "DynamicQuantizeMatMul"): (lambda node, dims: _has_inputs(node, 3),
                                                   lambda w, node: _dynamic_quantize_matmul(w, node))}


def restore_contrib_ops(model: onnx.ModelProto) -> Counter[str]:
    """Write every contrib op this module knows back as standard ops (in place); how many of each op type."""
    graph = model.graph
    rotations = fold_rotary_embeddings(graph) if any(n.op_type == "RotaryEmbedding" for n in graph.node) else 0
    head_sizes = _decoder_head_sizes(graph)
    built = _built_attention(model)  # onnxruntime-genai's encoder-decoder attention: SDPA calls
    if (head_sizes or built) and can_raise(model, DECODER_OPSET):  # ONNX's Attention: opset 23
        raise_opset(model, DECODER_OPSET)
    opset = next((o.version for o in model.opset_import if o.domain in _ONNX), 0)
    writer = OpWriter(graph, opset, dequantized_types(graph, element_types(graph)))
    planned, absorbed = _planned(graph, opset, writer.dims, head_sizes, built if opset >= DECODER_OPSET else {})
    if not planned:
        return Counter({"RotaryEmbedding": rotations}) if rotations else Counter()
    taken = {name.partition(MARK)[0] for name in _names(graph) if MARK in name}  # labels a file already uses
    restored: Counter[str] = Counter()
    nodes: list[onnx.NodeProto] = []
    unread = _unread_mask_indices(graph, planned)
    for index, node in enumerate(graph.node):
        if index in unread or id(node) in absorbed:  # computed only for what a rewrite replaces
            continue
        rewrite = planned.get(index)
        if rewrite is None:
            nodes.append(node)
            continue
        label = node.name or f"{node.op_type}_{index}"
        if label in taken:  # a repeated node name: its new tensors must not collide
            label = f"{label}_{index}"
        taken.add(label)
        writer.start(node, label)
        rewrite(writer, node)
        nodes.extend(writer.finish())
        restored[node.op_type] += 1
    del graph.node[:]
    graph.node.extend(nodes)
    if rotations:
        restored["RotaryEmbedding"] += rotations
    return restored


def _unread_mask_indices(graph: onnx.GraphProto, planned: Mapping[int, object]) -> set[int]:
    """The ``ReduceSum`` nodes that computed a mask index (lengths per sequence) read only by attention nodes that
    are written back, which read the raw mask instead: eager never computed it."""
    masks = {index: node.output[0] for index, node in enumerate(graph.node)
             if node.op_type == "ReduceSum" and node.output and node.output[0]}
    if not masks or not planned:
        return set()
    readers: dict[str, list[int]] = {}
    for index, node in enumerate(graph.node):
        for name in node.input:
            readers.setdefault(name, []).append(index)
    outputs = {v.name for v in graph.output}
    return {index for index, name in masks.items()
            if name not in outputs and readers.get(name)
            and all(reader in planned and _reads_as_mask(graph.node[reader], name) for reader in readers[name])}


def _reads_as_mask(node: onnx.NodeProto, name: str) -> bool:
    """Whether an attention node reads ``name`` as its mask index, and as nothing else."""
    at = _MASK_INPUTS.get(node.op_type)
    return at is not None and [i for i, value in enumerate(node.input) if value == name] == [at]


def _built_attention(model: onnx.ModelProto) -> dict[int, Callable[[OpWriter, onnx.NodeProto], None]]:
    """Node index -> its SDPA rewrite, for every Attention and MultiHeadAttention of a file onnxruntime-genai built
    (:mod:`lilou.graph.contrib_sdpa`) that the rewrite reproduces."""
    graph = model.graph
    if model.producer_name != SDPA_PRODUCER or not any(n.op_type in _ATTENTIONS for n in graph.node):
        return {}
    dims = {t.name: tuple(t.dims) for t in graph.initializer}
    ranks = declared_ranks(graph)
    built: dict[int, Callable[[OpWriter, onnx.NodeProto], None]] = {}
    for index, node in enumerate(graph.node):
        if (node.domain, node.op_type) == (MICROSOFT, "Attention") and sdpa_attention_applies(node, dims):
            built[index] = write_sdpa_attention
        elif (node.domain, node.op_type) == (MICROSOFT, "MultiHeadAttention") and sdpa_multihead_applies(node, ranks):
            built[index] = lambda w, n: write_sdpa_multihead(w, n, ranks)
    return built


def _decoder_head_sizes(graph: onnx.GraphProto) -> dict[int, int]:
    """Node index -> head size, for every GroupQueryAttention :func:`write_gqa` reproduces."""
    if not any(node.op_type == "GroupQueryAttention" for node in graph.node):
        return {}
    dims = {t.name: tuple(t.dims) for t in graph.initializer}
    for value in graph.input:
        shape = value.type.tensor_type.shape
        if value.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in shape.dim):
            dims.setdefault(value.name, tuple(d.dim_value for d in shape.dim))
    producers = {out: node for node in graph.node for out in node.output if out}
    constants = constant_tensors(graph)
    sizes = {}
    for index, node in enumerate(graph.node):
        if (node.domain, node.op_type) == (MICROSOFT, "GroupQueryAttention"):
            size = gqa_head_size(node, dims, producers, constants)
            if gqa_applies(node, size):
                sizes[index] = size
    return sizes


def _planned(graph: onnx.GraphProto, opset: int, dims: dict[str, tuple[int, ...]], head_sizes: dict[int, int],
             built: Mapping[int, Callable[[OpWriter, onnx.NodeProto], None]],
             ) -> tuple[dict[int, Callable[[OpWriter, onnx.NodeProto], None]], set[int]]:
    """Node index -> its rewrite, for every contrib node this module reproduces, and the ids of the nodes those
    rewrites replace beside their own (a packed projection). The embedding op goes only with every attention op
    that reads its mask index (which the rewrite replaces by the raw mask)."""
    read = {name for node in graph.node for name in node.input} | {v.name for v in graph.output}
    attentions = any(node.op_type in _ATTENTIONS for node in graph.node)
    masks = raw_masks(graph) if attentions else {}
    producers, reads = producers_and_reads(graph) if attentions else ({}, {})
    for value in graph.output if attentions else ():  # a graph output is read too
        reads[value.name] = reads.get(value.name, 0) + 1
    initializers = {t.name: t for t in graph.initializer} if attentions else {}
    planned: dict[int, Callable[[OpWriter, onnx.NodeProto], None]] = {}
    absorbed: set[int] = set()
    embeddings: list[int] = []
    for index, node in enumerate(graph.node):
        key = (node.domain if node.domain not in _ONNX else "", node.op_type)
        if index in built:
            planned[index] = built[index]
        elif key == (MICROSOFT, "EmbedLayerNormalization"):
            embeddings.append(index)
        elif key == (MICROSOFT, "Attention"):
            if attention_applies(node, dims, opset):
                planned[index] = lambda w, n: write_attention(w, n, masks)
        elif key == (MICROSOFT, "SkipGroupNorm"):
            if skip_group_norm_applies(node, dims) and not _reads_statistics(node, read):
                producers = producers or producers_and_reads(graph)[0]
                planned[index] = lambda w, n, producers=producers: write_skip_group_norm(w, n, producers)
        elif key in _CHECKED and _CHECKED[key][0](node, dims):
            planned[index] = _CHECKED[key][1]
        elif key == (MICROSOFT, "MultiHeadAttention"):
            form = multihead_form(node, dims, producers, initializers, reads)
            if multihead_applies(node, form, node_input(node, 4) in masks, opset):
                planned[index] = lambda w, n, form=form: write_multihead(w, n, form, masks)
                absorbed.update(id(other) for other in form.absorbed)
        elif key == (MICROSOFT, "GroupQueryAttention"):
            if index in head_sizes and opset >= DECODER_OPSET:
                planned[index] = lambda w, n, size=head_sizes[index]: write_gqa(w, n, size)
        elif key in _REWRITES and _complete(node) and not any(out and out in read for out in node.output[1:3]) \
                and _own_op(node, opset):  # outputs 1-2 of the norms: mean and inverse deviation, no eager twin
            planned[index] = _REWRITES[key]
    for index in embeddings:
        node = graph.node[index]
        index_name = node_output(node, 1)
        readers = [i for i, other in enumerate(graph.node) if index_name and index_name in other.input]
        rewritten = all(i in planned and graph.node[i].op_type in _ATTENTIONS for i in readers) \
            and index_name not in {v.name for v in graph.output}
        if embed_applies(node, dims, opset, rewritten):
            planned[index] = write_embedding
    return planned, absorbed


def _reads_statistics(node: onnx.NodeProto, read: set[str]) -> bool:
    """SkipGroupNorm has only the normalized value and the sum as outputs; anything more has no eager twin."""
    return any(out and out in read for out in node.output[2:])


def _own_op(node: onnx.NodeProto, opset: int) -> bool:
    """Not a standard op: LayerNormalization is ONNX's own from opset 17 (onnxruntime's before it, last axis here)."""
    return node.op_type != "LayerNormalization" or (opset < 17 and node_attribute(node, "axis", -1) == -1)


def _names(graph: onnx.GraphProto) -> set[str]:
    return ({t.name for t in graph.initializer} | {v.name for v in graph.input}
            | {out for node in graph.node for out in node.output} | {node.name for node in graph.node})


def _complete(node: onnx.NodeProto) -> bool:
    """The inputs the op requires are there, and the output it is read by (a hostile file may drop either)."""
    required = _REQUIRED_INPUTS[node.op_type]
    return len(node.input) >= required and all(node.input[:required]) and bool(node_output(node, 0))


def _tanh_gelu(w: OpWriter, value: str, output: str, dtype: int | None) -> None:
    """GPT-2's ``gelu_new`` as exported: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    half = w.op("Mul", [value, w.constant("half", 0.5, value, dtype)], "half")
    cube = w.op("Pow", [value, w.constant("three", 3.0, value, dtype)], "cube")
    term = w.op("Mul", [cube, w.constant("coefficient", 0.044715, cube, dtype)], "term")
    inner = w.op("Add", [value, term], "inner")
    tanh = w.op("Tanh", [w.op("Mul", [inner, w.constant("scale", math.sqrt(2.0 / math.pi), inner, dtype)],
                                "scaled")], "tanh")
    shifted = w.op("Add", [tanh, w.constant("one", 1.0, tanh, dtype)], "shifted")
    w.op("Mul", [half, shifted], "gelu", output)


def _skip_sum(w: OpWriter, node: onnx.NodeProto, bias: str) -> str:
    """input (+ bias) + skip: the residual add, into the node's fourth output when it has one."""
    value = add_bias(w, node_input(node, 0), bias, "bias")
    return w.op("Add", [value, node_input(node, 1)], "residual", node_output(node, 3) or None)


def _skip_layer_norm(w: OpWriter, node: onnx.NodeProto) -> None:
    total = _skip_sum(w, node, node_input(node, 4))
    dtype = w.type_of(node_input(node, 2), node_input(node, 0))
    layer_norm(w, total, node_input(node, 2), node_input(node, 3), float(node_attribute(node, "epsilon", 1e-12)),
                node.output[0], dtype)


def _skip_simplified_layer_norm(w: OpWriter, node: onnx.NodeProto) -> None:
    total = _skip_sum(w, node, node_input(node, 3))
    rms_norm(w, total, node_input(node, 2), float(node_attribute(node, "epsilon", 1e-6)), TensorProto.FLOAT,
              node.output[0])


def _simplified_layer_norm(w: OpWriter, node: onnx.NodeProto) -> None:
    stash = node_attribute(node, "stash_type", TensorProto.FLOAT)
    if stash not in _STASH_TYPES:  # a damaged attribute (fuzz seed 3005): the op's default, float32
        stash = TensorProto.FLOAT
    rms_norm(w, node_input(node, 0), node_input(node, 1), float(node_attribute(node, "epsilon", 1e-5)),
              int(stash), node.output[0])


def _old_layer_norm(w: OpWriter, node: onnx.NodeProto) -> None:
    """onnxruntime's LayerNormalization in a file of opset < 17, where ONNX has none: the pre-17 export."""
    dtype = w.type_of(node_input(node, 1), node_input(node, 0))
    layer_norm(w, node_input(node, 0), node_input(node, 1), node_input(node, 2), float(node_attribute(node, "epsilon", 1e-5)),
                node.output[0], dtype)


def _bias_gelu(w: OpWriter, node: onnx.NodeProto) -> None:
    dtype = w.type_of(node_input(node, 1), node_input(node, 0))
    gelu(w, add_bias(w, node_input(node, 0), node_input(node, 1), "bias"), node.output[0], dtype)


def _fast_gelu(w: OpWriter, node: onnx.NodeProto) -> None:
    dtype = w.type_of(node_input(node, 1), node_input(node, 0))
    _tanh_gelu(w, add_bias(w, node_input(node, 0), node_input(node, 1), "bias"), node.output[0], dtype)


def _quick_gelu(w: OpWriter, node: onnx.NodeProto) -> None:
    """CLIP's QuickGELU, x * sigmoid(alpha x), as exported: Mul, Sigmoid, Mul. With alpha 1 it is ``F.silu`` (which
    onnxruntime's optimizer also fuses into QuickGelu): x * sigmoid(x), Sigmoid and Mul, one kernel in eager. It was
    written with its scale, three kernels (EfficientNet-B0 at batch 8 on an A10G: 357 kernels, 10.81 ms, against
    275 and 8.33 for the file before onnxruntime)."""
    value, dtype = node_input(node, 0), w.type_of(node_input(node, 0))
    alpha = float(node_attribute(node, "alpha", 1.702))
    scaled = value if alpha == 1.0 else w.op("Mul", [value, w.constant("alpha", alpha, value, dtype)], "scaled")
    w.op("Mul", [value, w.op("Sigmoid", [scaled], "sigmoid")], "gelu", node.output[0])


#: DynamicQuantizeLSTM's inputs that the LSTM reads (X, W, R, B, sequence_lens, initial_h, initial_c, P); the rest
#: are the weights' scales and zero points.
_LSTM_INPUTS = 8


def _quantized_lstm_applies(node: onnx.NodeProto, dims: Mapping[str, tuple[int, ...]]) -> bool:
    """Its quantized weights' shapes are stated: W [directions, input, 4 hidden], R [directions, hidden, 4 hidden]."""
    w, r = dims.get(node_input(node, 1)), dims.get(node_input(node, 2))
    return w is not None and r is not None and len(w) == 3 and len(r) == 3 and w[0] == r[0] and w[2] == r[2] == 4 * r[1]


def _quantized_lstm(w: OpWriter, node: onnx.NodeProto) -> None:
    """onnxruntime's ``DynamicQuantizeLSTM`` (what ``quantize_dynamic`` writes for every LSTM): the LSTM it quantizes,
    with FP32 weights in the LSTM's layout. onnxruntime runs the op on the CPU only; on a GPU the model runs its float
    LSTM (cuDNN's), which is what is priced. Its INT8 weights had no cost formula: the layer was a 0-FLOP memory pass
    (a 2-layer LSTM quantized this way came out 5.8x faster than its float export)."""
    directions, inputs, gates = w.dims[node_input(node, 1)]
    hidden = w.dims[node_input(node, 2)][1]
    weight = w.stub("w", TensorProto.FLOAT, (directions, gates, inputs))
    recurrent = w.stub("r", TensorProto.FLOAT, (directions, gates, hidden))
    names = [node_input(node, 0), weight, recurrent, *(node_input(node, i) for i in range(3, _LSTM_INPUTS))]
    while names and not names[-1]:
        names.pop()
    kept = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute
            if a.name in ("activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size",
                          "input_forget")}
    kept = {k: (v.decode() if isinstance(v, bytes) else [x.decode() if isinstance(x, bytes) else x for x in v]
                if isinstance(v, list) else v) for k, v in kept.items()}
    w.nodes.append(onnx.helper.make_node("LSTM", names, list(node.output), name=w.name("lstm"), **kept))


def _has_inputs(node: onnx.NodeProto, required: int) -> bool:
    """The first ``required`` inputs are given, and the output."""
    return len(node.input) >= required and all(node.input[:required]) and bool(node_output(node, 0))


def _matmul_integer_to_float(w: OpWriter, node: onnx.NodeProto) -> None:
    """``MatMulIntegerToFloat(A, B, a_scale, b_scale, [a_zero_point], [b_zero_point], [bias])``: what an onnxruntime
    session fuses of ``quantize_dynamic``'s MatMulInteger, its cast, its scale multiplications and the bias add after
    it. Without this its INT8 GEMM was a 0-FLOP fallback kernel (a dynamically quantized BERT-base saved by a session
    read 5.3 GFLOPs in FP32 against 179 GFLOPs in INT8 for the file it came from)."""
    _integer_matmul(w, node, node.input[0], node_input(node, 2), node_input(node, 4), node_input(node, 3),
                    node_input(node, 5), node_input(node, 6))


def _dynamic_quantize_matmul(w: OpWriter, node: onnx.NodeProto) -> None:
    """``DynamicQuantizeMatMul(A, B, b_scale, [b_zero_point], [bias])``: the same, the activation's
    ``DynamicQuantizeLinear`` fused in too (where no other matmul reads its quantized copy)."""
    quantized, scale, point = w.name("quantized"), w.name("scale"), w.name("zero_point")
    w.nodes.append(onnx.helper.make_node("DynamicQuantizeLinear", [node.input[0]], [quantized, scale, point],
                                         name=w.name(f"{len(w.nodes)}_DynamicQuantizeLinear")))
    _integer_matmul(w, node, quantized, scale, point, node_input(node, 2), node_input(node, 3), node_input(node, 4))


def _integer_matmul(w: OpWriter, node: onnx.NodeProto, a: str, a_scale: str, a_point: str, b_scale: str, b_point: str,
                    bias: str) -> None:
    """``quantize_dynamic``'s matmul, as it writes it: the product of the scales, ``MatMulInteger`` (INT32), a cast to
    the scales' float type, the multiplication by the scales, then the bias add (the model's own)."""
    dtype = w.type_of(b_scale, a_scale)
    dtype = dtype if dtype in (TensorProto.FLOAT, TensorProto.FLOAT16) else TensorProto.FLOAT
    scales = w.op("Mul", [a_scale, b_scale], "scales")
    inputs = [a, node.input[1], a_point, b_point]
    while not inputs[-1]:
        inputs.pop()
    product = w.op("MatMulInteger", inputs, "product")
    scaled = w.op("Mul", [w.op("Cast", [product], "as_float", to=dtype), scales], "scaled",
                  None if bias else node.output[0])
    if bias:
        w.op("Add", [scaled, bias], "bias", node.output[0])


def _device_copy(w: OpWriter, node: onnx.NodeProto) -> None:
    """onnxruntime's ``MemcpyFromHost``/``MemcpyToHost``, which a session placing some nodes (shape arithmetic) on the
    CPU writes into the model it saves: eager keeps those values on the host (Python ints), so no copy runs."""
    w.op("Identity", [node_input(node, 0)], "copy", node.output[0])


def _bias_add(w: OpWriter, node: onnx.NodeProto) -> None:
    w.op("Add", [w.op("Add", [node_input(node, 0), node_input(node, 1)], "bias"), node_input(node, 2)], "residual",
         node.output[0])


#: The types a norm may compute its statistics in (``stash_type``).
_STASH_TYPES = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE})

#: Inputs each op requires (the others are optional and may be empty names).
_REQUIRED_INPUTS = {"LayerNormalization": 2, "SkipLayerNormalization": 3, "SkipSimplifiedLayerNormalization": 3,
                    "SimplifiedLayerNormalization": 2, "BiasGelu": 2, "Gelu": 1, "FastGelu": 1, "QuickGelu": 1,
                    "BiasAdd": 3, "MemcpyFromHost": 1, "MemcpyToHost": 1}

_REWRITES: dict[tuple[str, str], Callable[[OpWriter, onnx.NodeProto], None]] = {
    (MICROSOFT, "SkipLayerNormalization"): _skip_layer_norm,
    (MICROSOFT, "SkipSimplifiedLayerNormalization"): _skip_simplified_layer_norm,
    ("", "SimplifiedLayerNormalization"): _simplified_layer_norm,
    ("", "LayerNormalization"): _old_layer_norm,
    (MICROSOFT, "SimplifiedLayerNormalization"): _simplified_layer_norm,
    (MICROSOFT, "BiasGelu"): _bias_gelu,
    (MICROSOFT, "Gelu"): lambda w, node: gelu(w, node_input(node, 0), node.output[0], w.type_of(node_input(node, 0))),
    (MICROSOFT, "FastGelu"): _fast_gelu,
    (MICROSOFT, "QuickGelu"): _quick_gelu,
    (MICROSOFT, "BiasAdd"): _bias_add,
    ("", "MemcpyFromHost"): _device_copy,  # registered in the ONNX domain by onnxruntime
    ("", "MemcpyToHost"): _device_copy,
    (MICROSOFT, "MemcpyFromHost"): _device_copy,
    (MICROSOFT, "MemcpyToHost"): _device_copy,
}
