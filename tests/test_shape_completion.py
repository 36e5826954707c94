"""When ONNX's data propagation may run: it materialises 1-D values only, so only they are capped."""
from __future__ import annotations

import os
import warnings
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from lilou.graph import fast_eval
from lilou.graph.dag import load_graph
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


def _reference(node: onnx.NodeProto, inputs: list[np.ndarray], opset: int) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    feeds = {name: value for name, value in zip(node.input, inputs) if name}
    return [np.asarray(out) for out in ReferenceEvaluator(node, opsets={"": opset}).run(None, feeds)]


def _assert_identical(node: onnx.NodeProto, fast: list[np.ndarray], reference: list[np.ndarray]) -> None:
    assert len(fast) == len(reference), node
    for ours, theirs in zip(fast, reference):
        assert (ours.dtype, ours.shape) == (theirs.dtype, theirs.shape), node
        assert np.array_equal(ours, theirs, equal_nan=ours.dtype.kind == "f"), node


@pytest.mark.parametrize("name, options, batch", [
    ("bert-base", {"batch": 1, "seq": 32, "dynamo": False}, None),  # TorchScript: Shape/Gather/Concat chains
    ("gpt2", {"batch": 1, "seq": 32}, None),  # dynamo: masks from Range, CumSum, Where, Expand
    ("electra-small", {"batch": 2, "seq": 32, "dynamic_batch": True}, 3),
])
def test_the_numpy_fast_path_gives_the_reference_arrays_on_real_exports(zoo_onnx, monkeypatch, name, options,
                                                                        batch) -> None:
    # Every node that constant folding hands to the fast path is evaluated by onnx.reference too: same dtype,
    # shape and values, or the fast path is wrong (it must decline what it cannot copy exactly).
    checked: Counter[str] = Counter()
    fast_path = fast_eval.evaluate

    def compared(node: onnx.NodeProto, inputs: list[np.ndarray], opset: int) -> list[np.ndarray] | None:
        fast = fast_path(node, inputs, opset)
        if fast is not None:
            _assert_identical(node, fast, _reference(node, inputs, opset))
            checked[node.op_type] += 1
        return fast

    monkeypatch.setattr(fast_eval, "evaluate", compared)
    monkeypatch.delattr(os, "fork")  # the completion in this process, not in the guarded child, to count its calls
    load_graph(zoo_onnx(name, **options), batch=batch)
    assert sum(checked.values()) >= 20 and len(checked) >= 3, checked


def _node(op: str, count: int, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, [f"x{i}" for i in range(count)], ["y"], **attrs)


_I64 = np.int64
_EDGE_CASES = [
    (_node("Gather", 2, axis=-1), [np.arange(12, dtype=_I64).reshape(3, 4), np.array([-1, 0], dtype=_I64)]),
    (_node("Gather", 2), [np.array([5, 6, 7], dtype=np.int32), np.array(-2, dtype=np.int32)]),
    (_node("Slice", 5), [np.arange(10, dtype=_I64), np.array([-1]), np.array([-100]), np.array([0]), np.array([-3])]),
    (_node("Slice", 4), [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([1]), np.array([2**62]),
                         np.array([-1])]),
    (_node("Slice", 3), [np.arange(6, dtype=_I64), np.array(2), np.array(5)]),
    (_node("Div", 2), [np.array([-7, 7, -8, 9], dtype=_I64), np.array([2, -2, 2, 3], dtype=_I64)]),
    (_node("Div", 2), [np.array([1.0, -3.0], dtype=np.float32), np.array([0.0, 2.0], dtype=np.float32)]),
    (_node("Reshape", 2), [np.arange(24, dtype=_I64).reshape(2, 3, 4), np.array([0, -1], dtype=_I64)]),
    (_node("Reshape", 2, allowzero=1), [np.zeros((0, 3), dtype=np.float32), np.array([3, 0], dtype=_I64)]),
    (_node("Unsqueeze", 2), [np.array([1, 2], dtype=_I64), np.array([-1, 0], dtype=_I64)]),
    (_node("Squeeze", 1), [np.zeros((1, 3, 1), dtype=np.float32)]),
    (_node("Squeeze", 2), [np.zeros((1, 3, 1), dtype=np.float32), np.array([-1], dtype=_I64)]),
    (_node("Concat", 3, axis=-1), [np.array([[1]], dtype=_I64), np.array([[2, 3]], dtype=_I64),
                                   np.zeros((1, 0), dtype=_I64)]),
    (_node("Cast", 1, to=TensorProto.INT32), [np.array([1.7, -1.7, 3e9], dtype=np.float32)]),
    (_node("Cast", 1, to=TensorProto.BOOL), [np.array([0, 2, -1], dtype=_I64)]),
    (_node("Cast", 1, to=TensorProto.FLOAT16), [np.array([1, 70000], dtype=_I64)]),
    (_node("ConstantOfShape", 1), [np.array([2, 3], dtype=_I64)]),
    (_node("ConstantOfShape", 1, value=helper.make_tensor("v", TensorProto.INT64, [1], [7])),
     [np.array([4], dtype=_I64)]),
    (_node("Range", 3), [np.array(0, dtype=_I64), np.array(10, dtype=_I64), np.array(3, dtype=_I64)]),
    (_node("Range", 3), [np.array(1.0, dtype=np.float32), np.array(0.0, dtype=np.float32),
                         np.array(-0.3, dtype=np.float32)]),
    (_node("Expand", 2), [np.array([[1], [2]], dtype=_I64), np.array([2, 1, 3], dtype=_I64)]),
    (_node("Expand", 2), [np.array([True]), np.array([3], dtype=_I64)]),
    (_node("Where", 3), [np.array([True, False]), np.array([1, 2], dtype=_I64), np.array([[3], [4]], dtype=_I64)]),
    (_node("Transpose", 1), [np.arange(6, dtype=_I64).reshape(2, 3)]),
    (_node("Transpose", 1, perm=[1, 2, 0]), [np.zeros((2, 3, 4), dtype=np.float32)]),
    (_node("Add", 2), [np.array([2**62], dtype=_I64), np.array([2**62], dtype=_I64)]),
    (_node("Mul", 2), [np.array(3, dtype=np.int32), np.array([4, 5], dtype=np.int32)]),
    (_node("Max", 2), [np.array([1.0, np.nan], dtype=np.float32), np.array([2.0, 0.0], dtype=np.float32)]),
    (_node("Equal", 2), [np.array(3, dtype=_I64), np.array(3, dtype=_I64)]),
    (_node("LessOrEqual", 2), [np.array([1, 5], dtype=_I64), np.array([3], dtype=_I64)]),
    (_node("Or", 2), [np.array([True, False]), np.array([False, False])]),
    (_node("Not", 1), [np.array([True, False])]),
    (_node("Neg", 1), [np.array([-2**63, 3], dtype=_I64)]),
    (_node("CumSum", 2), [np.array([[1, 2], [3, 4]], dtype=np.int32), np.array(-1, dtype=_I64)]),
    (_node("Identity", 1), [np.array([1.5], dtype=np.float64)]),
    (helper.make_node("Constant", [], ["y"], value_ints=[3, -1]), []),
    (helper.make_node("Constant", [], ["y"], value_float=0.1), []),
    (helper.make_node("Constant", [], ["y"], value=helper.make_tensor("v", TensorProto.BOOL, [2], [1, 0])), []),
]


@pytest.mark.parametrize("node, inputs", _EDGE_CASES, ids=[f"{n.op_type}{i}" for i, (n, _) in enumerate(_EDGE_CASES)])
def test_the_numpy_fast_path_gives_the_reference_arrays_in_edge_cases(node, inputs) -> None:
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = fast_eval.evaluate(node, inputs, 20)
        assert fast is not None, node
        _assert_identical(node, fast, _reference(node, inputs, 20))


@pytest.mark.parametrize("node, inputs, opset", [
    (_node("Add", 2), [np.array([1], dtype=_I64), np.array([1], dtype=np.int32)], 20),  # the reference refuses
    (_node("Reshape", 2, allowzero=1), [np.zeros(2, dtype=_I64), np.array([2], dtype=_I64)], 13),  # not in opset 13
    (_node("Unsqueeze", 2), [np.zeros(2, dtype=_I64), np.array([0], dtype=_I64)], 11),  # axes were an attribute
    (_node("Cast", 1, to=TensorProto.FLOAT8E4M3FN), [np.zeros(2, dtype=np.float32)], 20),  # saturating cast
    (_node("Concat", 2), [np.zeros(1, dtype=_I64), np.zeros(1, dtype=_I64)], 20),  # no axis
    (_node("Range", 3), [np.array(0, dtype=np.float16)] * 3, 20),  # a stash type
    (helper.make_node("Split", ["x0"], ["y0", "y1"], axis=0), [np.zeros(2, dtype=_I64)], 20),  # two outputs
])
def test_the_numpy_fast_path_leaves_other_cases_to_the_reference(node, inputs, opset) -> None:
    assert fast_eval.evaluate(node, inputs, opset) is None
