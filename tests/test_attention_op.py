"""ONNX ``Attention`` (opset 23: what ``torch.onnx.export`` writes for ``F.scaled_dot_product_attention`` there) is
priced as the fused attention kernel eager runs, exactly as the decomposed call of lower opsets; and a kernel that
holds a view reads the viewed tensor."""
from __future__ import annotations

import contextlib
import io

import pytest
from onnx import helper

from lilou.graph import build_graph
from lilou.latency.kernel_model.kernel import describe_graph_kernel
from tests.onnx_builders import ints, make_model, tensor, weight


def attention_graph(q_shape, kv_shape, past=None, **attributes):
    inputs = ["q", "k", "v", "", "past_key", "past_value"] if past else ["q", "k", "v"]
    outputs = ["y", "present_key", "present_value"] if past else ["y"]
    node = helper.make_node("Attention", inputs, outputs, name="attention", **attributes)
    values = [tensor("q", q_shape), tensor("k", kv_shape), tensor("v", kv_shape)]
    if past:
        values += [tensor("past_key", past), tensor("past_value", past)]
    return build_graph(make_model([node], values, [tensor(name, None) for name in outputs], opset=23))


def test_grouped_query_attention_counts_both_products_the_causal_mask_and_the_softmax():
    graph = attention_graph([2, 8, 128, 64], [2, 2, 128, 64], is_causal=1)
    data = graph.dag.nodes["attention"]
    assert data["supported"] and graph.unsupported_ops == []
    scores = 2 * 8 * 128 * 128
    q, kv = 2 * 8 * 128 * 64, 2 * 2 * 128 * 64
    # Q.K^T and P.V at 2 FLOPs per multiply-add, mask and softmax per score, Q and K (per query head) scaled
    assert data["flops"] == 2 * scores * (64 + 64) + (1 + 5) * scores + q + 4 * kv
    assert data["bytes_read"] == 4 * (q + 2 * kv)  # Q, K and V once: no score matrix
    assert data["bytes_written"] == 4 * q
    spec = describe_graph_kernel(graph, ["attention"])
    assert spec.family == "gemm" and spec.gemm == (16, 128, 128, 64)  # its first product, per query head


def test_a_decode_step_with_a_kv_cache_attends_over_the_past_and_writes_the_cache():
    """3-D Q, K and V (heads as attributes) of one new token, 100 cached ones."""
    graph = attention_graph([1, 1, 8 * 64], [1, 1, 2 * 64], past=[1, 2, 100, 64], q_num_heads=8, kv_num_heads=2)
    data = graph.dag.nodes["attention"]
    scores = 8 * 1 * 101
    assert data["flops"] == 2 * scores * 128 + 5 * scores + 8 * 64 + 8 * 64 * 101
    present = 1 * 2 * 101 * 64
    assert data["bytes_read"] == 4 * (8 * 64 + 2 * 128 + 2 * 2 * 100 * 64)
    assert data["bytes_written"] == 4 * (8 * 64 + 2 * present)
    assert describe_graph_kernel(graph, ["attention"]).gemm == (8, 1, 101, 64)


def test_an_attention_node_is_predicted_as_the_fused_kernel_and_says_so():
    from lilou.api import Predictor

    graph = attention_graph([4, 16, 512, 64], [4, 16, 512, 64])
    prediction = Predictor().predict(graph, gpu="a100-sxm4-80gb")
    (kernel,) = prediction.kernels
    assert kernel.extrapolated and not kernel.fallback
    assert kernel.flops == graph.dag.nodes["attention"]["flops"]
    assert any("fused attention kernel" in w for w in prediction.warnings)
    assert not any("unsupported op" in w or "memory-bound fallback" in w for w in prediction.warnings)


def test_a_kernel_holding_a_view_reads_the_viewed_tensor():
    """x -> Reshape -> MatMul as one kernel (a TVM group, a fused call): x is read from memory, once."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["x2"], name="reshape"),
             helper.make_node("MatMul", ["x2", "w"], ["y"], name="matmul")]
    graph = build_graph(make_model(nodes, [tensor("x", [4, 8, 16])], [tensor("y", None)],
                                   [weight("w", [16, 8]), ints("shape", [32, 16])]))
    spec = describe_graph_kernel(graph, ["reshape", "matmul"])
    assert spec.bytes_read == 4 * (4 * 8 * 16 + 16 * 8)
    assert spec.bytes_written == 4 * 32 * 8


@pytest.mark.slow
def test_sdpa_exported_at_opset_23_is_priced_as_at_opset_18(tmp_path):
    """The same ``F.scaled_dot_product_attention`` exported by dynamo below opset 23 (its math, fused back into one
    kernel by the exporter's names) and at opset 23 (one Attention node): the same FLOPs and latency; the same bytes
    but the decomposition's 4-byte scale constant (plain attention), or its causal mask, which the Attention node
    computes instead of reading (causal, grouped-query)."""
    torch = pytest.importorskip("torch")

    from lilou.api import Predictor

    class SDPA(torch.nn.Module):
        def __init__(self, causal: bool):
            super().__init__()
            self.causal = causal

        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal,
                                                                    enable_gqa=self.causal)

    cases = {False: ((2, 8, 128, 64), (2, 8, 128, 64)), True: ((2, 8, 128, 64), (2, 2, 128, 64))}
    for causal, (q_shape, kv_shape) in cases.items():
        args = (torch.randn(*q_shape), torch.randn(*kv_shape), torch.randn(*kv_shape))
        predictions = {}
        for opset in (18, 23):
            path = tmp_path / f"sdpa-{causal}-{opset}.onnx"
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                torch.onnx.export(SDPA(causal).eval(), args, path, dynamo=True, opset_version=opset)
            predictions[opset] = Predictor().predict(path, gpu="a100-sxm4-80gb")
        (decomposed,), (node,) = predictions[18].kernels, predictions[23].kernels
        assert node.ops == ("Attention",) and node.extrapolated
        assert node.flops == decomposed.flops
        q, kv = 2 * 8 * 128 * 64, 2 * kv_shape[1] * 128 * 64
        assert node.bytes == 4 * (2 * q + 2 * kv)  # Q, K, V read, the output written
        if not causal:
            assert decomposed.bytes - node.bytes == 4
        assert node.latency_ms == pytest.approx(decomposed.latency_ms, rel=1e-3)
