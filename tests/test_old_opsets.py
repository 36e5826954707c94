"""Files exported at old opsets (the TorchScript exporter at opset 11, the default of many tools) are read as fully as
newer ones: every shape known, the same kernels and latency as the same model exported at opset 14."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from lilou.graph import build_graph
from lilou.graph import shape_completion
from tests.onnx_builders import ints, make_model, tensor


def test_an_old_version_of_an_op_is_evaluated_as_that_version() -> None:
    """Unsqueeze-11 takes its axes as an attribute; the reference runtime, handed the bare node, ran Unsqueeze-13."""
    node = helper.make_node("Unsqueeze", ["a"], ["b"], axes=[0])
    (value,) = shape_completion._evaluate(node, [np.array(5, dtype=np.int64)], 11)
    assert value.tolist() == [5]


def test_a_shape_computed_through_opset_11_ops_is_known() -> None:
    """x.view(x.size(0), -1) as the opset-11 exporter writes it: Shape, Gather, Unsqueeze(axes=[0]), Concat, Reshape."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
             helper.make_node("Unsqueeze", ["batch"], ["batch1"], axes=[0]),
             helper.make_node("Concat", ["batch1", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"]),
             helper.make_node("Relu", ["flat"], ["y"])]
    model = make_model(nodes, [tensor("x", [2, 3, 4])], [tensor("y", None)],
                       [ints("zero", 0), ints("minus_one", [-1])], opset=11)
    graph = build_graph(model)
    assert graph.outputs[0].shape == (2, 12)
    assert not any("unknown shape" in w for w in graph.warnings)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["poolformer-s12", "swin-tiny"])
def test_an_opset_11_export_is_priced_as_its_opset_14_export(zoo_onnx, name: str) -> None:
    """PoolFormer's group norms reshape to the shape of the block before (one more round of shape completion per
    block: 17 rounds, where 8 stopped at block 2.4); Swin pads windows by sizes computed through Unsqueeze-11."""
    from lilou.api import Predictor

    predictor = Predictor()
    old = predictor.predict(zoo_onnx(name, dynamo=False, opset=11), gpu="a10g")
    new = predictor.predict(zoo_onnx(name, dynamo=False, opset=14), gpu="a10g")
    assert not any("unknown shape" in w for w in old.warnings)
    assert len(old.kernels) == len(new.kernels)
    assert old.latency_ms == new.latency_ms
