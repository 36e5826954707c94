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


def _model(tmp_path, name):
    shape_in, shape_w, shape_out, attributes, _ = CASES[name]
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
