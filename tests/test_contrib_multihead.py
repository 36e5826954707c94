"""onnxruntime's MultiHeadAttention (and Attention reading a mask index it computed) priced as the attention the
exporter wrote.

The graphs in tests/data/ort are real: the committed ``bert`` (transformers 5) and ``bert-classic`` (transformers
4.x's BERT) exports optimized by onnxruntime 1.32 (``scripts/make_ort_fixtures.py --attention``), weights stripped.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from lilou.graph import build_graph
from tests.onnx_builders import make_model, tensor

ORT = Path(__file__).resolve().parent / "data" / "ort"


@pytest.fixture(scope="module")
def predictor():
    from lilou.api import Predictor

    return Predictor()


def _kernel_difference(optimized, exported) -> tuple[Counter, Counter]:
    ops, export_ops = Counter(k.ops for k in optimized.kernels), Counter(k.ops for k in exported.kernels)
    return ops - export_ops, export_ops - ops


@pytest.mark.parametrize("name", ["bert-classic-mha", "bert-classic-mha-raw-mask"])
def test_multi_head_attention_is_priced_as_the_classic_bert_export(predictor, name: str) -> None:
    """Both mask forms (EmbedLayerNormalization's mask index, the raw 2-D mask): the kernels of the export, as the
    Attention form gives them; the optimized file's own extra kernels are its int32 casts of the inputs."""
    exported = predictor.predict(ORT / "bert-classic.onnx", gpu="a10g")
    optimized = predictor.predict(ORT / f"{name}.onnx", gpu="a10g")
    assert any("onnxruntime's fused ops (2 BiasGelu, 1 EmbedLayerNormalization, 2 MultiHeadAttention, "
               "4 SkipLayerNormalization)" in w for w in optimized.warnings)
    assert not any("unknown shape" in w or "unsupported op" in w for w in optimized.warnings)
    extra, missing = _kernel_difference(optimized, exported)
    assert extra == {("Cast",): 3, ("Unsqueeze", "Cast"): 1} and missing == {("Unsqueeze", "Unsqueeze", "Cast"): 1}
    casts = sum(k.latency_ms for k in optimized.kernels if k.ops == ("Cast",))
    assert optimized.latency_ms - casts == pytest.approx(exported.latency_ms, rel=0.01)
    assert len([k for k in optimized.kernels if k.category == "gemm"]) == 16


@pytest.mark.parametrize("name", ["bert-mha", "bert-attention"])
def test_todays_bert_optimized_by_onnxruntime_is_priced_as_its_export(predictor, name: str) -> None:
    """transformers 5's BERT: the attention reads the mask index onnxruntime sums from the raw mask. The mask is
    written back as the extended mask added to the scores (the ReduceSum goes: eager never ran it), so the kernels
    are the export's but for how each builds the mask once and scales the scores (Div by sqrt(head size) for its
    Mul)."""
    exported = predictor.predict(ORT / "bert.onnx", gpu="a10g")
    optimized = predictor.predict(ORT / f"{name}.onnx", gpu="a10g")
    op = "MultiHeadAttention" if name == "bert-mha" else "Attention"
    restored = dict(sorted({op: 2, "BiasGelu": 2, "SkipLayerNormalization": 4}.items()))
    assert any(f"onnxruntime's fused ops ({', '.join(f'{n} {o}' for o, n in restored.items())})" in w
               for w in optimized.warnings)
    assert not any("unknown shape" in w or "unsupported op" in w for w in optimized.warnings)
    assert not any("ReduceSum" in k.ops for k in optimized.kernels)
    modelled = ("gemm", "softmax", "layernorm", "elementwise")
    assert Counter(k.category for k in optimized.kernels if k.category in modelled) == \
        Counter(k.category for k in exported.kernels if k.category in modelled)
    masked = [k for k in optimized.kernels if k.ops == ("Add",) and k.nodes[0].startswith("Attention_")]
    assert len(masked) == 2  # one mask add per layer (the biases' adds go with their GEMMs)
    extra, missing = _kernel_difference(optimized, exported)
    assert extra == {("Div",): 2, ("Unsqueeze", "Cast"): 1, ("Sub",): 1}
    assert optimized.latency_ms == pytest.approx(exported.latency_ms, rel=0.05)


def _multihead(mask: bool = True, attention_bias: bool = True, **attributes) -> onnx.ModelProto:
    inputs = ["q", "k", "v", "b", "mask" if mask else "", "attention_bias" if attention_bias else ""]
    node = helper.make_node("MultiHeadAttention", inputs, ["y"], domain="com.microsoft", num_heads=2, **attributes)
    projections = [helper.make_node("MatMul", ["x", f"w_{name}"], [name]) for name in "qkv"]
    rng = np.random.default_rng(0)
    weights = [onnx.numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), f"w_{name}")
               for name in "qkv"]
    model = make_model(projections + [node],
                       [tensor("x", [2, 3, 8]), tensor("mask", [2, 3], TensorProto.INT32),
                        tensor("attention_bias", [1, 2, 3, 3])][:3 if attention_bias else 2 if mask else 1],
                       [tensor("y", [2, 3, 8])],
                       [*weights, onnx.numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "b")],
                       opset=17)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def test_written_back_multi_head_attention_computes_what_the_op_computes() -> None:
    """Run by ONNX's reference evaluator: softmax((q + bq)(k + bk)^T / sqrt(head) + mask + bias)(v + bv), heads
    merged, the masked key (0 in the raw mask) weighted by exp(-10000)."""
    from onnx.reference import ReferenceEvaluator

    from lilou.graph.contrib_ops import restore_contrib_ops

    model = _multihead()
    assert restore_contrib_ops(model) == {"MultiHeadAttention": 1}
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    mask = np.array([[1, 1, 0], [1, 1, 1]], dtype=np.int32)
    bias = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    (y,) = ReferenceEvaluator(model).run(None, {"x": x, "mask": mask, "attention_bias": bias})
    values = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    b = values["b"]
    q, k, v = (x @ values[f"w_{name}"] + b[8 * i:8 * (i + 1)] for i, name in enumerate("qkv"))
    heads = [a.reshape(2, 3, 2, 4).transpose(0, 2, 1, 3) for a in (q, k, v)]
    scores = heads[0] @ heads[1].transpose(0, 1, 3, 2) / 2.0 + (1 - mask[:, None, None, :]) * -10000.0 + bias
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    expected = (weights @ heads[2]).transpose(0, 2, 1, 3).reshape(2, 3, 8)
    assert np.allclose(y, expected, rtol=1e-4, atol=1e-5)


def test_multi_head_attention_ops_and_shapes() -> None:
    graph = build_graph(_multihead(mask=False, attention_bias=False))
    assert not graph.unsupported_ops and graph.outputs[0].shape == (2, 3, 8)
    ops = [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()]
    assert ops == ["MatMul"] * 3 + ["Add", "Reshape", "Transpose"] * 3 + ["MatMul", "Div", "Softmax", "MatMul",
                                                                        "Transpose", "Reshape"]


@pytest.mark.parametrize("change", ["past", "present", "causal", "packed", "mask_3d", "odd_heads"])
def test_a_multi_head_attention_form_the_rewrite_does_not_reproduce_stays_unsupported(change: str) -> None:
    """A decoder's cache, causal attention, packed QKV, a mask form other than the raw or index mask, heads that do
    not split the width: the op stays and is named."""
    model = _multihead(mask=change != "mask_3d", attention_bias=False, **({"unidirectional": 1}
                                                                          if change == "causal" else {}))
    node = model.graph.node[-1]
    if change == "past":
        node.input[4:] = ["", "", "past_key", "past_value"]
        model.graph.input.extend([tensor("past_key", [2, 2, 5, 4]), tensor("past_value", [2, 2, 5, 4])])
    elif change == "present":
        node.output.extend(["present_key", "present_value"])
    elif change == "packed":
        node.input[1:3] = ["", ""]
    elif change == "mask_3d":
        node.input[4] = "mask3"
        model.graph.input.append(tensor("mask3", [2, 3, 3], TensorProto.INT32))
    elif change == "odd_heads":
        node.attribute[0].i = 3
    assert build_graph(model).unsupported_ops == ["MultiHeadAttention"]
