"""onnxruntime's decoder attention (``com.microsoft::GroupQueryAttention``) written back as what eager runs.

onnxruntime-genai's model builder (the files behind most ONNX LLMs on the Hugging Face Hub for onnxruntime:
Phi, Llama, Mistral, Qwen ...) writes each attention block as one ``GroupQueryAttention``: the packed (or separate)
Q, K and V projections in, the rotary embedding of Q and K, the KV cache grown by the new keys and values, causal
attention over it with fewer KV heads than query heads, the heads merged. ONNX's shape inference does not know the
op: every shape after the first layer was unknown and the model a string of fallback kernels.

Eager PyTorch runs the module the op replaced (Hugging Face's ``LlamaAttention`` with SDPA): views to heads, the
rotary embedding of Q and of K (``apply_rotary_pos_emb``: mul, ``rotate_half`` as slices, neg and cat, mul, add), the
cache update (``torch.cat`` of the past and the new keys, and values), one ``scaled_dot_product_attention`` call over
the grown cache (grouped-query heads), the heads merged (a copy). That is written here with the ops the exporters
write for those calls: the rotary embedding as the TorchScript exporter writes Hugging Face's code, the attention as
ONNX's own ``Attention`` of opset 23 (the dynamo exporter's form, priced as the one fused kernel), the file's opset
raised to 23 where its ops mean the same there (:mod:`lilou.graph.opset_upgrade`). The rotary tables are the rows of
the op's cos and sin caches at ``past length ... past length + new tokens - 1`` (the op's own ``position_ids`` where
it has them), gathered once per model as Hugging Face computes them once per forward.

An attention that caps its logits (``softcap``: Gemma 2, whose Hugging Face attention is eager because SDPA cannot
cap) is written back as that eager attention instead (:func:`_softcapped`). Qwen3's per-head ``q_norm``/``k_norm``
(fused into the op by the builder) are written back as the RMS norms eager runs.

Not modelled: a KV cache shared with the past buffer (``past_present_share_buffer``, the cache's full length
allocated once; the past is then taken as its bound length), ``local_window_size`` (sliding windows; priced as
attention over the whole cache the layer holds), smooth softmax and head sinks (elementwise work inside the kernel).
"""
from __future__ import annotations

from collections.abc import Mapping

import onnx
from onnx import TensorProto, numpy_helper

from lilou.graph.contrib_writer import OpWriter, node_input, node_output, producers_and_reads, rms_norm
from lilou.graph.exporter_fusions import node_attribute

#: The opset whose ``Attention`` the rewrite writes.
OPSET = 23
#: GroupQueryAttention's inputs.
_QUERY, _KEY, _VALUE, _PAST_KEY, _PAST_VALUE = 0, 1, 2, 3, 4
_COS, _SIN, _POSITIONS, _BIAS = 7, 8, 9, 10
#: The per-head RMS norm weights of the query and key (the builder fuses Qwen3's ``q_norm``/``k_norm`` here).
_Q_NORM, _K_NORM = 14, 15


def gqa_head_size(node: onnx.NodeProto, dims: Mapping[str, tuple[int, ...]],
                  producers: Mapping[str, onnx.NodeProto],
                  constants: Mapping[str, onnx.TensorProto] | None = None) -> int | None:
    """The head size of a GroupQueryAttention, from what is known before shape inference: the past key's last
    dimension (an input bound by ``--shape``) or the projection writing the query (:func:`gqa_projection_head_size`).
    Not the rotary cache: it holds half the rotated channels, fewer than a head's where the rotation is partial."""
    past = dims.get(node_input(node, _PAST_KEY))
    if past is not None and len(past) == 4 and past[3] > 0:
        return past[3]
    return gqa_projection_head_size(node, dims, producers, constants)


def gqa_projection_head_size(node: onnx.NodeProto, dims: Mapping[str, tuple[int, ...]],
                             producers: Mapping[str, onnx.NodeProto],
                             constants: Mapping[str, onnx.TensorProto] | None = None) -> int | None:
    """The head size the projection writing the query gives: its output width (a ``MatMul``'s weight, a
    ``MatMulNBits``'s ``N``, behind its bias ``Add`` where it has one) over the heads it holds (query, key and value
    heads when packed)."""
    heads, kv_heads = int(node_attribute(node, "num_heads", 0)), int(node_attribute(node, "kv_num_heads", 0))
    producer = producers.get(node_input(node, _QUERY))
    if producer is not None and producer.op_type == "RotaryEmbedding" and producer.input:  # a separate rotation
        producer = producers.get(producer.input[0])
    if producer is not None and producer.op_type == "Split" and node_input(node, _KEY):  # [Q | K | V] split apart
        width = _split_width(producer, node_input(node, _QUERY), constants or {})
        return width // heads if heads > 0 and width and width % heads == 0 else None
    if producer is not None and producer.op_type == "Add":  # the projection's bias (Qwen2's packed QKV bias)
        producer = next((producers[name] for name in producer.input if name in producers
                         and producers[name].op_type in ("MatMul", "MatMulNBits")), None)
    width = 0
    if producer is not None and producer.op_type == "MatMul" and len(producer.input) > 1:
        weight = dims.get(producer.input[1])
        width = weight[1] if weight is not None and len(weight) == 2 else 0
    elif producer is not None and producer.op_type == "MatMulNBits":
        width = int(node_attribute(producer, "N", 0))
    parts = heads + 2 * kv_heads if not node_input(node, _KEY) else heads
    if parts > 0 and width > 0 and width % parts == 0:
        return width // parts
    return None


def _split_width(split: onnx.NodeProto, output: str, constants: Mapping[str, onnx.TensorProto]) -> int:
    """The width of one output of a ``Split`` along the last axis, from its constant sizes; 0 where not stated."""
    sizes = constants.get(node_input(split, 1))
    if sizes is None or sizes.data_type != TensorProto.INT64 or len(sizes.dims) != 1 or sizes.dims[0] > 16 \
            or sizes.data_location == TensorProto.EXTERNAL or output not in split.output:
        return 0
    try:
        values = [int(v) for v in numpy_helper.to_array(sizes).reshape(-1)]
    except (ValueError, TypeError):  # a damaged tensor
        return 0
    index = list(split.output).index(output)
    return values[index] if index < len(values) and values[index] > 0 else 0


def fold_rotary_embeddings(graph: onnx.GraphProto) -> int:
    """Move each pair of ``com.microsoft::RotaryEmbedding`` nodes that rotate a GroupQueryAttention's query and key
    into the attention (``do_rotary``), as the builder writes it for CUDA, in place; how many nodes moved.

    For DirectML (``-e dml``) onnxruntime-genai's builder rotates Q and K with two separate RotaryEmbedding nodes
    (the projections' outputs, the position ids and the same cos and sin caches in) and sets ``do_rotary`` 0. That
    is the same computation as the attention's own rotation, so the pair folds into it and the attention is written
    back as one (:func:`write_gqa`). Only where both rotations read the same caches and positions, rotate whole
    heads the attention's way (not interleaved differently, scale 1, not packed batching) and nothing else reads
    them."""
    producers, reads = producers_and_reads(graph)
    outputs = {value.name for value in graph.output}
    folded: set[int] = set()
    for node in graph.node:
        if (node.domain, node.op_type) != ("com.microsoft", "GroupQueryAttention") or \
                int(node_attribute(node, "do_rotary", 0)) or not node_input(node, _KEY):
            continue
        rotations = [producers.get(node_input(node, index)) for index in (_QUERY, _KEY)]
        if not all(_separate_rotation(r, reads, outputs) for r in rotations) or \
                any(id(r) in folded for r in rotations):
            continue
        q, k = rotations
        if list(q.input[1:4]) != list(k.input[1:4]) or \
                node_attribute(q, "interleaved", 0) != node_attribute(k, "interleaved", 0):
            continue
        while len(node.input) <= _POSITIONS:
            node.input.append("")
        node.input[_QUERY], node.input[_KEY] = q.input[0], k.input[0]
        node.input[_COS], node.input[_SIN], node.input[_POSITIONS] = q.input[2], q.input[3], q.input[1]
        for attribute in list(node.attribute):
            if attribute.name in ("do_rotary", "rotary_interleaved"):
                node.attribute.remove(attribute)
        node.attribute.extend([onnx.helper.make_attribute("do_rotary", 1),
                               onnx.helper.make_attribute("rotary_interleaved",
                                                          int(node_attribute(q, "interleaved", 0)))])
        folded.update((id(q), id(k)))
    if folded:
        kept = [node for node in graph.node if id(node) not in folded]
        del graph.node[:]
        graph.node.extend(kept)
    return len(folded)


def _separate_rotation(node: onnx.NodeProto | None, reads: Mapping[str, int], outputs: set[str]) -> bool:
    """A RotaryEmbedding over a 3-D projection whose whole heads it rotates, read once (by the attention)."""
    if node is None or (node.domain, node.op_type) != ("com.microsoft", "RotaryEmbedding"):
        return False
    if len(node.input) < 4 or not all(node.input[:4]) or len(node.output) != 1 or node.output[0] in outputs:
        return False
    if reads.get(node.output[0], 0) != 1 or node_attribute(node, "is_packed_batching", 0):
        return False
    return float(node_attribute(node, "scale", 1.0)) == 1.0 and int(node_attribute(node, "rotary_embedding_dim", 0)) == 0


def gqa_applies(node: onnx.NodeProto, head_size: int | None) -> bool:
    """Whether :func:`write_gqa` reproduces this node: head counts that group, Q/K/V packed or all three given,
    the past key and value together, a rotary embedding with both caches."""
    heads, kv_heads = int(node_attribute(node, "num_heads", 0)), int(node_attribute(node, "kv_num_heads", 0))
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads or not head_size or not node_output(node, 0):
        return False
    if bool(node_input(node, _KEY)) != bool(node_input(node, _VALUE)) or not node_input(node, _QUERY):
        return False
    if bool(node_input(node, _PAST_KEY)) != bool(node_input(node, _PAST_VALUE)):
        return False
    rotary = int(node_attribute(node, "do_rotary", 0))
    return not rotary or bool(node_input(node, _COS) and node_input(node, _SIN))


def write_gqa(w: OpWriter, node: onnx.NodeProto, head_size: int) -> None:
    """The attention block of ``node`` (checked by :func:`gqa_applies`) at opset 23."""
    heads, kv_heads = int(node_attribute(node, "num_heads", 0)), int(node_attribute(node, "kv_num_heads", 0))
    query = node_input(node, _QUERY)
    if node_input(node, _KEY):
        parts = [(query, heads, "q"), (node_input(node, _KEY), kv_heads, "k"), (node_input(node, _VALUE), kv_heads,
                                                                                  "v")]
    else:  # packed: the projections' outputs side by side, [Q | K | V] (torch.split: views)
        bounds = [0, heads * head_size, (heads + kv_heads) * head_size, (heads + 2 * kv_heads) * head_size]
        parts = [(w.op("Slice", [query, w.ints(f"{name}_start", [bounds[i]]), w.ints(f"{name}_end", [bounds[i + 1]]),
                                 w.ints(f"{name}_axis", [2])], f"{name}_split"), count, name)
                 for i, (name, count) in enumerate((("q", heads), ("k", kv_heads), ("v", kv_heads)))]
    q, k, v = (w.op("Transpose", [w.op("Reshape", [value, w.ints(f"{name}_shape", [0, 0, count, head_size])],
                                       f"{name}_heads")], f"{name}_transposed", perm=[0, 2, 1, 3])
               for value, count, name in parts)
    epsilon = float(node_attribute(node, "qk_norm_epsilon", 1e-6))
    if node_input(node, _Q_NORM):  # Qwen3's q_norm and k_norm: an RMS norm over each head (a Python module in eager)
        q = rms_norm(w, q, node_input(node, _Q_NORM), epsilon, TensorProto.FLOAT, None, "q_norm_")
    if node_input(node, _K_NORM):
        k = rms_norm(w, k, node_input(node, _K_NORM), epsilon, TensorProto.FLOAT, None, "k_norm_")
    if int(node_attribute(node, "do_rotary", 0)):
        cos, sin = _rotary_tables(w, node, query)
        table = w.dims.get(node_input(node, _COS), ())
        rotary_dim = min(2 * table[1], head_size) if len(table) == 2 and table[1] > 0 else head_size
        q, k = (_rotated(w, value, cos, sin, name, rotary_dim, head_size) for value, name in ((q, "q"), (k, "k")))
    caches = []
    for index, (new, past, name) in enumerate(((k, node_input(node, _PAST_KEY), "key"),
                                               (v, node_input(node, _PAST_VALUE), "value"))):
        present = node_output(node, 1 + index) or None
        if past:
            caches.append(w.op("Concat", [past, new], f"present_{name}", present, axis=2))
        else:
            caches.append(w.op("Identity", [new], f"present_{name}", present) if present else new)
    scale = float(node_attribute(node, "scale", 0.0))
    softcap = float(node_attribute(node, "softcap", 0.0))
    if softcap > 0 and not node_input(node, _BIAS):
        context = _softcapped(w, q, *caches, heads, heads // kv_heads, head_size, scale or head_size ** -0.5, softcap,
                              _cache_length_name(w.graph, node_input(node, _PAST_KEY)))
    else:
        attention = {"is_causal": 1}
        if scale:
            attention["scale"] = scale
        inputs = [q, *caches] + ([node_input(node, _BIAS)] if node_input(node, _BIAS) else [])
        context = w.op("Attention", inputs, "attention", **attention)
    merged = w.op("Transpose", [context], "merged", perm=[0, 2, 1, 3])
    w.op("Reshape", [merged, w.ints("out_shape", [0, 0, heads * head_size])], "out", node.output[0])


def _softcapped(w: OpWriter, q: str, k: str, v: str, heads: int, group: int, head_size: int, scale: float,
                softcap: float, length: str) -> str:
    """Hugging Face's ``eager_attention_forward`` with logit soft-capping (Gemma 2, whose default attention is eager
    because SDPA cannot cap): K and V repeated to every query head (``repeat_kv``: expand and reshape, a copy), the
    scaled scores capped (``tanh(x / cap) * cap``), the causal mask added, softmax, the product with V."""
    def repeated(value: str, name: str) -> str:
        if group == 1:
            return value
        copies = w.op("Concat", [w.unsqueeze(value, [2], f"{name}_one_group")] * group, f"{name}_groups", axis=2)
        return w.op("Reshape", [copies, w.ints(f"{name}_repeated_shape", [0, heads, -1, head_size])],
                    f"{name}_repeated")

    scores = w.op("MatMul", [q, w.op("Transpose", [repeated(k, "key")], "key_t", perm=[0, 1, 3, 2])], "scores")
    scores = w.op("Mul", [scores, w.constant("scale", scale, scores, None)], "scaled")
    capped = w.op("Tanh", [w.op("Div", [scores, w.constant("softcap", softcap, scores, None)], "over_cap")], "tanh")
    scores = w.op("Mul", [capped, w.constant("softcap_back", softcap, capped, None)], "capped")
    scores = w.op("Add", [scores, _causal_mask(w, scores, length)], "masked")
    probabilities = w.op("Softmax", [scores], "softmax", axis=-1)
    return w.op("MatMul", [probabilities, repeated(v, "value")], "context")


def _cache_length_name(graph: onnx.GraphProto, past: str) -> str:
    """What sizes a layer's cache: the name of its past input's length axis (``past_sliding_length`` for the
    sliding-window layers, ``past_sequence_length`` for the others), else the input itself."""
    value = next((v for v in graph.input if v.name == past), None)
    dims = value.type.tensor_type.shape.dim if value is not None and value.type.HasField("tensor_type") else []
    return dims[2].dim_param if len(dims) == 4 and dims[2].dim_param else past


def _causal_mask(w: OpWriter, scores: str, length: str) -> str:
    """The additive causal mask of scores (…, S, T): -10000 where a key comes after its query (key index - query
    index > T - S), in the scores' type; from the shapes alone, once per model and cache length (the sliding-window
    layers' and the others') as eager builds them once per forward."""
    key = f"causal_mask:{length}"
    if key in w.shared:
        return w.shared[key]
    shape = w.op("Shape", [scores], "scores_shape")
    last_two = w.op("Slice", [shape, w.ints("mask_start", [-2]), w.ints("mask_end", [2 ** 62])], "mask_dims")
    ones = w.op("ConstantOfShape", [last_two], "mask_ones", value=onnx.helper.make_tensor("one", TensorProto.FLOAT,
                                                                                        [1], [1.0]))
    queries = w.op("Gather", [shape, w.scalar_int("query_axis", -2)], "queries")
    keys = w.op("Gather", [shape, w.scalar_int("key_axis", -1)], "keys")
    offset = w.op("Add", [w.op("Sub", [keys, queries], "past"), w.scalar_int("next", 1)], "first_hidden")
    hidden = w.op("Trilu", [ones, offset], "hidden", upper=1)
    mask = w.op("Mul", [hidden, w.constant("mask_value", -10000.0, hidden, TensorProto.FLOAT)], "mask_float")
    w.shared[key] = w.op("CastLike", [mask, scores], "causal_mask")
    return w.shared[key]


def _rotary_tables(w: OpWriter, node: onnx.NodeProto, query: str) -> tuple[str, str]:
    """cos and sin at every position, [batch, 1, S, rotary dim], as Hugging Face's rotary module computes them once
    per forward (``cat(freqs, freqs)``): the rows of the op's caches at the positions, written once per model."""
    cos_cache, sin_cache = node_input(node, _COS), node_input(node, _SIN)
    key = f"rotary:{cos_cache}:{sin_cache}:{node_input(node, _POSITIONS)}"
    if key not in w.shared:
        positions = node_input(node, _POSITIONS) or _cache_positions(w, query, node_input(node, _PAST_KEY))
        tables = []
        for cache, name in ((cos_cache, "cos"), (sin_cache, "sin")):
            rows = w.op("Gather", [cache, positions], f"{name}_rows")
            tables.append(w.unsqueeze(w.op("Concat", [rows, rows], f"{name}_table", axis=-1), [1], f"{name}_heads"))
        w.shared[key] = "|".join(tables)
    cos, sin = w.shared[key].split("|")
    return cos, sin


def _rotated(w: OpWriter, value: str, cos: str, sin: str, name: str, rotary_dim: int, head_size: int) -> str:
    """``x * cos + rotate_half(x) * sin`` (Hugging Face's ``apply_rotary_pos_emb``; ``rotate_half`` is
    ``cat(-x2, x1)``), on the first ``rotary_dim`` channels of each head, the rest passed through (Phi-2)."""
    def part(source: str, start: int, end: int, step: str) -> str:
        bounds = [w.ints(f"{step}_start", [start]), w.ints(f"{step}_end", [end]), w.ints(f"{step}_axis", [3])]
        return w.op("Slice", [source, *bounds], step)

    whole, passed = value, None
    if rotary_dim < head_size:
        value, passed = part(whole, 0, rotary_dim, f"{name}_rot"), part(whole, rotary_dim, head_size, f"{name}_pass")
    half = rotary_dim // 2
    first, second = part(value, 0, half, f"{name}_first_half"), part(value, half, rotary_dim, f"{name}_second_half")
    turned = w.op("Concat", [w.op("Neg", [second], f"{name}_negated"), first], f"{name}_rotate_half", axis=-1)
    rotated = w.op("Add", [w.op("Mul", [value, cos], f"{name}_cos"), w.op("Mul", [turned, sin], f"{name}_sin")],
                   f"{name}_rotary")
    if passed is not None:
        rotated = w.op("Concat", [rotated, passed], f"{name}_with_pass", axis=-1)
    return rotated


def _cache_positions(w: OpWriter, query: str, past_key: str) -> str:
    """``past length + 0 ... past length + S - 1`` for every sequence ([batch, S]), from the shapes alone."""
    shape = w.op("Shape", [query], "query_shape")
    batch = w.op("Gather", [shape, w.scalar_int("batch_axis", 0)], "batch")
    length = w.op("Gather", [shape, w.scalar_int("seq_axis", 1)], "seq_length")
    start = (w.op("Gather", [w.op("Shape", [past_key], "past_shape"), w.scalar_int("past_axis", 2)], "past_length")
             if past_key else w.scalar_int("no_past", 0))
    steps = w.op("Range", [start, w.op("Add", [start, length], "end"), w.scalar_int("one", 1)], "positions")
    size = w.op("Concat", [w.unsqueeze(batch, [0], "batch_1d"), w.unsqueeze(length, [0], "length_1d")], "size",
                axis=0)
    return w.op("Expand", [w.unsqueeze(steps, [0], "positions_row"), size], "position_ids")
