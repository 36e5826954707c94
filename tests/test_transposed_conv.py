"""Transposed convolutions: described as the convolution whose input gradient they compute, priced at the
backward-data / forward ratio DeepBench measured (lilou/latency/kernel_model/transposed.py)."""
from __future__ import annotations

import json
from importlib import resources

import pytest
from onnx import helper

from lilou.api import Predictor
from lilou.data.kernel_table import load_rows
from lilou.graph.dag import build_graph
from lilou.latency.kernel_model.kernel import describe_graph_kernel
from lilou.latency.kernel_model.table_kernels import row_nodes
from lilou.latency.kernel_model.transposed import SHAPE_FIELDS, fit_ratios, load_ratios, paired_ratios
from tests.onnx_builders import make_model, tensor, weight

_PAIR_COLUMNS = ["gpu", "dtype", "subset", "mode", *SHAPE_FIELDS, "latency_ms"]


def up_and_down(tmp_path):
    """A stride-2 ConvTranspose (256 -> 128 channels, 32x32 -> 64x64, batch 16) and the Conv whose input gradient
    it computes (128 -> 256, 64x64 -> 32x32, the same weight shape), as ONNX files."""
    attributes = {"kernel_shape": [4, 4], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    up = make_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", **attributes)],
                    [tensor("x", [16, 256, 32, 32])], [tensor("y", [16, 128, 64, 64])], [weight("w", [256, 128, 4, 4])])
    down = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="down", **attributes)],
                      [tensor("x", [16, 128, 64, 64])], [tensor("y", [16, 256, 32, 32])], [weight("w", [256, 128, 4, 4])])
    paths = {}
    for name, model in (("up", up), ("down", down)):
        paths[name] = tmp_path / f"{name}.onnx"
        paths[name].write_bytes(model.SerializeToString())
    return paths


def test_a_transposed_convolution_is_described_as_the_convolution_whose_input_gradient_it_computes(tmp_path):
    from lilou.graph.loading import load_onnx

    paths = up_and_down(tmp_path)
    up = describe_graph_kernel(build_graph(load_onnx(paths["up"])), ["up"])
    down = describe_graph_kernel(build_graph(load_onnx(paths["down"])), ["down"])
    # implicit GEMM of the forward convolution: 16 x 32 x 32 output pixels, 256 output channels, 128 x 16 taps
    assert up.gemm == down.gemm == (1, 16 * 32 * 32, 256, 128 * 16)
    assert up.conv == down.conv == (16, 2, 1)
    assert up.flops == down.flops == 2 * 16 * 32 * 32 * 256 * 128 * 16
    assert up.bytes == down.bytes and up.out_elements == down.out_elements == 16 * 256 * 32 * 32
    assert up.transposed and not down.transposed


def test_a_backward_data_row_of_the_table_is_the_convolution_transpose_that_runs_it():
    row = {"family": "conv", "dtype": "fp32", "op": "conv", "mode": "backward-data", "batch": 16, "in_c": 256,
           "in_h": 56, "in_w": 56, "out_c": 128, "kernel_h": 1, "kernel_w": 1, "stride_h": 2, "stride_w": 2,
           "pad_h": 0, "pad_w": 0}
    (node,) = row_nodes(row)
    assert node.op == "ConvTranspose"
    assert [t.shape for t in node.inputs] == [(16, 128, 28, 28), (128, 256, 1, 1)]
    assert node.outputs[0].shape == (16, 256, 56, 56)
    (forward,) = row_nodes({**row, "mode": "forward"})
    assert forward.op == "Conv" and forward.outputs[0].shape == (16, 128, 28, 28)


def test_the_ratio_of_one_measured_pair(datasets_dir):
    """ResNet-50's stride-2 1x1 downsampling convolution on DeepBench's V100, batch 16: 0.086 ms forward, 0.252 ms
    backward-data."""
    rows = load_rows("source = 'deepbench' AND family = 'conv' AND gpu = 'v100-sxm2-16gb' AND dtype = 'fp32' AND "
                     "batch = 16 AND in_c = 256 AND in_h = 56 AND out_c = 128 AND kernel_h = 1",
                     _PAIR_COLUMNS, data_dir=datasets_dir).to_pylist()
    (pair,) = paired_ratios(rows)
    assert (pair["forward_ms"], pair["backward_data_ms"]) == (0.086, 0.252)
    assert pair["ratio"] == pytest.approx(0.252 / 0.086) and pair["stride_class"] == "strided"


def test_the_shipped_ratios_are_the_fit_on_the_table(datasets_dir):
    rows = load_rows("source = 'deepbench' AND family = 'conv' AND dtype = 'fp32' AND "
                     "mode IN ('forward', 'backward-data')", _PAIR_COLUMNS, data_dir=datasets_dir).to_pylist()
    fitted = fit_ratios(paired_ratios(rows))
    shipped = json.loads(resources.files("lilou.latency.kernel_model").joinpath("transposed_conv.json").read_text())
    assert {cls: round(entry["ratio"], 4) for cls, entry in fitted.items()} == shipped["ratio"]
    assert sorted(fitted["strided"]["gpus"]) == sorted(shipped["per_gpu"]["strided"])  # eight GPUs, Maxwell to Turing
    assert len(fitted["strided"]["gpus"]) == 8 and sum(fitted["strided"]["rows"].values()) == 222
    ratios = load_ratios()
    assert (ratios.strided, ratios.unit_stride) == (shipped["ratio"]["strided"], shipped["ratio"]["unit_stride"])
    assert ratios.architectures == ("Maxwell", "Pascal", "Turing", "Volta")


def test_a_strided_transposed_convolution_costs_the_measured_ratio_more_than_its_forward_convolution(tmp_path):
    paths = up_and_down(tmp_path)
    predictor = Predictor()
    ratio = load_ratios().strided
    for gpu in ("t4", "a100-sxm4-80gb"):
        up = predictor.predict(paths["up"], gpu=gpu, tf32="off")
        down = predictor.predict(paths["down"], gpu=gpu, tf32="off")
        (transposed,), (forward,) = up.kernels, down.kernels
        assert transposed.work_ms == pytest.approx(ratio * forward.work_ms, rel=1e-9)
        warned = [w for w in up.warnings if "transposed convolutions" in w]
        # a Turing GPU: DeepBench measured backward-data kernels there; GA100: nobody did
        measured = gpu == "t4"
        assert transposed.extrapolated == (not measured) and forward.extrapolated is False
        assert len(warned) == (0 if measured else 1)
        if not measured:
            assert "no source measured them on GA100 (flagged extrapolated): 100.0 % of the predicted time" in warned[0]


def test_a_transposed_convolution_gets_the_band_of_its_own_residuals(tmp_path):
    """On a T4, the ConvTranspose's 90 % interval is the ``conv_transposed`` band calibrated on DeepBench's
    backward-data rows, wider than the forward convolution's (convolution bands come from leave-one-architecture-out
    folds alone, so every tier resolves to the ``arch_unseen`` one)."""
    import math

    from lilou.latency.composition.overhead import LAUNCH_GAP_RANGE
    from lilou.plan.calibration import Calibration

    paths = up_and_down(tmp_path)
    predictor = Predictor()
    calibration = Calibration.load()
    for name, family in (("up", "conv_transposed"), ("down", "conv")):
        (kernel,) = predictor.predict(paths[name], gpu="t4").kernels
        band = calibration.kernel_band(family, "fp32", "arch_unseen")
        # the band goes on the GPU work, the launch gap's range on the wait before it (session 41: the band went on both)
        wait, work = kernel.host_wait_ms, kernel.latency_ms - kernel.host_wait_ms
        assert kernel.interval_ms[1] == pytest.approx(wait * LAUNCH_GAP_RANGE[1] + work * math.exp(band.hi), rel=1e-3)
        assert kernel.interval_ms[0] == pytest.approx(wait * LAUNCH_GAP_RANGE[0] + work * math.exp(band.lo), rel=1e-3)
    assert calibration.kernel_band("conv_transposed", "fp32", "arch_unseen").hi > \
        calibration.kernel_band("conv", "fp32", "arch_unseen").hi
