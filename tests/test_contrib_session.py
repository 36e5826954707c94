"""A model onnxruntime saved after its session's graph optimizations (FusedConv, FusedGemm, FusedMatMul) is priced as
the export it came from; one saved with the CPU-only NCHWc layout says it cannot be.

The graphs in tests/data/ort are real: a small residual CNN and a small BERT exported by torch.onnx (TorchScript) and
saved by an onnxruntime 1.32 CPU session (scripts/make_ort_fixtures.py --session), weights stripped.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from lilou.graph import build_graph
from tests.onnx_builders import make_model, tensor

ORT = Path(__file__).resolve().parent / "data" / "ort"


@pytest.fixture(scope="module")
def predictor():
    from lilou.api import Predictor

    return Predictor()


@pytest.mark.parametrize(("export", "saved", "note"), [
    ("cnn", "cnn-ort-session", "4 FusedConv, 1 FusedGemm"),
    ("bert", "bert-ort-session", "2 FusedMatMul, 2 Gelu, 4 SkipLayerNormalization"),
])
def test_a_saved_session_is_priced_as_its_export(predictor, export: str, saved: str, note: str) -> None:
    """Kernel for kernel: the convolutions with their (folded, restored) batch norms, residual adds and
    activations, the GEMM and its ReLU, the attention scores and their scale. (onnxruntime also writes BERT's
    3-D MatMul + Add as Reshape, Gemm, Reshape: the same GEMM kernels under other op names.)"""
    exported = predictor.predict(ORT / f"{export}.onnx", gpu="a10g")
    optimized = predictor.predict(ORT / f"{saved}.onnx", gpu="a10g")
    assert any(f"onnxruntime's fused ops ({note}) are priced" in w for w in optimized.warnings)
    assert not any("unknown shape" in w or "unsupported op" in w for w in optimized.warnings)
    assert sorted((k.category, k.flops) for k in optimized.kernels) == \
        sorted((k.category, k.flops) for k in exported.kernels)  # the order of the mask's kernels differs
    assert optimized.latency_ms == exported.latency_ms


def test_a_session_saved_with_the_cpu_layout_says_it_cannot_be_priced(predictor) -> None:
    result = predictor.predict(ORT / "cnn-ort-session-cpu.onnx", gpu="a10g")
    assert any("onnxruntime's CPU layout ops (Conv, ReorderOutput of com.microsoft.nchwc" in w
               and "ORT_ENABLE_EXTENDED" in w for w in result.warnings)


def _single(node: onnx.NodeProto, inputs, initializers) -> onnx.ModelProto:
    model = make_model([node], inputs, [tensor(node.output[0], None)], initializers, opset=17)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator

    from lilou.graph.contrib_ops import restore_contrib_ops

    assert sum(restore_contrib_ops(model).values()) == 1
    return ReferenceEvaluator(model).run(None, feeds)[0]


def test_written_back_fused_ops_compute_what_the_ops_compute() -> None:
    """FusedConv (residual input, ReLU6 as Clip), FusedGemm (LeakyReLU), FusedMatMul (scale, a constant operand
    transposed), run by ONNX's reference evaluator, against numpy."""
    rng = np.random.default_rng(0)
    x, z = rng.standard_normal((1, 2, 4, 4)).astype(np.float32), rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    weight = rng.standard_normal((3, 2, 1, 1)).astype(np.float32)
    conv = helper.make_node("FusedConv", ["x", "w", "", "z"], ["y"], domain="com.microsoft", kernel_shape=[1, 1],
                            activation="Clip", activation_params=[0.0, 6.0])
    y = _run(_single(conv, [tensor("x", [1, 2, 4, 4]), tensor("z", [1, 3, 4, 4])],
                     [numpy_helper.from_array(weight, "w")]), {"x": x, "z": z})
    assert np.allclose(y, np.clip(np.einsum("oi,nihw->nohw", weight[:, :, 0, 0], x) + z, 0, 6), atol=1e-5)

    a, b, c = (rng.standard_normal(shape).astype(np.float32) for shape in ((2, 4), (3, 4), (3,)))
    gemm = helper.make_node("FusedGemm", ["a", "b", "c"], ["y"], domain="com.microsoft", transB=1,
                            activation="LeakyRelu", activation_alpha=0.2)
    y = _run(_single(gemm, [tensor("a", [2, 4])], [numpy_helper.from_array(b, "b"), numpy_helper.from_array(c, "c")]),
             {"a": a})
    product = a @ b.T + c
    assert np.allclose(y, np.where(product > 0, product, 0.2 * product), atol=1e-5)

    q, k = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    matmul = helper.make_node("FusedMatMul", ["q", "k"], ["y"], domain="com.microsoft", transB=1, alpha=0.125)
    y = _run(_single(matmul, [tensor("q", [2, 3, 4])], [numpy_helper.from_array(k, "k")]), {"q": q})
    assert np.allclose(y, q @ k.T * 0.125, atol=1e-5)


@pytest.mark.parametrize("node", [
    helper.make_node("FusedConv", ["x", "w"], ["y"], domain="com.microsoft", kernel_shape=[1, 1], activation="Elu"),
    helper.make_node("FusedMatMul", ["x", "x2"], ["y"], domain="com.microsoft", transBatchA=1),
    helper.make_node("FusedMatMul", ["x", "x2"], ["y"], domain="com.microsoft", transA=1),
])
def test_a_fused_form_the_rewrite_does_not_reproduce_stays_unsupported(node: onnx.NodeProto) -> None:
    """An activation it does not write, a batch transpose, a transposed operand that is not a constant matrix."""
    model = _single(node, [tensor("x", [1, 2, 4, 4]), tensor("x2", [1, 2, 4, 4])],
                    [numpy_helper.from_array(np.ones((3, 2, 1, 1), np.float32), "w")])
    assert build_graph(model).unsupported_ops == [node.op_type]


def test_device_copies_a_cuda_session_writes_launch_nothing() -> None:
    """A model saved from a CUDA session holds MemcpyFromHost/MemcpyToHost around what it placed on the CPU; ONNX's
    shape inference does not know them (every later shape was unknown). They become views."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("MemcpyFromHost", ["shape"], ["shape_on_device"]),
             helper.make_node("Reshape", ["x", "shape_on_device"], ["y_device"]),
             helper.make_node("Relu", ["y_device"], ["r"]),
             helper.make_node("MemcpyToHost", ["r"], ["y"])]
    graph = build_graph(make_model(nodes, [tensor("x", [2, 8])], [tensor("y", None)], opset=17))
    assert not graph.unsupported_ops and graph.outputs[0].shape == (2, 8)
    assert [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()] == ["Reshape", "Relu", "Identity"]
