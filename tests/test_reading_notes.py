"""What a reading leaves out is said: external data refused or missing, and each warning once (lilou.results)."""
from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from lilou.graph.dag import load_graph
from lilou.results import Prediction, Ranking
from tests.onnx_builders import make_model, tensor


def _reshape_to_external_shape(folder, location: str):
    shape = TensorProto(name="w", data_type=TensorProto.INT64, dims=[2], data_location=TensorProto.EXTERNAL)
    entry = shape.external_data.add()
    entry.key, entry.value = "location", location
    nodes = [helper.make_node("Reshape", ["x", "w"], ["y"], name="r"), helper.make_node("Relu", ["y"], ["z"], name="relu")]
    path = folder / "model.onnx"
    onnx.save(make_model(nodes, [tensor("x", [16])], [tensor("z", None)], [shape], opset=17), path)
    return path


@pytest.mark.parametrize(("location", "why"), [
    ("../outside.bin", "its external data '../outside.bin' lies outside the model's folder, where Lilou never reads; "
                       "shapes that depend on it are unknown (put the data file beside the model)"),
    ("/etc/passwd", "its external data '/etc/passwd' lies outside the model's folder, where Lilou never reads; "
                    "shapes that depend on it are unknown (put the data file beside the model)"),
    ("nothere.bin", "its external data file 'nothere.bin' is missing or not a regular file; shapes that depend on it "
                    "are unknown"),
])
def test_a_shape_constant_left_unread_says_why(tmp_path, location, why):
    """The warnings said only "2 node(s) have outputs of unknown shape (r, relu)" (report ua43a F8)."""
    (tmp_path / "outside.bin").write_bytes(bytes(16))
    folder = tmp_path / "model"
    folder.mkdir()
    warnings = load_graph(_reshape_to_external_shape(folder, location)).warnings
    assert f"initializer 'w' (a shape constant) is not read: {why}" in warnings
    assert any(w.startswith("2 node(s) have outputs of unknown shape (r, relu)") for w in warnings)


def test_warnings_are_said_once_each_in_first_seen_order():
    """A file of 14 nested Ifs gave 1,033 warnings, 20 of them distinct."""
    prediction = Prediction(model="m", gpu="a10g", mig=None, backend="eager", batch=1, latency_ms=1.0, kernels=[],
                            warnings=["b", "a", "b", "c", "a"])
    assert prediction.warnings == ["b", "a", "c"]
    assert Ranking(model="m", backend="eager", entries=[], warnings=["x", "x", "y"]).warnings == ["x", "y"]


def test_a_prepared_model_keeps_each_warning_once():
    import dataclasses

    from lilou.results import PreparedModel

    prepared = PreparedModel(name="m", graph=None, kernels=None, warnings=("b", "a", "b"), backend="eager")
    assert prepared.warnings == ("b", "a")
    assert dataclasses.replace(prepared, warnings=("c", "c", "b")).warnings == ("c", "b")
