"""Weight-only nodes eager PyTorch recomputes on every forward (lilou/graph/weight_only.py)."""
from __future__ import annotations

import onnx
import pytest
from onnx import helper

from lilou.api import Predictor
from tests.onnx_builders import ints, make_model, tensor, weight

WARNING = ("3 node(s) compute on weights alone (1 Div, 1 Mul, 1 ReduceL2), moving 1.3 KB (55.0 % of the model's bytes "
           "counting them): Lilou treats their results as precomputed, as a runtime that folds constants does, but "
           "eager PyTorch recomputes them on every forward (weight_norm, a bias table or embedding indexed by a "
           "buffer), so their kernels are missing from this prediction; for inference, remove weight_norm "
           "(torch.nn.utils.parametrize.remove_parametrizations) or precompute them, and re-export")


def _weight_norm_conv(path):
    """A Conv1d under weight_norm as TorchScript keeps it: w = g * v / ||v|| (per output channel), then the conv."""
    nodes = [helper.make_node("ReduceL2", ["v", "axes"], ["norm"], keepdims=1, name="norm"),
             helper.make_node("Div", ["g", "norm"], ["scale"], name="scale"),
             helper.make_node("Mul", ["v", "scale"], ["w"], name="w"),
             helper.make_node("Conv", ["x", "w"], ["y"], name="conv")]
    onnx.save(make_model(nodes, [tensor("x", [1, 4, 16])], [tensor("y", None)],
                         [weight("v", [8, 4, 3]), weight("g", [8, 1, 1]), ints("axes", [1, 2])], opset=18), path)
    return path


def test_weight_norm_eager_recomputes_is_named(tmp_path):
    """A weight-normed convolution priced 1 kernel with no word of the 3 eager launches before it on every forward
    (ReduceL2 reads the 384-byte v and its axes, writes 32; Div 64 / 32; Mul 416 / 384: 1,328 bytes against the
    conv's 1,088)."""
    path = _weight_norm_conv(tmp_path / "wn.onnx")
    prediction = Predictor().predict(path, gpu="a10g")
    assert [k.ops for k in prediction.kernels] == [("Conv",)]
    assert WARNING in prediction.warnings
    assert not any("weights alone" in w for w in Predictor(backend="tvm").predict(path, gpu="a10g").warnings)


@pytest.mark.parametrize("plumbing", ["Transpose", "Cast"])
def test_a_weight_transposed_or_cast_for_a_matmul_is_not_named(tmp_path, plumbing):
    """What an exporter writes around a linear's weight (its transpose, a cast) is a view or nothing in eager."""
    attributes = {"perm": [1, 0]} if plumbing == "Transpose" else {"to": onnx.TensorProto.FLOAT}
    nodes = [helper.make_node(plumbing, ["w"], ["wt"], name="plumbing", **attributes),
             helper.make_node("MatMul", ["x", "wt"], ["y"], name="linear")]
    path = tmp_path / "linear.onnx"
    onnx.save(make_model(nodes, [tensor("x", [2, 8])], [tensor("y", None)], [weight("w", [8, 8])], opset=18), path)
    assert not any("weights alone" in w for w in Predictor().predict(path, gpu="a10g").warnings)


def test_a_bert_export_s_position_lookups_are_not_worth_a_warning():
    """tests/data/ort/bert.onnx keeps its position and token-type embedding lookups (2 Gathers on buffers) of 81
    priced nodes, 1.07 % of the bytes: under both material shares, so no warning; the nodes are still found."""
    from lilou.graph.dag import load_graph
    from lilou.graph.weight_only import eager_recomputed_warning, recomputed_weight_nodes

    graph = load_graph("tests/data/ort/bert.onnx", batch=1)
    assert len(recomputed_weight_nodes(graph)) == 2 and len(graph.runtime_nodes()) == 81
    assert eager_recomputed_warning(graph) == []


def test_a_causal_mask_built_from_constants_is_named():
    """tests/data/sdpa/sdpa-calls-ts.onnx builds its causal mask from constants (Trilu, Where): 2 of 31 priced nodes
    (6.5 % of the launches), which eager runs on every call."""
    from lilou.graph.dag import load_graph
    from lilou.graph.weight_only import eager_recomputed_warning

    (warning,) = eager_recomputed_warning(load_graph("tests/data/sdpa/sdpa-calls-ts.onnx", batch=1))
    assert warning.startswith("2 node(s) compute on weights alone (1 Trilu, 1 Where)")
