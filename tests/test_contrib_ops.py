"""Files onnxruntime's transformer optimizer rewrote with its contrib ops are priced as the exports they came from,
and a layer norm exported before opset 17 (ReduceMean ... Div) is one layer-norm kernel, as eager runs it.

The graphs in tests/data/ort are real: small Hugging Face models exported by torch.onnx (TorchScript) and optimized
by onnxruntime 1.20 (scripts/make_ort_fixtures.py), weights stripped.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from lilou.graph import build_graph
from tests.onnx_builders import make_model, tensor, weight

ORT = Path(__file__).resolve().parent / "data" / "ort"


@pytest.fixture(scope="module")
def predictor():
    from lilou.api import Predictor

    return Predictor()


@pytest.mark.parametrize(("name", "note"), [
    ("bert", "2 BiasGelu, 4 SkipLayerNormalization"),
    ("bert-opset14", "2 BiasGelu, 1 LayerNormalization, 4 SkipLayerNormalization"),
    ("gpt2", "2 FastGelu, 4 SkipLayerNormalization"),
    ("t5", "1 SimplifiedLayerNormalization, 4 SkipSimplifiedLayerNormalization"),
])
def test_an_optimized_file_is_priced_as_its_export(predictor, name: str, note: str) -> None:
    exported = predictor.predict(ORT / f"{name}.onnx", gpu="a10g")
    optimized = predictor.predict(ORT / f"{name}-ort.onnx", gpu="a10g")
    # The optimizer also folds casts and reshapes (which launch nothing): the kernels, not their nodes, are the same.
    assert Counter(k.type for k in optimized.kernels) == Counter(k.type for k in exported.kernels)
    assert len(optimized.kernels) == len(exported.kernels)
    assert optimized.latency_ms == exported.latency_ms
    assert any(f"onnxruntime's fused ops ({note}) are priced as the standard ops" in w for w in optimized.warnings)
    assert not any("unknown shape" in w or "unsupported op" in w for w in optimized.warnings)


def test_the_optimized_file_had_no_shapes_after_its_first_contrib_op() -> None:
    """Without the rewrite (what Lilou read before): ONNX's inference stops at the contrib ops."""
    from lilou.graph.dag import load_graph

    plain = load_graph(ORT / "bert-ort.onnx", restore_folded=False)
    assert any("unknown shape" in w for w in plain.warnings)
    assert {"SkipLayerNormalization", "BiasGelu"} <= set(plain.unsupported_ops)


def test_a_half_precision_optimized_file_keeps_its_precision(predictor) -> None:
    fp16 = predictor.predict(ORT / "bert-ort-fp16.onnx", gpu="a10g")
    assert fp16.precision == "fp16"
    assert not any("unknown shape" in w or "unsupported op" in w for w in fp16.warnings)
    norms = [k for k in fp16.kernels if k.category == "layernorm"]
    assert len(norms) == 5 and all(k.ops == ("LayerNormalization",) for k in norms)


def test_a_layer_norm_before_opset_17_is_one_layer_norm_kernel(predictor) -> None:
    """nn.LayerNorm exported at opset 14 is nine nodes; eager runs one kernel, priced as the opset-17 node is."""
    from lilou.fusion.eager_replay import layer_norm_decompositions
    from lilou.graph.dag import load_graph

    chains = layer_norm_decompositions(load_graph(ORT / "bert-opset14.onnx"))
    assert len(chains) == 5  # the embeddings' and two per layer
    assert all([o.split("/")[-1] for o in chain] == ["ReduceMean", "Sub", "Pow", "ReduceMean_1", "Add", "Sqrt", "Div",
                                                    "Mul", "Add_1"] for chain in chains)
    old = predictor.predict(ORT / "bert-opset14.onnx", gpu="a10g")
    new = predictor.predict(ORT / "bert.onnx", gpu="a10g")
    old_norms = [k for k in old.kernels if k.category == "layernorm"]
    new_norms = [k for k in new.kernels if k.category == "layernorm"]
    assert len(old_norms) == len(new_norms) == 5 and len(old.kernels) == len(new.kernels) == 41
    assert [k.latency_ms for k in old_norms] == pytest.approx([k.latency_ms for k in new_norms], rel=1e-4)
    assert old.latency_ms == new.latency_ms


def _single(node: onnx.NodeProto, inputs, initializers=(), opset: int = 17, outputs=None) -> onnx.ModelProto:
    model = make_model([node], inputs, outputs or [tensor(node.output[0], None)], initializers, opset=opset)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def _ops(graph) -> list[str]:
    return [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()]


@pytest.mark.parametrize(("node", "inputs", "initializers", "expected"), [
    (helper.make_node("QuickGelu", ["x"], ["y"], domain="com.microsoft", alpha=1.702), [tensor("x", [2, 8, 64])], [],
     ["Mul", "Sigmoid", "Mul"]),
    # alpha 1 is F.silu, which onnxruntime's optimizer also fuses into QuickGelu: x * sigmoid(x), no scale
    (helper.make_node("QuickGelu", ["x"], ["y"], domain="com.microsoft", alpha=1.0), [tensor("x", [2, 8, 64])], [],
     ["Sigmoid", "Mul"]),
    (helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft"), [tensor("x", [2, 8, 64])], [],
     ["Div", "Erf", "Add", "Mul", "Mul"]),
    (helper.make_node("BiasAdd", ["x", "b", "s"], ["y"], domain="com.microsoft"),
     [tensor("x", [2, 8, 64]), tensor("s", [2, 8, 64])], [weight("b", [64])], ["Add", "Add"]),
    (helper.make_node("FastGelu", ["x"], ["y"], domain="com.microsoft"), [tensor("x", [2, 8, 64])], [],
     ["Mul", "Pow", "Mul", "Add", "Mul", "Tanh", "Add", "Mul"]),
])
def test_each_contrib_op_becomes_its_exported_ops(node, inputs, initializers, expected) -> None:
    graph = build_graph(_single(node, inputs, initializers))
    assert _ops(graph) == expected
    assert graph.outputs[0].shape == (2, 8, 64) and not graph.unsupported_ops


def test_onnxruntimes_quick_gelu_of_a_silu_is_one_eager_kernel(predictor) -> None:
    """onnxruntime's optimizer writes ``F.silu`` as ``QuickGelu(alpha=1)``; it was written back with its scale, three
    kernels where eager runs one (EfficientNet-B0: 357 kernels for the export's 275). Written back as x * sigmoid(x), it
    is priced as the silu of the same graph exported."""
    silu = [helper.make_node("Sigmoid", ["x"], ["s"], name="sigmoid"), helper.make_node("Mul", ["x", "s"], ["y"], name="silu")]
    exported = make_model(silu, [tensor("x", [8, 64, 56, 56])], [tensor("y", None)], opset=17)
    fused = _single(helper.make_node("QuickGelu", ["x"], ["y"], domain="com.microsoft", alpha=1.0, name="silu"),
                    [tensor("x", [8, 64, 56, 56])])
    from_export, from_ort = (predictor.predict(build_graph(m), gpu="a10g") for m in (exported, fused))
    assert len(from_ort.kernels) == len(from_export.kernels) == 1
    assert from_ort.latency_ms == pytest.approx(from_export.latency_ms, rel=1e-9)


def test_an_untyped_activation_gets_constants_cast_like_its_input() -> None:
    """Gelu on an fp16 tensor whose type the file does not state: the constants follow it (CastLike, folded)."""
    cast = helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16)
    gelu = helper.make_node("Gelu", ["h"], ["y"], domain="com.microsoft", name="gelu")
    model = make_model([cast, gelu], [tensor("x", [2, 8, 64])], [tensor("y", None, TensorProto.FLOAT16)], opset=17)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    graph = build_graph(model)
    assert _ops(graph) == ["Cast", "Div", "Erf", "Add", "Mul", "Mul"]
    assert graph.outputs[0].shape == (2, 8, 64) and graph.outputs[0].dtype == "float16"


def test_a_norm_whose_statistics_are_read_stays_as_it_is() -> None:
    """SkipLayerNormalization's mean output has no eager twin: a file that reads it keeps the op (warned)."""
    node = helper.make_node("SkipLayerNormalization", ["x", "s", "g", "b"], ["y", "mean"], domain="com.microsoft")
    use = helper.make_node("Identity", ["mean"], ["m"])
    model = make_model([node, use], [tensor("x", [2, 8, 64]), tensor("s", [2, 8, 64])],
                       [tensor("y", None), tensor("m", None)], [weight("g", [64]), weight("b", [64])], opset=17)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    graph = build_graph(model)
    assert graph.unsupported_ops == ["SkipLayerNormalization"]


def test_a_hostile_contrib_node_is_left_alone_and_names_never_collide() -> None:
    """A node missing a required input stays (the checks report it); two nodes of one name get distinct tensors."""
    short = helper.make_node("SkipLayerNormalization", ["x", "s"], ["y"], domain="com.microsoft", name="n")
    assert build_graph(_single(short, [tensor("x", [2, 8, 64]), tensor("s", [2, 8, 64])])).unsupported_ops == [
        "SkipLayerNormalization"]
    first = helper.make_node("FastGelu", ["x"], ["h"], domain="com.microsoft", name="same")
    second = helper.make_node("FastGelu", ["h"], ["y"], domain="com.microsoft", name="same")
    model = make_model([first, second], [tensor("x", [2, 8, 64])], [tensor("y", None)], opset=17)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    graph = build_graph(model)
    assert _ops(graph) == ["Mul", "Pow", "Mul", "Add", "Mul", "Tanh", "Add", "Mul"] * 2
    assert graph.outputs[0].shape == (2, 8, 64)


@pytest.mark.parametrize("stash_type", [0, -3, TensorProto.INT64])
def test_a_norm_with_a_damaged_stash_type_computes_in_float32(stash_type) -> None:
    """Fuzz seed 3005 (a genai file's byte mutants): a stash_type that is no float type ended in an internal KeyError."""
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], name="rms", stash_type=stash_type)
    model = make_model([node], [tensor("x", [2, 8, 64])], [tensor("y", None)], [weight("scale", [64])], opset=17)
    graph = build_graph(model)
    assert _ops(graph) == ["Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Mul"]
    assert graph.outputs[0].shape == (2, 8, 64)


def test_a_rewritten_rms_norm_computes_what_the_contrib_op_computes() -> None:
    """The written-back SimplifiedLayerNormalization, run by ONNX's reference evaluator, is x / rms(x) * scale."""
    from onnx.reference import ReferenceEvaluator

    from lilou.graph.contrib_ops import restore_contrib_ops

    node = helper.make_node("SimplifiedLayerNormalization", ["x", "w"], ["y"], axis=-1, epsilon=1e-6, stash_type=1)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 4, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    model = make_model([node], [tensor("x", [2, 4, 16])], [tensor("y", [2, 4, 16])],
                       [onnx.numpy_helper.from_array(w, "w")], opset=17)
    assert restore_contrib_ops(model) == {"SimplifiedLayerNormalization": 1}
    (y,) = ReferenceEvaluator(model).run(None, {"x": x})
    expected = x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + 1e-6) * w
    assert np.allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_bert_attention_and_embeddings_are_written_back_as_the_module_ran(predictor) -> None:
    """BERT with onnxruntime's Attention and EmbedLayerNormalization (transformers 4.x's attention): the kernels of
    the export, three projections, Q.K^T, scale, mask, softmax, P.V and the head merge per layer; the extended mask
    once. The optimized file's own extra nodes are its int32 casts of the three inputs."""
    exported = predictor.predict(ORT / "bert-classic.onnx", gpu="a10g")
    optimized = predictor.predict(ORT / "bert-classic-ort.onnx", gpu="a10g")
    assert any("onnxruntime's fused ops (2 Attention, 2 BiasGelu, 1 EmbedLayerNormalization, 4 SkipLayerNormalization)"
               in w for w in optimized.warnings)
    assert not any("unknown shape" in w or "unsupported op" in w for w in optimized.warnings)
    extra = Counter(k.ops for k in optimized.kernels) - Counter(k.ops for k in exported.kernels)
    missing = Counter(k.ops for k in exported.kernels) - Counter(k.ops for k in optimized.kernels)
    assert extra == {("Cast",): 3, ("Unsqueeze", "Cast"): 1} and missing == {("Unsqueeze", "Unsqueeze", "Cast"): 1}
    casts = sum(k.latency_ms for k in optimized.kernels if k.ops == ("Cast",))
    assert optimized.latency_ms - casts == pytest.approx(exported.latency_ms, rel=0.01)
    gemms = [k for k in optimized.kernels if k.category == "gemm"]
    assert len(gemms) == len([k for k in exported.kernels if k.category == "gemm"]) == 16  # 8 per layer


def _attention(bias: float = 0.5, **attributes) -> onnx.ModelProto:
    node = helper.make_node("Attention", ["x", "w", "b", "", "past"], ["y"], domain="com.microsoft", num_heads=4,
                            **attributes)
    model = make_model([node], [tensor("x", [2, 8, 64]), tensor("past", [2, 2, 4, 1, 16])], [tensor("y", None)],
                       [weight("w", [64, 192]), onnx.numpy_helper.from_array(np.full(192, bias, np.float32), "b")],
                       opset=17)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def test_an_attention_form_the_rewrite_does_not_reproduce_stays_unsupported() -> None:
    """A past state (a decoder's KV cache) has no counterpart in the encoder block written back: the op stays."""
    assert build_graph(_attention()).unsupported_ops == ["Attention"]
    plain = _attention()
    del plain.graph.node[0].input[3:]
    graph = build_graph(plain)
    assert not graph.unsupported_ops and graph.outputs[0].shape == (2, 8, 64)
    assert _ops(graph) == ["MatMul", "Add", "Reshape", "Transpose"] * 3 + ["MatMul", "Div", "Softmax", "MatMul",
                                                                          "Transpose", "Reshape"]


def test_a_zero_attention_bias_is_no_add() -> None:
    """onnxruntime writes a zero bias for projections that had none (diffusers' attention): no Add was run."""
    plain = _attention(bias=0.0)
    del plain.graph.node[0].input[3:]
    assert _ops(build_graph(plain)) == ["MatMul", "Reshape", "Transpose"] * 3 + ["MatMul", "Div", "Softmax", "MatMul",
                                                                                "Transpose", "Reshape"]


def test_a_dynamically_quantized_lstm_is_priced_as_the_lstm_it_quantizes(predictor, tmp_path) -> None:
    """``quantize_dynamic`` writes every LSTM as onnxruntime's DynamicQuantizeLSTM (INT8 W [directions, input, 4H] and
    R [directions, H, 4H], transposed from the LSTM's): it had no cost formula and was a 0-FLOP memory pass (a 2-layer
    LSTM came out 5.8x faster than its float export). onnxruntime runs it on the CPU only; a GPU runs the float LSTM."""
    steps, batch, inputs, hidden = 32, 8, 64, 128
    x = tensor("x", [steps, batch, inputs])
    bias = weight("b", [1, 8 * hidden])
    lstm = helper.make_node("LSTM", ["x", "w", "r", "b"], ["y"], name="lstm", hidden_size=hidden)
    float_path = tmp_path / "lstm.onnx"
    onnx.save(make_model([lstm], [x], [tensor("y", None)], [weight("w", [1, 4 * hidden, inputs]),
                                                            weight("r", [1, 4 * hidden, hidden]), bias], opset=17),
              float_path)
    scales = [helper.make_tensor(name, TensorProto.FLOAT, [1], [0.01]) for name in ("w_scale", "r_scale")]
    points = [helper.make_tensor(name, TensorProto.INT8, [1], [0]) for name in ("w_zero", "r_zero")]
    quantized = helper.make_node("DynamicQuantizeLSTM", ["x", "wq", "rq", "b", "", "", "", "", "w_scale", "w_zero",
                                                         "r_scale", "r_zero"], ["y"], name="lstm", domain="com.microsoft",
                                 hidden_size=hidden)
    weights = [helper.make_tensor("wq", TensorProto.INT8, [1, inputs, 4 * hidden], [0] * (inputs * 4 * hidden)),
               helper.make_tensor("rq", TensorProto.INT8, [1, hidden, 4 * hidden], [0] * (hidden * 4 * hidden))]
    model = make_model([quantized], [x], [tensor("y", None)], [*weights, bias, *scales, *points], opset=17)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    quantized_path = tmp_path / "lstm-dynamic.onnx"
    onnx.save(model, quantized_path)
    as_float, as_quantized = (predictor.predict(path, gpu="a10g") for path in (float_path, quantized_path))
    assert [k.type for k in as_quantized.kernels] == [k.type for k in as_float.kernels] == ["recurrent"]
    assert as_quantized.kernels[0].flops == as_float.kernels[0].flops > 0
    assert as_quantized.latency_ms == as_float.latency_ms
    assert any("1 DynamicQuantizeLSTM" in w for w in as_quantized.warnings)
