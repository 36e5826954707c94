"""A Stable Diffusion UNet that onnxruntime's optimizer rewrote for channels-last (NhwcConv, GroupNorm,
SkipGroupNorm, BiasSplitGelu, packed MultiHeadAttention) is priced as the NCHW export it came from.

The graphs in tests/data/diffusion are real: diffusers' UNet2DConditionModel at a small size, exported by torch.onnx
(TorchScript) and optimized by onnxruntime 1.32 (scripts/make_diffusion_fixtures.py), weights stripped.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lilou.graph import build_graph
from tests.onnx_builders import make_model, tensor

DIFFUSION = Path(__file__).resolve().parent / "data" / "diffusion"


@pytest.fixture(scope="module")
def predictor():
    from lilou.api import Predictor

    return Predictor()


def _no_gaps(result) -> None:
    assert not any("unknown shape" in w or "unsupported op" in w or "never saw" in w and "Nhwc" in w
                   for w in result.warnings)


def test_a_channels_last_unet_is_priced_as_its_export(predictor) -> None:
    """The UNet with diffusers' default attention (which onnxruntime 1.32 leaves unfused): every kernel of the export
    comes back, kernel for kernel, but the 16 divisions by the resnets' ``output_scale_factor`` (1.0) that the
    optimizer removed; no transpose to or from channels-last is left: the transposes are the export's."""
    exported = predictor.predict(DIFFUSION / "unet-sdpa.onnx", gpu="a10g")
    optimized = predictor.predict(DIFFUSION / "unet-sdpa-ort.onnx", gpu="a10g")
    _no_gaps(optimized)
    assert any("onnxruntime's fused ops (4 BiasAdd, 4 BiasSplitGelu, 6 GroupNorm, 33 NhwcConv, 15 SkipGroupNorm, "
               "8 SkipLayerNormalization)" in w for w in optimized.warnings)
    divisions = [k for k in exported.kernels if k.ops == ("Div",)]
    assert len(divisions) == 16 and len(optimized.kernels) == len(exported.kernels) - 16
    modelled = Counter(k.category for k in exported.kernels)
    modelled["elementwise"] -= 16
    assert Counter(k.category for k in optimized.kernels) == modelled
    assert optimized.latency_ms == pytest.approx(exported.latency_ms - sum(k.latency_ms for k in divisions), rel=0.005)
    transposes = Counter(op for k in optimized.kernels for op in k.ops if op == "Transpose")
    assert transposes == Counter(op for k in exported.kernels for op in k.ops if op == "Transpose")


def test_packed_attention_of_a_unet_is_one_projection_per_matrix(predictor) -> None:
    """The UNet with the classic attention, which onnxruntime fuses into packed MultiHeadAttention (one MatMul for
    Q, K and V, one for K and V): written back as eager's three projections each, so the GEMMs are the export's."""
    exported = predictor.predict(DIFFUSION / "unet.onnx", gpu="a10g")
    optimized = predictor.predict(DIFFUSION / "unet-ort.onnx", gpu="a10g")
    _no_gaps(optimized)
    assert any("8 MultiHeadAttention" in w for w in optimized.warnings)
    gemms = Counter(k.flops for k in optimized.kernels if k.category == "gemm")
    assert gemms == Counter(k.flops for k in exported.kernels if k.category == "gemm")
    assert sum(k.category == "softmax" for k in optimized.kernels) == 8
    assert sum(k.category == "conv" for k in optimized.kernels) == 33


def _evaluate(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, feeds)[0]


def _contrib_model(nodes, inputs, output, initializers) -> onnx.ModelProto:
    model = make_model(nodes, inputs, [tensor(output, None)], initializers, opset=17)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def _restored(model: onnx.ModelProto) -> onnx.ModelProto:
    from lilou.graph.contrib_ops import restore_contrib_ops

    restore_contrib_ops(model)
    assert all(node.domain in ("", "ai.onnx") for node in model.graph.node)
    return model


def _group_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, groups: int, silu: bool) -> np.ndarray:
    """``nn.GroupNorm`` on NCHW, then SiLU."""
    n, c = x.shape[:2]
    grouped = x.reshape(n, groups, -1)
    normalized = (grouped - grouped.mean(-1, keepdims=True)) / np.sqrt(grouped.var(-1, keepdims=True) + 1e-5)
    y = normalized.reshape(x.shape) * gamma[:, None, None] + beta[:, None, None]
    return y / (1 + np.exp(-y)) if silu else y


def test_written_back_norms_compute_what_the_ops_compute() -> None:
    """GroupNorm (SiLU, channels-last) and SkipGroupNorm (time-embedding skip, bias, the sum as a second output),
    run by ONNX's reference evaluator, against group norm on the NCHW tensor."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 4, 8)).astype(np.float32)  # NHWC
    temb = rng.standard_normal((2, 8)).astype(np.float32)
    gamma, beta, bias = (rng.standard_normal(8).astype(np.float32) for _ in range(3))
    weights = [numpy_helper.from_array(v, n) for v, n in ((gamma, "gamma"), (beta, "beta"), (bias, "bias"))]
    axes = numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "axes")
    norm = helper.make_node("GroupNorm", ["x", "gamma", "beta"], ["y"], domain="com.microsoft", groups=4,
                            activation=1, epsilon=1e-5)
    y = _evaluate(_restored(_contrib_model([norm], [tensor("x", [2, 4, 4, 8])], "y", weights)), {"x": x})
    expected = _group_norm(x.transpose(0, 3, 1, 2), gamma, beta, 4, silu=True).transpose(0, 2, 3, 1)
    assert np.allclose(y, expected, rtol=1e-4, atol=1e-5)

    unsqueeze = helper.make_node("Unsqueeze", ["temb", "axes"], ["skip"])
    skip_norm = helper.make_node("SkipGroupNorm", ["x", "gamma", "beta", "skip", "bias"], ["y", "sum"],
                                 domain="com.microsoft", groups=4, activation=0, epsilon=1e-5)
    model = _contrib_model([unsqueeze, skip_norm], [tensor("x", [2, 4, 4, 8]), tensor("temb", [2, 8])], "y",
                           [*weights, axes])
    model.graph.output.append(tensor("sum", None))
    total = x + bias + temb[:, None, None, :]
    from onnx.reference import ReferenceEvaluator

    y, total_out = ReferenceEvaluator(_restored(model)).run(None, {"x": x, "temb": temb})
    assert np.allclose(total_out, total, rtol=1e-5, atol=1e-6)
    expected = _group_norm(total.transpose(0, 3, 1, 2), gamma, beta, 4, silu=False).transpose(0, 2, 3, 1)
    assert np.allclose(y, expected, rtol=1e-4, atol=1e-5)


def test_written_back_convolution_and_geglu_compute_what_the_ops_compute() -> None:
    """NhwcConv (weight O, kH, kW, I) against the NCHW Conv of the same weight; BiasSplitGelu against GEGLU."""
    from math import erf

    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 5, 5, 3)).astype(np.float32)
    weight = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)  # O, I, kH, kW
    conv = helper.make_node("NhwcConv", ["x", "w"], ["y"], domain="com.microsoft", kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1])
    model = _contrib_model([conv], [tensor("x", [1, 5, 5, 3])], "y",
                           [numpy_helper.from_array(weight.transpose(0, 2, 3, 1).copy(), "w")])
    y = _evaluate(_restored(model), {"x": x})
    plain = make_model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
                       [tensor("x", [1, 3, 5, 5])], [tensor("y", None)], [numpy_helper.from_array(weight, "w")],
                       opset=17)
    assert np.allclose(y, _evaluate(plain, {"x": x.transpose(0, 3, 1, 2)}).transpose(0, 2, 3, 1), atol=1e-5)

    h = rng.standard_normal((2, 3, 8)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    geglu = helper.make_node("BiasSplitGelu", ["h", "b"], ["y"], domain="com.microsoft")
    y = _evaluate(_restored(_contrib_model([geglu], [tensor("h", [2, 3, 8])], "y",
                                           [numpy_helper.from_array(bias, "b")])), {"h": h})
    total = h + bias
    gate = total[..., 4:]
    expected = total[..., :4] * gate * 0.5 * (1 + np.vectorize(erf)(gate / np.sqrt(2)))
    assert np.allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_written_back_packed_attention_computes_what_the_op_computes() -> None:
    """Packed QKV as onnxruntime builds it (each head's q, k and v columns side by side, viewed as
    (B, S, N, 3, H)): the three projections written back compute softmax(q k^T / sqrt(H)) v."""
    rng = np.random.default_rng(2)
    c, n, h = 8, 2, 4
    wq, wk, wv = (rng.standard_normal((c, n * h)).astype(np.float32) for _ in range(3))
    packed = np.dstack([m.reshape(c, n, h) for m in (wq, wk, wv)]).reshape(c, n * 3 * h)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["qkv_flat"]),
             helper.make_node("Reshape", ["qkv_flat", "shape"], ["qkv"]),
             helper.make_node("MultiHeadAttention", ["qkv"], ["y"], domain="com.microsoft", num_heads=n)]
    initializers = [numpy_helper.from_array(packed, "w"),
                    numpy_helper.from_array(np.array([0, 0, n, 3, h], dtype=np.int64), "shape")]
    model = _restored(_contrib_model(nodes, [tensor("x", [2, 3, c])], "y", initializers))
    assert [node.op_type for node in model.graph.node].count("MatMul") == 5  # three projections, two products
    x = rng.standard_normal((2, 3, c)).astype(np.float32)
    q, k, v = ((x @ m).reshape(2, 3, n, h).transpose(0, 2, 1, 3) for m in (wq, wk, wv))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(h)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    expected = (weights @ v).transpose(0, 2, 1, 3).reshape(2, 3, n * h)
    assert np.allclose(_evaluate(model, {"x": x}), expected, rtol=1e-4, atol=1e-5)


def _layout_chain(cast_to: int) -> onnx.ModelProto:
    """NhwcConv -> Cast -> NhwcConv, as onnxruntime writes two convolutions in a row (with the cast it adds where
    it could not infer a type)."""
    weights = [numpy_helper.from_array(np.ones((8, 3, 3, 8), np.float32), name) for name in ("w1", "w2")]
    nodes = [helper.make_node("Transpose", ["x"], ["x_nhwc"], perm=[0, 2, 3, 1]),
             helper.make_node("NhwcConv", ["x_nhwc", "w1"], ["a"], domain="com.microsoft", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Cast", ["a"], ["a_cast"], to=cast_to),
             helper.make_node("NhwcConv", ["a_cast", "w2"], ["b"], domain="com.microsoft", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["b"], ["y"], perm=[0, 3, 1, 2])]
    model = make_model(nodes, [tensor("x", [1, 8, 16, 16])], [tensor("y", None, cast_to)], weights, opset=17)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def test_channels_last_transposes_that_undo_each_other_launch_nothing() -> None:
    """Two convolutions in a row run as two NCHW convolutions: the transposes between them, and onnxruntime's cast
    to the type the tensor already has, go."""
    graph = build_graph(_layout_chain(TensorProto.FLOAT))
    ops = [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()]
    assert ops == ["Conv", "Conv", "Identity"]  # the last pair wrote the graph's output: an Identity keeps its name
    assert graph.outputs[0].shape == (1, 8, 16, 16) and not graph.unsupported_ops


def test_a_cast_that_changes_the_type_keeps_its_transposes() -> None:
    """A cast to half precision between the two is a real kernel; the transposes around it stay with it."""
    graph = build_graph(_layout_chain(TensorProto.FLOAT16))
    ops = [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()]
    assert ops == ["Conv", "Transpose", "Cast", "Transpose", "Conv", "Identity"]


def test_a_group_norm_declaring_billions_of_groups_is_left_alone() -> None:
    """A few-byte file whose (stripped) gamma declares 2^40 channels in as many groups must not make Lilou write
    2^40 constants: the node stays, named unsupported."""
    big = []
    for name in ("gamma", "beta"):
        declared = onnx.TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[1 << 40],
                                    data_location=TensorProto.EXTERNAL)
        declared.external_data.add(key="location", value="absent.bin")
        big.append(declared)
    norm = helper.make_node("GroupNorm", ["x", "gamma", "beta"], ["y"], domain="com.microsoft", groups=1 << 40,
                            activation=0, epsilon=1e-5)
    model = make_model([norm], [tensor("x", [1, 4, 4, 8])], [tensor("y", None)], big, opset=17)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    from lilou.graph.contrib_ops import restore_contrib_ops

    assert restore_contrib_ops(model) == {}
