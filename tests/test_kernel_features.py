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


def test_winograd_roofline_bounds_the_fastest_measured_v100_convolution(datasets_dir):
    """The V100's fastest 3x3 convolution against its roofline in NeuSight's rows runs 2.2x faster than its direct
    FLOPs allow at FP32 peak: cuDNN ran it as Winograd. Its Winograd FLOPs (direct / 2.25) bound it from below."""
    from lilou.latency.kernel_model.features import WINOGRAD_GAIN, roofline_inputs

    table = load_kernels("train", ops=["conv"], data_dir=datasets_dir)
    shape = {"B": 63, "C_in": 452, "C_out": 621, "kernel_size": 3, "input_size": 12, "stride": 1, "padding": 1}
    rows = [table[i] for i in range(len(table)) if table.gpu[i] == "v100-pcie-32gb" and table[i].shape == shape]
    assert len(rows) == 1 and rows[0].latency_ms == pytest.approx(1.45666, rel=1e-5)
    v100 = DeviceColumns.from_devices([resolve_device("v100-pcie-32gb")])
    batch = KernelBatch.from_specs([describe_kernel(cost_nodes("conv", shape))])
    direct, _ = roofline_ms(batch, v100)
    winograd, _ = roofline_ms(batch, v100, winograd=True)
    assert direct[0] == pytest.approx(3.27399, rel=1e-5)  # 2 x 63 x 144 x 621 x 452 x 9 FLOPs at 14.0 TFLOPS
    assert winograd[0] == pytest.approx(direct[0] / WINOGRAD_GAIN)
    assert winograd[0] < rows[0].latency_ms < direct[0]
    assert roofline_inputs(batch, v100, winograd=True)[0, 0] == pytest.approx(np.log(winograd[0]), rel=1e-6)


def test_winograd_applies_to_3x3_stride_1_convolutions_on_cuda_cores_only():
    from lilou.latency.kernel_model.features import RIDGE_CLIP, winograd_eligible

    def conv(kernel_size: int, stride: int):
        return describe_kernel(cost_nodes("conv", {"B": 8, "C_in": 64, "C_out": 64, "kernel_size": kernel_size,
                                                   "input_size": 56, "stride": stride, "padding": 1}))

    specs = [conv(3, 1), conv(3, 2), conv(1, 1), conv(5, 1)]
    batch = KernelBatch.from_specs(specs)
    a100 = resolve_device("a100-sxm4-80gb")
    fp32 = DeviceColumns.from_devices([a100] * 4)
    fp16 = DeviceColumns.from_devices([a100] * 4, units=["fp16_tensor"] * 4)
    assert winograd_eligible(batch, fp32).tolist() == [True, False, False, False]
    assert winograd_eligible(batch, fp16).tolist() == [False] * 4  # tensor-core convolutions are implicit GEMMs
    names = feature_names(["algorithm", "ridge"])
    columns = kernel_features(batch, fp32, ["algorithm", "ridge"])
    assert names == ["winograd_eligible", "log_compute_over_memory"]
    assert columns[:, 0].tolist() == [1.0, 0.0, 0.0, 0.0]
    compute, memory = roofline_ms(batch, fp32)
    ridge = np.log2(compute + 1e-6) - np.log2(memory + 1e-6)
    assert ridge[0] > RIDGE_CLIP  # a 64-channel 3x3 convolution is compute-bound on an A100 beyond the clip
    np.testing.assert_allclose(columns[:, 1], np.clip(ridge, -RIDGE_CLIP, RIDGE_CLIP), rtol=1e-5)
    elementwise = KernelBatch.from_specs([describe_kernel(cost_nodes("add", {"B": 1024, "H": 1024}))])
    assert kernel_features(elementwise, DeviceColumns.from_devices([a100]), ["ridge"])[0, 0] == -RIDGE_CLIP


def test_balance_is_dram_bytes_per_sm_cycle_on_row_wise_kernels_only():
    """Vidur's RMSNorm reaches 34 % of the A100-80GB's bandwidth and 60 % of the A40's: with 2039 GB/s over
    108 SMs at 1410 MHz an A100 SM has 13.4 bytes per cycle to fill, an A40 SM 4.8 (696 GB/s, 84 SMs, 1740 MHz).
    The feature is that, in log2, on layer norm and softmax rows; a GEMM or an elementwise kernel gets 0."""
    specs = [describe_kernel(cost_nodes("ln", {"B": 32, "H": 1024})),
             describe_kernel(cost_nodes("softmax", {"B": 32, "H": 1024})),
             describe_kernel(cost_nodes("linear", {"B": 8, "M": 512, "N": 1024, "K": 1024})),
             describe_kernel(cost_nodes("add", {"B": 1024, "H": 1024}))]
    batch = KernelBatch.from_specs(specs)
    assert feature_names(["balance"]) == ["row_log_dram_bytes_per_sm_cycle"]
    for gpu, per_cycle in (("a100-sxm4-80gb", 2039e9 / (108 * 1410e6)), ("a40", 696e9 / (84 * 1740e6))):
        columns = kernel_features(batch, DeviceColumns.from_devices([resolve_device(gpu)] * 4), ["balance"])
        np.testing.assert_allclose(columns[:, 0], [np.log2(per_cycle)] * 2 + [0.0, 0.0], rtol=1e-6)
