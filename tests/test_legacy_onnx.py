"""Old ONNX files (IR version 3, opsets 1-8) as old converters and hand edits wrote them."""
from __future__ import annotations

import onnx
from onnx import helper

from lilou.graph.dag import load_graph
from tests.onnx_builders import make_model, tensor, weight


def _conv(name: str, x: str, w: str, y: str) -> onnx.NodeProto:
    return helper.make_node("Conv", [x, w], [y], name=name, kernel_shape=[3, 3], pads=[1, 1, 1, 1])


def test_an_ir_3_file_whose_weights_are_not_listed_as_inputs_is_shaped(tmp_path):
    """Before IR 4 every initializer is also a graph input, and ONNX's inference reads only those listed: a file
    that breaks the rule had no shape after its first weight (2 convolutions of 0 FLOPs, 'unknown shape')."""
    nodes = [_conv("c1", "x", "w1", "h"), helper.make_node("Relu", ["h"], ["r"], name="relu"), _conv("c2", "r", "w2", "y")]
    model = make_model(nodes, [tensor("x", [2, 3, 8, 8])], [tensor("y", None)], [weight("w1", [4, 3, 3, 3]),
                                                                                 weight("w2", [5, 4, 3, 3])], opset=6)
    model.ir_version = 3
    path = tmp_path / "ir3.onnx"
    onnx.save(model, path)
    graph = load_graph(path)
    assert {t.name: t.shape for t in graph.outputs} == {"y": (2, 5, 8, 8)}
    flops = {d["op"]: d["flops"] for _, d in graph.dag.nodes(data=True) if d["op"] == "Conv" and d["outputs"][0].name == "y"}
    assert flops == {"Conv": 2 * 2 * 5 * 8 * 8 * 4 * 9}
    assert [t.name for t in graph.inputs] == ["x"]
    assert not any("unknown shape" in w for w in graph.warnings)
