"""Valid models that Lilou's input checks once refused: each loads, with every shape and exact costs."""
from __future__ import annotations

import pytest
from onnx import helper

from lilou.errors import LilouInputError
from lilou.graph.dag import build_graph
from tests.onnx_builders import make_model, tensor


def _pool(ceil_mode: int):
    node = helper.make_node("AveragePool", ["x"], ["y"], name="pool", kernel_shape=[16, 16], strides=[16, 16],
                            ceil_mode=ceil_mode)
    return make_model([node], [tensor("x", [1, 8, 3, 3])], [tensor("y", None)])


def test_a_ceil_mode_pool_wider_than_its_input_has_one_output() -> None:
    """HF EfficientNet's pooler is AvgPool2d(1280, ceil_mode=True) over a 7x7 map: one output per channel, which
    PyTorch and ONNX both compute; it reads the whole 3x3 input once (8 channels x 9 elements)."""
    graph = build_graph(_pool(ceil_mode=1))
    data = graph.dag.nodes["pool"]
    assert data["outputs"][0].shape == (1, 8, 1, 1) and data["flops"] == 72
    with pytest.raises(LilouInputError, match="larger than its padded input"):
        build_graph(_pool(ceil_mode=0))  # floor mode: no window fits, no output


def test_bloom_alibi_export_loads_with_every_shape(tmp_path) -> None:
    """ONNX's data propagation rejects BLOOM's ALiBi slopes (a Mul of 1-D values of lengths 4 and 32); inference
    without it, plus constant folding, finds every shape (a one-layer BLOOM, hidden 64, 4 heads, seq 32)."""
    from lilou.graph.dag import load_graph
    from lilou.zoo.export import export_onnx
    from lilou.zoo.registry import build

    path = tmp_path / "bloom.onnx"
    export_onnx(build("bloom-560m", n_layer=1, hidden_size=64, n_head=4, seq=32), path, strip_weights=True)
    graph = load_graph(path)
    assert not any("unknown shape" in w for w in graph.warnings)
    assert all(t.shape is not None for n in graph.runtime_nodes() for t in graph.dag.nodes[n]["outputs"])
    runtime = list(graph.runtime_nodes())
    assert len(runtime) == 53 and sum(graph.dag.nodes[n]["flops"] for n in runtime) == 1_031_198_720
