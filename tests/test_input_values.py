"""A run-time input's value (``--value``, ``values=``) picks the branch that runs (lilou.graph.input_values).

The merged decoder ``tests/data/kv_cache/llama-merged.onnx`` holds the cached decode step (then) and the prompt pass
(else) under one ``If`` on ``use_cache_branch``; without a value Lilou prices the larger branch and says so.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from lilou.errors import LilouInputError
from lilou.graph.dag import build_graph, load_graph
from lilou.graph.input_values import MAX_VALUE_ELEMENTS, bind_input_values, parse_input_values
from lilou.graph.shapes import runtime_inputs
from tests.onnx_builders import make_model, tensor, weight
from tests.test_branches import DECODE, MERGED, PAST, _if_model, _with_condition
from tests.test_graph_errors import assert_one_line_error, run_cli


def test_values_parse_as_booleans_integers_and_floats():
    assert parse_input_values(["use_cache_branch=false", "sr = 16000", "scale=1.5,2,-3e2", "on=TRUE"]) == {
        "use_cache_branch": (False,), "sr": (16000,), "scale": (1.5, 2, -300.0), "on": (True,)}
    assert type(parse_input_values(["x=2"])["x"][0]) is int and type(parse_input_values(["x=2.0"])["x"][0]) is float


@pytest.mark.parametrize(("spec", "fragment"), [
    ("use_cache_branch", "cannot parse --value 'use_cache_branch'; expected NAME=VALUE"),
    ("x=yes", "--value x: 'yes' is not true, false or a number"),
    ("x=nan", "--value x: 'nan' is not true, false or a number"),
    ("x=1e999", "--value x: '1e999' is not a finite number"),
    ("x=" + ",".join(["1"] * (MAX_VALUE_ELEMENTS + 1)), f"--value x: {MAX_VALUE_ELEMENTS + 1} values; --value sets"),
])
def test_a_value_that_is_not_one_is_a_one_line_error(spec, fragment):
    with pytest.raises(LilouInputError, match="^" + fragment.replace("(", r"\(").replace(")", r"\)")):
        parse_input_values([spec])


def test_a_value_given_twice_is_refused():
    """``--value /Loop=12 --value /Loop=13`` kept the last without a word (audit ua43d, finding 8)."""
    with pytest.raises(LilouInputError, match="^--value /Loop given twice; give each input"):
        parse_input_values(["/Loop=12", "sr=8000", " /Loop = 13"])


def test_a_bound_flag_picks_its_branch_exactly():
    then_nodes = [helper.make_node("MatMul", ["x", "w"], ["out"], name="big")]
    else_nodes = [helper.make_node("Neg", ["x"], ["out_else"], name="small")]
    model = _if_model(then_nodes, else_nodes, initializers=[weight("w", [8, 8])])
    unbound = build_graph(model)
    assert "big" in unbound.dag and "small" not in unbound.dag  # the larger branch, as before
    for value, kept, gone in ((False, "small", "big"), (True, "big", "small")):
        graph = load_graph_of(model, {"flag": [value]})
        assert kept in graph.dag and gone not in graph.dag
        assert [t.name for t in graph.inputs] == ["x", "flag"]  # still fed at run time, its value known
        assert graph.warnings[:2] == [
            f"input 'flag' is set to {str(value).lower()} (--value): what reads it (an If's condition, a size) is "
            "priced for that value",
            f"If 'choice' has a constant condition ({str(value).lower()}): its "
            f"{'then' if value else 'else'} branch (1 nodes) is priced, as the only one that runs"]


def test_a_condition_computed_from_a_bound_input_is_decided_by_folding():
    """``Not(flag)`` is not the input itself: its value follows from the bound one by constant folding."""
    then_nodes = [helper.make_node("MatMul", ["x", "w"], ["out"], name="big")]
    else_nodes = [helper.make_node("Neg", ["x"], ["out_else"], name="small")]
    model = _if_model(then_nodes, else_nodes, condition="not_flag", initializers=[weight("w", [8, 8])])
    model.graph.node.insert(0, helper.make_node("Not", ["flag"], ["not_flag"], name="negate"))
    graph = load_graph_of(model, {"flag": [True]})
    assert "small" in graph.dag and "big" not in graph.dag
    assert any("reads its condition from 'not_flag', which the shapes decide (false): its else branch" in w
               for w in graph.warnings)


def test_ops_that_read_a_stated_value_still_run():
    """Silero VAD reads its sample rate ``sr`` in a Mul and a Cast: with ``sr`` stated they are kernels still (the
    input is fed at run time), so the prediction equals the one without the value; the value only decides."""
    from lilou.api import Predictor
    from tests.test_branches import SILERO

    predictor, shapes = Predictor(), {"batch": (1,), "sequence": (512,)}
    stated = predictor.predict(SILERO, gpu="a10g", shapes=shapes, values={"sr": [16000]})
    unstated = predictor.predict(SILERO, gpu="a10g", shapes=shapes)
    assert [k.nodes for k in stated.kernels] == [k.nodes for k in unstated.kernels]
    assert stated.latency_ms == unstated.latency_ms and ("/Mul",) in [k.nodes for k in stated.kernels]


def load_graph_of(model: onnx.ModelProto, values):
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return build_graph(copy, values=values)


def test_a_merged_decoder_is_priced_as_the_branch_its_flag_names():
    from lilou.api import Predictor

    predictor = Predictor()
    step = predictor.predict(PAST, gpu="a10g", shapes=DECODE)
    cached = predictor.predict(MERGED, gpu="a10g", shapes=DECODE, values={"use_cache_branch": [True]})
    assert (cached.latency_ms, [k.nodes for k in cached.kernels]) == (step.latency_ms, [k.nodes for k in step.kernels])
    assert not any("the larger of the two" in w for w in cached.warnings)
    # the prompt pass at one new token: what the file with the flag written as a constant prices
    prompt = predictor.predict(MERGED, gpu="a10g", shapes=DECODE, values={"use_cache_branch": False})
    constant = predictor.predict(build_graph(_with_condition(False), name="llama-merged", shapes=DECODE), gpu="a10g")
    assert (prompt.latency_ms, [k.nodes for k in prompt.kernels]) == (constant.latency_ms,
                                                                      [k.nodes for k in constant.kernels])
    assert prompt.latency_ms < step.latency_ms  # no 511-token cache read


def test_rank_and_plan_take_the_values():
    from lilou.api import Predictor
    from lilou.plan.planner import plan_model

    predictor = Predictor()
    shapes = {"sequence_length": (1,), "past_sequence_length": (511,)}
    values = {"use_cache_branch": [False]}
    ranked = predictor.rank(MERGED, gpus=["a10g"], batch=4, shapes=shapes, values=values)
    single = predictor.predict(MERGED, gpu="a10g", batch=4, shapes=shapes, values=values)
    assert ranked[0].latency_ms == single.latency_ms
    plan = plan_model(MERGED, 1000.0, gpus=["a10g"], batches=[4], predictor=predictor, shapes=shapes, values=values)
    assert [(p.batch, p.latency_ms) for p in plan.curves["a10g"]] == [(4, single.latency_ms)]


def test_a_plan_keeps_named_dimensions_at_every_batch():
    """--shape sequence_length=1 is a named dimension, not an input: a plan's batch does not replace it (before
    session 32 the plan bound sequence_length to the batch, and the decode step's baked reshape refused batch 2)."""
    from lilou.api import Predictor
    from lilou.plan.planner import plan_model

    predictor = Predictor()
    shapes = {"sequence_length": (1,), "past_sequence_length": (511,)}
    plan = plan_model(PAST, 1000.0, gpus=["a10g"], batches=[2], predictor=predictor, shapes=shapes)
    assert [(p.batch, p.latency_ms) for p in plan.curves["a10g"]] == [
        (2, predictor.predict(PAST, gpu="a10g", batch=2, shapes=shapes).latency_ms)]


def test_the_cli_takes_value_and_refuses_a_bad_one(capsys):
    shapes = [a for name, size in DECODE.items() for a in ("--shape", f"{name}={size[0]}")]
    status, out, err = run_cli(capsys, "infer", str(MERGED), "--gpu", "a10g", *shapes, "--value",
                               "use_cache_branch=false", "--format", "json")
    assert status == 0, err
    assert json.loads(out)["warnings"][0].startswith("input 'use_cache_branch' is set to false (--value)")
    for argv, fragments in [
        (["--value", "use_cache_branch=2"], ["--value use_cache_branch: the input is boolean; give true or false"]),
        (["--value", "nope=1"], ["--value names unknown input(s) nope; the model's inputs are: input_ids,"]),
        (["--value", "use_cache_branch=true,false"], ["the input's shape 1 holds 1 element, got 2 values"]),
        (["--value", "input_ids=3"], ["--value input_ids: the input's shape has dynamic dimensions; give it with "
                                      "--shape input_ids=D1xD2... as well"]),
    ]:
        status, _, err = run_cli(capsys, "infer", str(MERGED), "--gpu", "a10g", *shapes, *argv)
        assert_one_line_error(status, err, *fragments)
    status, _, err = run_cli(capsys, "plan", "Llama-3.1-8B-Instruct", "--llm", "--itl-slo-ms", "50", "--input-len",
                             "128", "--output-len", "16", "--gpus", "a10g", "--value", "x=1")
    assert_one_line_error(status, err, "--value applies to ONNX models")


def _typed_input(dtype: int, dims) -> onnx.ModelProto:
    return make_model([helper.make_node("Identity", ["x"], ["y"], name="copy")], [tensor("x", dims, dtype)],
                      [tensor("y", None, dtype)])


@pytest.mark.parametrize(("dtype", "dims", "value", "fragment"), [
    (TensorProto.UINT8, [], 300, "--value x: 300 does not fit the input's uint8 (0 to 255)"),
    (TensorProto.INT64, [], 2.5, "--value x: the input holds int64 integers; got 2.5"),
    (TensorProto.STRING, [], 1, "--value x: the input holds STRING elements, not booleans or numbers"),
    (TensorProto.FLOAT16, [], 1e6, "--value x: 1000000.0 does not fit the input's float16"),
    (TensorProto.FLOAT, [2, 2], 1.0, "--value x: the input's shape 2x2 holds 4 elements, got 1 values"),
    # a 400-digit integer (JSON has no bound) was an OverflowError, an internal error (audit ua46)
    (TensorProto.BOOL, [], 10**400, "--value x: the input is boolean; give true or false, got 10000000000000000000... "
                                    "(401 digits)"),
    (TensorProto.INT64, [], -10**400, "--value x: -1000000000000000000... (401 digits) does not fit the input's int64"),
    (TensorProto.FLOAT16, [], 10**400, "--value x: 10000000000000000000... (401 digits) does not fit the input's "
                                       "float16"),
])
def test_a_value_the_input_cannot_hold_is_a_one_line_error(dtype, dims, value, fragment):
    with pytest.raises(LilouInputError, match="^" + fragment.replace("(", r"\(").replace(")", r"\)")):
        bind_input_values(_typed_input(dtype, dims), {"x": [value]})


def test_shapes_and_old_files():
    """The input's shape comes from --shape where the file leaves it dynamic; a file of IR version 3 lists the
    bound initializer among its inputs, as such files list every initializer."""
    model = _typed_input(TensorProto.FLOAT, ["n", 2])
    bind_input_values(model, {"x": [1.0, 2.0, 3.0, 4.0]}, {"x": (2, 2)})
    assert np.array_equal(onnx.numpy_helper.to_array(model.graph.initializer[0]), [[1.0, 2.0], [3.0, 4.0]])
    assert runtime_inputs(model) == [] and model.graph.input == []
    old = _typed_input(TensorProto.INT64, [1])
    old.ir_version = 3
    bind_input_values(old, {"x": [7]})
    assert [v.name for v in old.graph.input] == ["x"] and runtime_inputs(old) == []
    assert onnx.numpy_helper.to_array(old.graph.initializer[0]).tolist() == [7]


def test_values_of_a_prepared_or_loaded_model_are_refused():
    from lilou.api import Predictor

    predictor = Predictor()
    graph = load_graph(PAST, shapes=DECODE)
    with pytest.raises(LilouInputError, match="^batch, shapes and values apply when loading a file"):
        predictor.predict(graph, gpu="a10g", values={"use_cache_branch": [True]})
