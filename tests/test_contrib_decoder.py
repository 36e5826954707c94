"""onnxruntime-genai's decoder files: ``GroupQueryAttention`` written back as what eager runs (lilou.graph.contrib_decoder),
at opset 23 (lilou.graph.opset_upgrade).

``tests/data/genai/llama-gqa-{fp16,int4}.onnx`` are real: the two-layer Llama of ``tests/data/kv_cache/llama-past.onnx``
(256 wide, 4 heads, 2 KV heads) built by onnxruntime-genai 0.18's model builder for CUDA (scripts/make_genai_fixtures.py),
weights stripped.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lilou.graph import build_graph
from lilou.graph.dag import load_graph
from lilou.graph.opset_upgrade import can_raise, raise_opset
from tests.onnx_builders import make_model, tensor

DATA = Path(__file__).resolve().parent / "data"
GENAI_FP16, KV_CACHE = DATA / "genai" / "llama-gqa-fp16.onnx", DATA / "kv_cache" / "llama-past.onnx"
STEP = {"batch_size": (2,), "sequence_length": (1,), "past_sequence_length": (511,), "total_sequence_length": (512,),
        "kv_cache_dim": (64,)}
PROMPT = {**STEP, "sequence_length": (128,), "past_sequence_length": (1,), "total_sequence_length": (129,)}


def _by_op(graph, op: str) -> list[dict]:
    return [data for _, data in graph.dag.nodes(data=True) if data["op"] == op and not data["constant"]]


def test_a_genai_decoder_has_every_shape_and_no_unsupported_op():
    graph = load_graph(GENAI_FP16, shapes=STEP)
    assert not graph.unsupported_ops and not any("unknown shape" in w for w in graph.warnings)
    assert any("onnxruntime's fused ops (2 GroupQueryAttention, 1 SimplifiedLayerNormalization, 4 "
               "SkipSimplifiedLayerNormalization)" in w for w in graph.warnings)
    assert {t.name: t.shape for t in graph.outputs} == {
        "logits": (2, 1, 1000), **{f"present.{i}.{kv}": (2, 2, 512, 64) for i in (0, 1) for kv in ("key", "value")}}
    attention = _by_op(graph, "Attention")
    assert [[t.shape for t in a["inputs"]] for a in attention] == [[(2, 4, 1, 64), (2, 2, 512, 64), (2, 2, 512, 64)]] * 2
    # Q.K^T and P.V over 512 cached positions for 2 x 4 query heads, mask and softmax per score, Q and K scaled
    scores = 2 * 4 * 1 * 512
    assert [a["flops"] for a in attention] == [2 * scores * 128 + (1 + 5) * scores + 2 * 4 * 64 + 2 * 4 * 512 * 64] * 2


def test_the_projections_cost_what_the_exported_decode_step_costs():
    """The builder packs Q, K and V into one GEMM: the same multiply-adds as the export's three projections."""
    genai = load_graph(GENAI_FP16, shapes=STEP)
    exported = load_graph(KV_CACHE, shapes={name: STEP[name] for name in ("batch_size", "sequence_length",
                                                                          "past_sequence_length")})
    assert sum(m["flops"] for m in _by_op(genai, "MatMul")) == \
        sum(m["flops"] for m in _by_op(exported, "MatMul") if m["inputs"][1].name.startswith("onnx::MatMul"))


def test_a_genai_decoder_is_predicted_in_fp16_with_one_attention_kernel_per_layer():
    from lilou.api import Predictor

    prediction = Predictor().predict(GENAI_FP16, gpu="a10g", shapes=STEP)
    # each torch.cat its own kernel; each RMS norm's rsqrt too (pow, mean, add, rsqrt, mul, mul: HF's LlamaRMSNorm)
    assert prediction.precision == "fp16" and len(prediction.kernels) == 89
    assert sum(kernel.ops == ("Sqrt", "Div") for kernel in prediction.kernels) == 5
    assert sum("Attention" in kernel.ops for kernel in prediction.kernels) == 2
    assert not any("unsupported op" in w for w in prediction.warnings)
    longer = Predictor().predict(GENAI_FP16, gpu="a10g", shapes={**STEP, "past_sequence_length": (4095,),
                                                                  "total_sequence_length": (4096,)})
    def attention_work(result) -> float:
        return sum(kernel.work_ms for kernel in result.kernels if "Attention" in kernel.ops)

    assert attention_work(longer) > attention_work(prediction)  # more cache to read each step (the step is host-bound)


def test_the_prompt_pass_grows_the_cache_by_its_tokens():
    graph = load_graph(GENAI_FP16, shapes=PROMPT)
    assert {t.name: t.shape for t in graph.outputs}["present.1.value"] == (2, 2, 129, 64)
    concats = [c for c in _by_op(graph, "Concat") if c["outputs"][0].name.startswith("present.0")]
    assert [[t.shape for t in c["inputs"]] for c in concats] == [[(2, 2, 1, 64), (2, 2, 128, 64)]] * 2


def test_the_opset_is_raised_with_the_reductions_axes_as_inputs():
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], name="mean", axes=[-1], keepdims=1),
             helper.make_node("ReduceSum", ["x", "axes"], ["total"], name="total", keepdims=1)]
    model = make_model(nodes, [tensor("x", [2, 8])], [tensor("mean", None), tensor("total", None)],
                       [numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes")], opset=14)
    assert can_raise(model, 23)
    raise_opset(model, 23)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    assert [list(n.input) for n in inferred.graph.node] == [["x", "mean/axes_opset18"], ["x", "axes"]]
    assert [(v.name, [d.dim_value for d in v.type.tensor_type.shape.dim]) for v in inferred.graph.output] == [
        ("mean", [2, 1]), ("total", [2, 1])]


@pytest.mark.parametrize(("op", "opset"), [("GroupNormalization", 18), ("DFT", 19), ("Upsample", 14)])
def test_a_graph_whose_ops_change_meaning_is_not_raised_and_its_attention_stays_unsupported(op, opset):
    model = onnx.load(GENAI_FP16, load_external_data=False)
    model.opset_import[0].version = opset
    model.graph.node.append(helper.make_node(op, ["logits"], ["odd"], name="odd"))
    assert not can_raise(model, 23)
    from lilou.graph.contrib_ops import restore_contrib_ops

    restored = restore_contrib_ops(model)
    assert "GroupQueryAttention" not in restored and model.opset_import[0].version == opset
    assert Counter(n.op_type for n in model.graph.node)["GroupQueryAttention"] == 2


def test_a_query_without_a_head_size_stays_unsupported():
    """No past key, no packed projection weight and no rotary cache: nothing says the head size."""
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "lengths", "total"], ["out"],
                            domain="com.microsoft", name="gqa", num_heads=4, kv_num_heads=2)
    model = make_model([node], [tensor("q", [2, 1, 256]), tensor("k", [2, 1, 128]), tensor("v", [2, 1, 128]),
                                tensor("lengths", [2], TensorProto.INT32), tensor("total", [], TensorProto.INT32)],
                       [tensor("out", None)], opset=22)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    graph = build_graph(model)
    assert graph.unsupported_ops == ["GroupQueryAttention"]


GENAI_INT4 = DATA / "genai" / "llama-gqa-int4.onnx"


def test_an_int4_genai_model_reads_its_weights_in_four_bits():
    """MatMulNBits (weights packed two per byte, blocks of 32 with their scales) is a float matmul reading the
    weight in 4 bits: the same FLOPs as the FP16 file's matmuls, a quarter of their weight bytes."""
    from lilou.graph.memory import memory_needed

    int4, fp16 = load_graph(GENAI_INT4, shapes=STEP), load_graph(GENAI_FP16, shapes=STEP)
    assert not int4.unsupported_ops
    assert any(w.startswith("weight-only quantized ops (11 MatMulNBits): priced as float matmuls and gathers "
                            "reading their weights in 4 or 8 bits") for w in int4.warnings)
    matmuls, float_matmuls = _by_op(int4, "MatMul"), _by_op(fp16, "MatMul")
    assert [m["flops"] for m in matmuls] == [m["flops"] for m in float_matmuls]
    weights = [m["inputs"][1] for m in matmuls]
    assert {w.dtype for w in weights} == {"uint4"}
    assert [w.nbytes * 4 for w in weights] == [m["inputs"][1].nbytes for m in float_matmuls]
    stored = sum(w.elements for w in weights)
    assert memory_needed(int4)[0] == memory_needed(fp16)[0] - stored * 3 // 2  # 2 bytes -> half a byte each


def test_an_int4_genai_model_is_predicted_in_fp16_with_less_gemm_work():
    from lilou.api import Predictor

    predictor = Predictor()
    shapes = {**STEP, "batch_size": (1,)}
    int4, fp16 = (predictor.predict(path, gpu="h100", shapes=shapes) for path in (GENAI_INT4, GENAI_FP16))
    assert int4.precision == fp16.precision == "fp16" and len(int4.kernels) == len(fp16.kernels)

    def gemm(result, field: str) -> float:
        return sum(getattr(kernel, field) for kernel in result.kernels if kernel.category == "gemm")

    # the GEMMs read their weights in four bits; on this tiny model's decode step they are at the measured GEMM floor
    # (lilou/latency/kernel_model/kernel_floor.py), so their work cannot go below FP16's, nor above it
    assert gemm(int4, "bytes") < gemm(fp16, "bytes")
    assert gemm(int4, "work_ms") <= gemm(fp16, "work_ms")


def test_four_bit_tensors_hold_two_elements_per_byte():
    from lilou.graph.costs import TensorInfo

    assert TensorInfo("w", (3, 5), "uint4", 1).nbytes == 8 and TensorInfo("w", (3, 5), "int8", 1).nbytes == 15


def test_the_total_length_and_the_cache_head_size_follow_from_three_names():
    """A user binds what they ask about (sequences, new and cached tokens); the attention mask's total length and
    the cache's head size follow (lilou.graph.implied_dimensions)."""
    from lilou.api import Predictor

    asked = {name: STEP[name] for name in ("batch_size", "sequence_length", "past_sequence_length")}
    predictor = Predictor()
    for path in (GENAI_FP16, GENAI_INT4):
        short, full = predictor.predict(path, gpu="a10g", shapes=asked), predictor.predict(path, gpu="a10g", shapes=STEP)
        assert short.latency_ms == full.latency_ms and len(short.kernels) == len(full.kernels)
        assert "total_sequence_length is bound to past_sequence_length + sequence_length = 512, as onnxruntime-genai " \
               "feeds it" in short.warnings
        assert "kv_cache_dim (the KV cache's head size) is bound to 64, the attention's head size" in short.warnings
        assert not any("is bound to" in w for w in full.warnings)


def test_the_cli_prices_a_genai_step_from_three_names(capsys):
    from tests.test_graph_errors import run_cli

    status, out, err = run_cli(capsys, "infer", str(GENAI_INT4), "--gpu", "a10g", "--shape", "batch_size=2",
                               "--shape", "sequence_length=1", "--shape", "past_sequence_length=511")
    assert status == 0, err
    assert "89 kernels" in out


GENAI_TIED = DATA / "genai" / "llama-gqa-int4-tied.onnx"


def test_int4_embeddings_tied_to_the_lm_head_are_gathered_in_four_bits():
    """``shared_embeddings``: the embedding table is the LM head's INT4 weight, read by GatherBlockQuantized."""
    from lilou.graph.memory import memory_needed

    asked = {"batch_size": (2,), "sequence_length": (128,), "past_sequence_length": (1,)}
    tied, untied = load_graph(GENAI_TIED, shapes=asked), load_graph(GENAI_INT4, shapes=asked)
    assert not tied.unsupported_ops
    assert any("weight-only quantized ops (1 GatherBlockQuantized, 11 MatMulNBits)" in w for w in tied.warnings)
    gather = tied.dag.nodes["/model/embed_tokens/GatherBlockQuantized"]
    assert gather["op"] == "Gather" and gather["inputs"][0].dtype == "uint4"
    assert gather["outputs"][0].dtype == "float16" and gather["outputs"][0].shape == (2, 128, 256)
    assert gather["bytes_read"] == 2 * 128 * 256 // 2 + 2 * 128 * 8  # the rows in 4 bits, the int64 ids
    # stored once (the LM head's), in place of the untied file's FP16 table of 1000 x 256
    assert memory_needed(tied)[0] == memory_needed(untied)[0] - 1000 * 256 * 2


def test_the_head_size_is_read_behind_a_projection_bias():
    """Qwen2's builds add a bias to the packed QKV projection: the head size is the MatMul's behind the Add."""
    from onnx import helper as h

    from lilou.graph.contrib_decoder import gqa_projection_head_size

    matmul = h.make_node("MatMul", ["x", "w"], ["qkv"], name="proj")
    bias = h.make_node("Add", ["qkv", "b"], ["qkv_biased"], name="bias")
    gqa = h.make_node("GroupQueryAttention", ["qkv_biased", "", "", "pk", "pv", "lengths", "total"], ["out"],
                      domain="com.microsoft", num_heads=4, kv_num_heads=2)
    producers = {"qkv": matmul, "qkv_biased": bias}
    assert gqa_projection_head_size(gqa, {"w": (256, 512), "b": (512,)}, producers) == 64


GENAI_DML = DATA / "genai" / "llama-gqa-dml-fp16.onnx"


def test_a_directml_decoder_folds_its_rotations_into_the_attention():
    """The DirectML build rotates Q and K with two RotaryEmbedding nodes before a GroupQueryAttention that does not
    rotate: the pair folds into the attention (the same caches, the position ids), so each layer is written back as
    the CUDA build's is, but with eager's three projections where the CUDA build packs them into one."""
    from lilou.graph.contrib_decoder import fold_rotary_embeddings

    model = onnx.load(GENAI_DML, load_external_data=False)
    assert fold_rotary_embeddings(model.graph) == 4
    attentions = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert not any(n.op_type == "RotaryEmbedding" for n in model.graph.node) and len(attentions) == 2
    for node in attentions:
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        assert attributes["do_rotary"] == 1 and attributes["rotary_interleaved"] == 0
        assert list(node.input[7:10]) == ["cos_cache", "sin_cache", "position_ids"]
        assert node.input[0].endswith("q_proj/MatMul/output_0") and node.input[1].endswith("k_proj/MatMul/output_0")

    asked = {name: STEP[name] for name in ("batch_size", "sequence_length", "past_sequence_length")}
    dml, cuda = load_graph(GENAI_DML, shapes=asked), load_graph(GENAI_FP16, shapes=STEP)
    assert not dml.unsupported_ops and not any("unknown shape" in w for w in dml.warnings)
    assert any("onnxruntime's fused ops (2 GroupQueryAttention, 4 RotaryEmbedding, 1 SimplifiedLayerNormalization, "
               "4 SkipSimplifiedLayerNormalization)" in w for w in dml.warnings)
    assert any("kv_cache_dim (the KV cache's head size) is bound to 64" in w for w in dml.warnings)
    assert {t.name: t.shape for t in dml.outputs} == {t.name: t.shape for t in cuda.outputs}
    for op in ("Attention", "Neg"):  # one attention and two rotations (rotate_half) per layer
        assert len(_by_op(dml, op)) == len(_by_op(cuda, op)) == (2 if op == "Attention" else 4)
    gemm_flops = sum(d["flops"] for d in _by_op(dml, "MatMul"))
    assert len(_by_op(dml, "MatMul")) == len(_by_op(cuda, "MatMul")) + 4  # q, k and v apart in both layers
    assert gemm_flops == sum(d["flops"] for d in _by_op(cuda, "MatMul"))


def test_a_rotation_read_elsewhere_stays_apart():
    """A RotaryEmbedding whose output something else reads too cannot move into the attention."""
    from lilou.graph.contrib_decoder import fold_rotary_embeddings

    model = onnx.load(GENAI_DML, load_external_data=False)
    rotated = next(n for n in model.graph.node if n.op_type == "RotaryEmbedding").output[0]
    model.graph.output.append(helper.make_tensor_value_info(rotated, TensorProto.FLOAT16, None))
    assert fold_rotary_embeddings(model.graph) == 2  # the other layer's pair only


def test_qwen3_norms_each_head_of_its_query_and_key():
    """Qwen3 as the builder writes it: Q, K and V split from one projection (the cache head size is read from the
    split), and the q_norm / k_norm weights fused into the attention, written back as the RMS norm of each head
    that eager runs as a Python module (one more RMS norm per layer for each of Q and K)."""
    graph = load_graph(DATA / "genai" / "qwen3-gqa-fp16.onnx",
                       shapes={name: STEP[name] for name in ("batch_size", "sequence_length", "past_sequence_length")})
    assert not graph.unsupported_ops and not any("unknown shape" in w for w in graph.warnings)
    assert any("kv_cache_dim (the KV cache's head size) is bound to 64" in w for w in graph.warnings)
    assert len(_by_op(graph, "Pow")) == len(_by_op(load_graph(GENAI_FP16, shapes=STEP), "Pow")) + 4 == 9
    assert len(_by_op(graph, "Attention")) == 2
    head_norms = [d for d in _by_op(graph, "Pow") if "/q_norm_" in d["outputs"][0].name or "/k_norm_" in d["outputs"][0].name]
    assert len(head_norms) == 4


@pytest.mark.parametrize(("past", "window_cache"), [(511, 511), (8191, 4096)])
def test_gemma2_sliding_layers_hold_at_most_their_window(past: int, window_cache: int):
    """Gemma 2's local layer keeps a windowed cache of its own length (``past_sliding_length``), bound to the past
    up to the window (4096); its global layer keeps the whole past."""
    graph = load_graph(DATA / "genai" / "gemma2-gqa-fp16.onnx",
                       shapes={"batch_size": (2,), "sequence_length": (1,), "past_sequence_length": (past,)})
    assert not graph.unsupported_ops and not any("unknown shape" in w for w in graph.warnings)
    assert any(f"past_sliding_length (the cache of the sliding-window layers) is bound to min(past_sequence_length, "
               f"4096) = {window_cache}" in w for w in graph.warnings)
    shapes = {t.name: t.shape for t in graph.outputs}
    assert shapes["present.0.key"] == (2, 2, window_cache + 1, 64) and shapes["present.1.key"] == (2, 2, past + 1, 64)


def test_a_softcapped_attention_is_written_back_as_gemma2s_eager_attention():
    """Gemma 2 caps its attention logits, which SDPA cannot do, so its default attention is eager: written back as
    Hugging Face's ``eager_attention_forward`` (K and V repeated to every query head, tanh capping, the causal mask,
    softmax, P.V), which ONNX's reference evaluator runs to the formula's values."""
    from onnx.reference import ReferenceEvaluator

    from lilou.graph.contrib_ops import restore_contrib_ops

    batch, new, past, heads, kv_heads, size, cap = 1, 2, 3, 4, 2, 8, 5.0
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "past_k", "past_v"], ["y", "present_k", "present_v"],
                            domain="com.microsoft", num_heads=heads, kv_num_heads=kv_heads, softcap=cap, scale=0.5)
    model = make_model([node], [tensor("q", [batch, new, heads * size]), tensor("k", [batch, new, kv_heads * size]),
                                tensor("v", [batch, new, kv_heads * size]),
                                tensor("past_k", [batch, kv_heads, past, size]),
                                tensor("past_v", [batch, kv_heads, past, size])],
                       [tensor("y", None), tensor("present_k", None), tensor("present_v", None)], opset=21)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    assert restore_contrib_ops(model) == {"GroupQueryAttention": 1}
    assert [n.op_type for n in model.graph.node].count("Tanh") == 1
    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal([d.dim_value for d in value.type.tensor_type.shape.dim]).astype(np.float32)
             for name, value in ((v.name, v) for v in model.graph.input)}
    y = ReferenceEvaluator(model).run(None, feeds)[0]

    def heads_of(x, count):
        return x.reshape(batch, new, count, size).transpose(0, 2, 1, 3)

    q = heads_of(feeds["q"], heads)
    k = np.concatenate([feeds["past_k"], heads_of(feeds["k"], kv_heads)], axis=2).repeat(heads // kv_heads, axis=1)
    v = np.concatenate([feeds["past_v"], heads_of(feeds["v"], kv_heads)], axis=2).repeat(heads // kv_heads, axis=1)
    scores = np.tanh(q @ k.transpose(0, 1, 3, 2) * 0.5 / cap) * cap
    later = np.arange(past + new)[None, :] > np.arange(new)[:, None] + past  # a key after its query
    scores = scores + np.where(later, -10000.0, 0.0)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    expected = (weights @ v).transpose(0, 2, 1, 3).reshape(batch, new, heads * size)
    assert np.allclose(y, expected, rtol=1e-4, atol=1e-5)


def test_every_written_cat_is_a_kernel_of_its_own():
    """The cache's growth and rotate_half are torch.cat calls, one kernel each: never grouped with the projection
    whose views they read (the fusion model, which never saw these write-backs, did so)."""
    from lilou.api import Predictor

    prediction = Predictor().predict(GENAI_FP16, gpu="a10g", shapes=STEP)
    cats = [k for k in prediction.kernels if "Concat" in k.ops]
    assert len(cats) == 8  # per layer: the key and value caches, rotate_half of Q and of K
    assert all(k.ops == ("Concat",) for k in cats)
