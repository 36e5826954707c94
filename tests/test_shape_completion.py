"""When ONNX's data propagation may run: it materialises 1-D values only, so only they are capped."""
from __future__ import annotations

import onnx
from onnx import helper

from lilou.graph.shape_completion import MAX_FOLD_ELEMENTS, data_propagation_is_safe
from tests.onnx_builders import ints, make_model, tensor


def _filled(dims: list[int]) -> onnx.ModelProto:
    """``ConstantOfShape(dims)`` added to an input: the constant's shape follows from the initializer alone."""
    nodes = [helper.make_node("ConstantOfShape", ["dims"], ["big"], name="fill"),
             helper.make_node("Add", ["x", "big"], ["y"], name="add")]
    return make_model(nodes, [tensor("x", [1])], [tensor("y", None)], [ints("dims", dims)])


def test_a_long_1d_constant_turns_data_propagation_off() -> None:
    # ONNX keeps a propagated 1-D value as a list of dims (about 140 bytes each): 10^7 of them took 1.4 GB.
    assert not data_propagation_is_safe(_filled([MAX_FOLD_ELEMENTS + 1]))
    assert data_propagation_is_safe(_filled([MAX_FOLD_ELEMENTS]))


def test_a_large_constant_of_higher_rank_leaves_data_propagation_on() -> None:
    # A [1, 512, 16384] zeros_like (SwitchXL-4's expert outputs at batch 1) is never materialised by data
    # propagation; turning it off there lost the shapes of 1,590 nodes and a third of the model's FLOPs.
    assert data_propagation_is_safe(_filled([1, 512, 16384]))
    assert data_propagation_is_safe(_filled([28000, 28000]))
