"""Loading never reads weight bytes it does not need, and never leaves the model's folder."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lilou.graph import load_graph
from tests.onnx_builders import make_model, tensor


def reshape_model_with_external_shape(location: str) -> onnx.ModelProto:
    """Reshape whose target shape (int64) is stored as external data at ``location``."""
    shape = numpy_helper.from_array(np.array([4, 6], dtype=np.int64), "target")
    shape.ClearField("raw_data")
    shape.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = shape.external_data.add()
        entry.key, entry.value = key, value
    big = TensorProto(name="big_weight", data_type=TensorProto.FLOAT, dims=[1000, 1000])
    big.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "missing.weights"), ("offset", "0"), ("length", "4000000")):
        entry = big.external_data.add()
        entry.key, entry.value = key, value
    nodes = [helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape"),
             helper.make_node("MatMul", ["probe", "big_weight"], ["z"], name="matmul")]
    return make_model(nodes, [tensor("x", [2, 12]), tensor("probe", [3, 1000])],
                      [tensor("y", None), tensor("z", None)], [shape, big])


def test_small_external_shape_constant_inside_the_folder_is_read(tmp_path):
    (tmp_path / "shape.bin").write_bytes(np.array([4, 6], dtype=np.int64).tobytes())
    path = tmp_path / "model.onnx"
    path.write_bytes(reshape_model_with_external_shape("shape.bin").SerializeToString())
    graph = load_graph(path)
    assert graph.dag.nodes["reshape"]["outputs"][0].shape == (4, 6)
    # the 4 MB weight is absent: only its dims were needed
    assert graph.dag.nodes["matmul"]["flops"] == 2 * 3 * 1000 * 1000


def test_external_path_outside_the_folder_is_never_followed(tmp_path):
    outside = tmp_path / "secret.bin"
    outside.write_bytes(np.array([4, 6], dtype=np.int64).tobytes())
    folder = tmp_path / "model"
    folder.mkdir()
    path = folder / "model.onnx"
    path.write_bytes(reshape_model_with_external_shape("../secret.bin").SerializeToString())
    graph = load_graph(path)
    assert graph.dag.nodes["reshape"]["outputs"][0].shape is None  # not read, so unknown
    assert any("unknown shape" in w for w in graph.warnings)
