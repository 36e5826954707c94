"""Convolutions of a form no source measured (3-D, dilated) are priced, flagged extrapolated and named in the
warnings; the 2-D undilated form every source measured is not."""
from __future__ import annotations

from onnx import helper

from lilou.api import Predictor
from lilou.graph.dag import build_graph
from lilou.graph.loading import load_onnx
from lilou.latency.kernel_model.kernel import describe_graph_kernel
from tests.onnx_builders import make_model, tensor, weight

CASES = {  # name: (input, weight, output, attributes, form)
    "plain": ([8, 64, 56, 56], [64, 64, 3, 3], [8, 64, 56, 56], {"pads": [1, 1, 1, 1]}, ""),
    "dilated": ([8, 64, 56, 56], [64, 64, 3, 3], [8, 64, 56, 56], {"pads": [2, 2, 2, 2], "dilations": [2, 2]},
                "dilated"),
    "3d": ([2, 32, 16, 56, 56], [32, 32, 3, 3, 3], [2, 32, 16, 56, 56], {"pads": [1] * 6}, "3-D"),
}


def _model(tmp_path, name, case=None):
    shape_in, shape_w, shape_out, attributes, _ = case or CASES[name]
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attributes)],
                       [tensor("x", shape_in)], [tensor("y", shape_out)], [weight("w", shape_w)])
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_the_form_of_a_convolution_is_read_from_its_weight_and_dilations(tmp_path):
    for name, (*_, form) in CASES.items():
        spec = describe_graph_kernel(build_graph(load_onnx(_model(tmp_path, name))), ["conv"])
        assert spec.conv_form == form
    flops = describe_graph_kernel(build_graph(load_onnx(_model(tmp_path, "3d"))), ["conv"]).flops
    assert flops == 2 * (2 * 32 * 16 * 56 * 56) * (32 * 27)


def test_unmeasured_convolution_forms_are_flagged_and_named(tmp_path):
    predictor = Predictor()
    for name, (*_, form) in CASES.items():
        prediction = predictor.predict(_model(tmp_path, name), gpu="t4", tf32="off")
        (kernel,) = prediction.kernels
        warned = [w for w in prediction.warnings if "convolutions of a form no source measured" in w]
        assert kernel.extrapolated == bool(form)
        assert warned == ([f"convolutions of a form no source measured (1 {form}; every measured one is 2-D without "
                           "dilation): priced by the convolution model beyond its data (flagged extrapolated): "
                           "100.0 % of the predicted time"] if form else [])


def test_only_a_2d_undilated_3x3_filter_is_winograd_eligible(tmp_path):
    """cuDNN's Winograd kernels take 2-D 3x3 filters without dilation; a dilated 3x3 or a 3-D 3x3x1 filter has a
    window of 9 taps too but runs as an implicit GEMM, so it must not get the Winograd roofline."""
    from lilou.hardware import resolve_device
    from lilou.latency.kernel_model.features import DeviceColumns, KernelBatch, winograd_eligible

    cases = dict(CASES, **{"3x3x1": ([2, 32, 16, 56, 56], [32, 32, 3, 3, 1], [2, 32, 16, 56, 56],
                                     {"pads": [1, 1, 0, 1, 1, 0]}, "3-D")})
    specs = {name: describe_graph_kernel(build_graph(load_onnx(_model(tmp_path, name, case))), ["conv"])
             for name, case in cases.items()}
    assert {name: spec.conv[0] for name, spec in specs.items()} == {"plain": 9, "dilated": 9, "3d": 27, "3x3x1": 9}
    batch = KernelBatch.from_specs(list(specs.values()))
    eligible = winograd_eligible(batch, DeviceColumns.from_devices([resolve_device("t4")] * len(specs)))
    assert dict(zip(specs, eligible.tolist())) == {"plain": True, "dilated": False, "3d": False, "3x3x1": False}
    predictor = Predictor()
    plain, dilated = (predictor.predict(_model(tmp_path, name), gpu="t4").kernels[0] for name in ("plain", "dilated"))
    assert plain.flops == dilated.flops and dilated.work_ms > plain.work_ms
