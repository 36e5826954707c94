"""Kernel descriptions and features: a measured row and an ONNX group describe the same kernel alike."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from lilou.data.neusight import load_kernels
from lilou.latency.kernel_model.measured import cost_nodes
from lilou.graph import build_graph
from lilou.hardware import resolve_device
from lilou.latency.kernel_model.features import DeviceColumns, KernelBatch, feature_names, kernel_features, roofline_ms
from lilou.latency.kernel_model.kernel import describe_graph_kernel, describe_kernel
from tests.onnx_builders import make_model, tensor, weight


def linear_graph(b: int, m: int, n: int, k: int):
    """nn.Linear(n, k) on [b, m, n] as exporters write it: MatMul then Add of the bias."""
    nodes = [helper.make_node("MatMul", ["x", "weight"], ["matmul_out"], name="matmul"),
             helper.make_node("Add", ["matmul_out", "bias"], ["y"], name="bias_add")]
    model = make_model(nodes, [tensor("x", [b, m, n])], [tensor("y", None)],
                       [weight("weight", [n, k]), weight("bias", [k])])
    return build_graph(model)


def test_neusight_linear_row_and_onnx_group_get_identical_features(datasets_dir):
    table = load_kernels("train", ops=["linear"], devices=["Tesla T4"], data_dir=datasets_dir, limit_per_file=1)
    row = table[0]
    assert (row.shape, row.gpu) == ({"B": 1, "M": 58, "N": 13, "K": 141}, "t4")
    measured = describe_kernel(cost_nodes(row.op, row.shape))
    graph = linear_graph(1, 58, 13, 141)
    grouped = describe_graph_kernel(graph, ["matmul", "bias_add"])
    assert grouped == measured
    assert measured.gemm == (1, 58, 141, 13)  # rows, cols of the output; 13 is the reduction
    assert measured.flops == 2 * 58 * 13 * 141 + 58 * 141
    assert measured.bytes == 4 * (58 * 13 + 13 * 141 + 141 + 58 * 141)
    devices = DeviceColumns.from_devices([resolve_device("t4")])
    ours = kernel_features(KernelBatch.from_specs([grouped]), devices)
    theirs = kernel_features(KernelBatch.from_specs([measured]), devices)
    np.testing.assert_array_equal(ours, theirs)
    assert ours.shape == (1, len(feature_names()))


def test_group_writes_an_intermediate_that_leaves_the_group():
    graph = linear_graph(2, 4, 8, 16)
    alone = describe_graph_kernel(graph, ["matmul"])
    assert alone.bytes_written == 4 * 2 * 4 * 16  # the MatMul result goes to the Add outside
    assert alone.family == "gemm"


def test_bmm_and_conv_map_to_gemm_dimensions():
    bmm = describe_kernel(cost_nodes("bmm", {"B": 12, "M": 128, "N": 64, "K": 128}))
    assert bmm.gemm == (12, 128, 128, 64)
    conv = describe_kernel(cost_nodes("conv", {"B": 8, "C_in": 64, "C_out": 128, "kernel_size": 3,
                                               "input_size": 56, "stride": 1, "padding": 1}))
    assert conv.family == "conv"
    assert conv.gemm == (1, 8 * 56 * 56, 128, 64 * 9)
    assert conv.conv == (9, 1, 1)


@pytest.mark.parametrize("op,family,rows,cols", [("ln", "layernorm", 32, 1024), ("softmax", "softmax", 32, 1024)])
def test_row_ops(op, family, rows, cols):
    spec = describe_kernel(cost_nodes(op, {"B": rows, "H": cols}))
    assert (spec.family, spec.rows, spec.cols) == (family, rows, cols)


def test_roofline_uses_peak_and_bandwidth_of_a_mig_slice():
    spec = describe_kernel(cost_nodes("add", {"B": 1024, "H": 1024}))
    whole = DeviceColumns.from_devices([resolve_device("a100-sxm4-40gb")])
    slice_ = DeviceColumns.from_devices([resolve_device("a100-sxm4-40gb", "3g.20gb")])
    batch = KernelBatch.from_specs([spec])
    _, memory_whole = roofline_ms(batch, whole)
    _, memory_slice = roofline_ms(batch, slice_)
    assert spec.bytes == 3 * 4 * 1024 * 1024
    assert memory_whole[0] == pytest.approx(spec.bytes / 1555e6)
    assert memory_slice[0] == pytest.approx(2 * memory_whole[0])  # 4 of 8 memory slices
