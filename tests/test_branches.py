"""An ``If`` is priced as the branch that runs, its nodes inlined (lilou.graph.branches).

``tests/data/kv_cache/llama-merged.onnx`` (scripts/make_kv_cache_fixture.py) is the layout of Optimum's
``decoder_model_merged.onnx``: one ``If`` on the input ``use_cache_branch`` holding the cached decode step (then)
and the prompt pass (else) of a two-layer Llama; ``llama-past.onnx`` is the decode step alone, exported from the
same model.
"""
from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lilou.graph.branches import MAX_SHAPINGS, branch_points, inline_branch, shaping_budget
from lilou.graph.dag import build_graph, load_graph
from lilou.graph.loading import load_onnx
from tests.onnx_builders import make_model, tensor, weight
from tests.test_graph_errors import run_cli

DATA = Path(__file__).resolve().parent / "data" / "kv_cache"
MERGED, PAST = DATA / "llama-merged.onnx", DATA / "llama-past.onnx"
DECODE = {"batch_size": (2,), "sequence_length": (1,), "past_sequence_length": (511,)}
PROMPT = {"batch_size": (2,), "sequence_length": (128,), "past_sequence_length": (1,)}


def _branch(path: Path, name: str) -> onnx.GraphProto:
    return next(a.g for a in load_onnx(path).graph.node[0].attribute if a.name == name)


def _with_condition(value: bool) -> onnx.ModelProto:
    """The merged decoder with ``use_cache_branch`` stated as a constant."""
    model = load_onnx(MERGED)
    model.graph.initializer.append(numpy_helper.from_array(np.array([value]), "use_cache_branch"))
    return model


def test_a_merged_decoder_is_priced_as_the_decode_step_it_runs():
    from lilou.api import Predictor

    predictor = Predictor()
    merged = predictor.predict(MERGED, gpu="a10g", shapes=DECODE)
    step = predictor.predict(PAST, gpu="a10g", shapes=DECODE)
    assert len(merged.kernels) == len(step.kernels) == 90  # before: one If kernel on the fallback, 0 FLOPs
    assert merged.latency_ms == step.latency_ms
    assert [k.nodes for k in merged.kernels] == [k.nodes for k in step.kernels]
    note = next(w for w in merged.warnings if "optimum::if" in w)
    assert "the run-time input 'use_cache_branch'" in note and "priced as its then branch, the larger" in note
    assert not any("control flow" in w for w in merged.warnings)


def test_a_constant_condition_picks_its_branch_exactly():
    for value, name in ((False, "else_branch"), (True, "then_branch")):
        graph = build_graph(_with_condition(value), shapes=DECODE if value else PROMPT)
        branch = _branch(MERGED, name)
        assert collections.Counter(d["op"] for _, d in graph.dag.nodes(data=True)) == \
            collections.Counter(n.op_type for n in branch.node)
        assert f"constant condition ({str(value).lower()}): its {name.replace('_', ' ')} ({len(branch.node)} " \
               "nodes)" in graph.warnings[0]
    prompt = build_graph(_with_condition(False), shapes=PROMPT)
    outputs = {t.name: t.shape for t in prompt.outputs}
    assert outputs["logits"] == (2, 128, 1000) and outputs["present.1.value"] == (2, 2, 128, 64)


def test_a_branch_that_cannot_run_at_the_shapes_leaves_the_other():
    """The decode step was traced at one new token and bakes a head reshape in: at 128 new tokens only the
    prompt branch runs, and the note says why the other was not priced."""
    graph = load_graph(MERGED, shapes=PROMPT)
    assert len(graph.dag) == len(_branch(MERGED, "else_branch").node)
    note = next(w for w in graph.warnings if "optimum::if" in w)
    assert "priced as its else branch; its then branch cannot run at these shapes (Reshape " in note


def _if_model(then_nodes, else_nodes, condition="flag", inputs=None, initializers=()):
    """y = If(flag) over x (2 x 8), branches writing ``out``; ``t`` is also a name the outer graph uses."""
    then_graph = helper.make_graph(then_nodes, "then", [], [tensor("out", None)])
    else_graph = helper.make_graph(else_nodes, "else", [], [tensor("out_else", None)])
    nodes = [helper.make_node("Relu", ["x"], ["t"], name="outer_t"),
             helper.make_node("If", [condition], ["y"], name="choice", then_branch=then_graph,
                              else_branch=else_graph),
             helper.make_node("Add", ["y", "t"], ["z"], name="after")]
    inputs = inputs if inputs is not None else [tensor("x", [2, 8]), tensor("flag", [1], TensorProto.BOOL)]
    return make_model(nodes, inputs, [tensor("z", None)], list(initializers))


def test_inlining_renames_a_name_the_outer_graph_holds_and_passes_an_outer_value_through():
    then_nodes = [helper.make_node("MatMul", ["t", "w"], ["t"], name="inner"),  # writes 't' again
                  helper.make_node("Sigmoid", ["t"], ["out"], name="squash")]
    model = _if_model(then_nodes, [], initializers=[weight("w", [8, 8])])
    else_branch = next(a.g for a in model.graph.node[1].attribute if a.name == "else_branch")
    else_branch.output[0].name = "t"  # the outer value itself is the output
    inlined = {}
    for branch in ("then_branch", "else_branch"):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        assert inline_branch(copy, branch_points(copy)[0], branch)
        onnx.shape_inference.infer_shapes(copy, check_type=True, strict_mode=True)  # a valid graph
        inlined[branch] = [(n.op_type, list(n.input), list(n.output)) for n in copy.graph.node]
    assert inlined["then_branch"] == [("Relu", ["x"], ["t"]), ("MatMul", ["t", "w"], ["t__1"]),
                                      ("Sigmoid", ["t__1"], ["y"]), ("Add", ["y", "t"], ["z"])]
    assert inlined["else_branch"] == [("Relu", ["x"], ["t"]), ("Identity", ["t"], ["y"]), ("Add", ["y", "t"], ["z"])]


def test_the_larger_branch_of_a_run_time_condition_is_priced():
    then_nodes = [helper.make_node("MatMul", ["x", "w"], ["out"], name="big")]
    else_nodes = [helper.make_node("Neg", ["x"], ["out_else"], name="small")]
    graph = build_graph(_if_model(then_nodes, else_nodes, initializers=[weight("w", [8, 8])]))
    assert graph.dag.nodes["big"]["flops"] == 2 * 2 * 8 * 8 and "small" not in graph.dag
    note = next(w for w in graph.warnings if "'choice'" in w)
    # Relu 16 + MatMul 256 + Add 16 FLOPs against Relu + Neg + Add
    assert note == ("If 'choice' reads its condition from the run-time input 'flag': priced as its then branch, the "
                    "larger of the two at these shapes (the model with it 288 FLOPs, 704 B moved; with the other "
                    "48 FLOPs, 448 B moved); the other branch is not priced")


def test_a_condition_computed_in_the_graph_is_named_as_such_and_nested_ifs_resolve():
    inner_then = helper.make_graph([helper.make_node("Exp", ["x"], ["inner_out"], name="exp")], "inner_then", [],
                                   [tensor("inner_out", None)])
    inner_else = helper.make_graph([helper.make_node("Neg", ["x"], ["inner_else"], name="neg")], "inner_else", [],
                                   [tensor("inner_else", None)])
    then_nodes = [helper.make_node("If", ["yes"], ["out"], name="nested", then_branch=inner_then,
                                   else_branch=inner_else)]
    else_nodes = [helper.make_node("Neg", ["x"], ["out_else"], name="other")]
    model = _if_model(then_nodes, else_nodes, condition="computed",
                      initializers=[numpy_helper.from_array(np.array(True), "yes")])
    model.graph.node.insert(0, helper.make_node("ReduceMax", ["x"], ["peak"], keepdims=0))
    model.graph.node.insert(1, helper.make_node("Greater", ["peak", "zero"], ["computed"]))
    model.graph.initializer.append(numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"))
    graph = build_graph(model)
    assert "exp" in graph.dag and not any(d["op"] == "If" for _, d in graph.dag.nodes(data=True))
    assert any("'computed', a value known only at run time" in w for w in graph.warnings)
    assert any("If 'nested' has a constant condition (true): its then branch (1 nodes)" in w for w in graph.warnings)


def test_ifs_beyond_the_comparison_cap_stay_one_fallback_kernel_and_say_so():
    """A small model may shape itself 64 times to decide its Ifs: 32 run-time ones priced both ways, the 33rd one
    kernel."""
    nodes, previous = [], "x"
    for index in range(MAX_SHAPINGS // 2 + 1):
        then_graph = helper.make_graph([helper.make_node("Exp", [previous], [f"a{index}"])], f"t{index}", [],
                                       [tensor(f"a{index}", None)])
        else_graph = helper.make_graph([helper.make_node("Neg", [previous], [f"b{index}"])], f"e{index}", [],
                                       [tensor(f"b{index}", None)])
        nodes.append(helper.make_node("If", ["flag"], [f"y{index}"], name=f"if{index}", then_branch=then_graph,
                                      else_branch=else_graph))
        previous = f"y{index}"
    model = make_model(nodes, [tensor("x", [2, 8]), tensor("flag", [1], TensorProto.BOOL)], [tensor(previous, None)])
    graph = build_graph(model)
    assert [d["op"] for _, d in graph.dag.nodes(data=True)].count("If") == 1
    assert sum("reads its condition from the run-time input 'flag'" in w for w in graph.warnings) == MAX_SHAPINGS // 2
    assert any(w.startswith("control flow (If) is approximated") for w in graph.warnings)


@pytest.mark.parametrize("command", ["graph", "infer"])
def test_the_cli_reads_a_merged_decoder(capsys, command):
    args = [command, str(MERGED), *(a for name, size in DECODE.items() for a in ("--shape", f"{name}={size[0]}"))]
    status, out, err = run_cli(capsys, *args, "--format", "json", *(["--gpu", "a10g"] if command == "infer" else []))
    assert status == 0, err
    assert any("'optimum::if' reads its condition from the run-time input 'use_cache_branch'" in w
               for w in json.loads(out)["warnings"])


def test_rank_prices_a_merged_decoder_as_its_decode_step(capsys):
    shapes = [a for name, size in DECODE.items() for a in ("--shape", f"{name}={size[0]}")]
    ranked = {}
    for path in (MERGED, PAST):
        status, out, err = run_cli(capsys, "rank", str(path), *shapes, "--gpus", "a10g,l4", "--format", "json")
        assert status == 0, err
        ranked[path] = [(entry["gpu"], entry["latency_ms"]) for entry in json.loads(out)]
    assert ranked[MERGED] == ranked[PAST] and len(ranked[PAST]) == 2


SCRIPTED = Path(__file__).resolve().parent / "data" / "control_flow" / "scripted-if.onnx"


@pytest.mark.parametrize(("batch", "branch", "ops"), [(1, "else", ["Gemm", "Sigmoid"]), (4, "then", ["Gemm", "Relu"])])
def test_a_condition_the_shapes_decide_picks_the_branch_that_runs(batch, branch, ops):
    """tests/data/control_flow/scripted-if.onnx (scripts/make_control_flow_fixture.py): ``if x.size(0) > 1`` in a
    scripted module, exported as Shape -> Gather -> Greater -> If. The batch bound decides the branch exactly,
    where the larger one (the sigmoid's) was priced at every batch."""
    graph = load_graph(SCRIPTED, batch=batch)
    runtime = [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()]
    assert [op for op in runtime if op not in ("Shape", "Gather", "Greater", "Cast")] == ops
    assert any(f"which the shapes decide ({str(batch > 1).lower()}): its {branch} branch is priced" in w
               for w in graph.warnings)


LOOP, LOOP_3 = SCRIPTED.with_name("scripted-loop.onnx"), SCRIPTED.with_name("scripted-loop-3.onnx")


def test_a_loop_the_shapes_decide_runs_its_body_once_per_iteration():
    """``for _ in range(x.size(0))`` in a scripted module (a Loop whose trip count is Shape -> Gather) was one
    fallback kernel at 0 FLOPs; unrolled at batch 3, it is priced as the exporter's own unrolling of range(3)."""
    from lilou.api import Predictor

    predictor = Predictor()
    loop, unrolled = (predictor.predict(path, gpu="a10g", batch=3) for path in (LOOP, LOOP_3))
    assert loop.latency_ms == unrolled.latency_ms and len(loop.kernels) == len(unrolled.kernels)
    assert [k.flops for k in loop.kernels] == [k.flops for k in unrolled.kernels]
    assert "Loop '/Loop' runs 3 times (decided by the bound shapes): its body is priced once per iteration, as " \
           "eager launches it" in loop.warnings
    assert not any("control flow" in w for w in loop.warnings)
    # five iterations at batch 5: five thirds of the constant-range file's three
    assert load_graph(LOOP, batch=5).totals()["flops"] * 3 == load_graph(LOOP_3, batch=5).totals()["flops"] * 5


def test_a_long_loop_the_shapes_decide_is_not_one_iteration():
    """At batch 512 the scripted loop was refused by a cap of 256 iterations and its evaluated count dropped: one
    iteration, 0.03 ms against 15.5 at batch 256, with a warning that it had no constant trip count. It is unrolled
    up to the node budget; past the budget it is one kernel costed with the count the shapes gave (its body's
    shapes are unknown there, as the warnings say)."""
    from lilou.api import Predictor
    from lilou.graph.loops import MAX_UNROLLED_NODES

    predictor = Predictor()
    at_256, at_512 = (predictor.predict(LOOP, gpu="a10g", batch=b) for b in (256, 512))
    assert len(at_512.kernels) == 2 * len(at_256.kernels) == 1024
    assert at_512.latency_ms == pytest.approx(2 * at_256.latency_ms, rel=0.01)
    past = MAX_UNROLLED_NODES + 1
    graph = load_graph(LOOP, batch=past)
    assert graph.totals()["nodes"] == 1
    assert f"Loop '/Loop' is costed as its body times its trip count ({past}), as one kernel that eager launches " \
        f"{2 * past:,} times (2 body kernel(s) per iteration; one launch under TVM)" in graph.warnings
    # eager launches the body's two kernels per iteration, as written out: launch-bound, the same time per iteration
    # (it was one launch: 0.073 ms for 20,001 iterations, against 31 ms for 512 written out)
    one_node = predictor.predict(LOOP, gpu="a10g", batch=past)
    assert one_node.latency_ms / past == pytest.approx(at_512.latency_ms / 512, rel=0.01)
    assert f"Loop '/Loop' runs {past} times (decided by the bound shapes): more body nodes than Lilou writes out " \
        f"({MAX_UNROLLED_NODES:,} per model), so it is one kernel of its body times the count, which eager launches " \
        "once per iteration" in graph.warnings
    assert not any("no constant trip count" in w for w in graph.warnings)


def _counted_loop(trips, condition=True, body_condition="pass", scan=False):
    """h = tanh(h) ``trips`` times (a constant trip count), optionally stacking every h."""
    body_nodes = [helper.make_node("Tanh", ["h_in"], ["h_out"], name="step")]
    outputs = [tensor("cond_out", None, TensorProto.BOOL), tensor("h_out", None)]
    if body_condition == "pass":
        body_nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep"))
    else:  # data-dependent: stop when the mean falls under zero
        body_nodes += [helper.make_node("ReduceMean", ["h_out"], ["mean"], keepdims=0, name="mean"),
                       helper.make_node("Greater", ["mean", "zero"], ["cond_out"], name="test")]
    if scan:
        body_nodes.append(helper.make_node("Identity", ["h_out"], ["row"], name="row"))
        outputs.append(tensor("row", None))
    body = helper.make_graph(body_nodes, "body", [tensor("i", [], TensorProto.INT64), tensor("cond_in", [],
                                                                                          TensorProto.BOOL),
                                                 tensor("h_in", [2, 8])], outputs)
    loop = helper.make_node("Loop", ["trips", "go", "x"], ["h"] + (["rows"] if scan else []), name="loop", body=body)
    initializers = [numpy_helper.from_array(np.array(trips, dtype=np.int64), "trips"),
                    numpy_helper.from_array(np.array(condition), "go"),
                    numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero")]
    return make_model([loop], [tensor("x", [2, 8])], [tensor("h", None)] + ([tensor("rows", None)] if scan else []),
                      initializers)


def test_a_counted_loop_is_unrolled_and_its_scan_output_stacked():
    graph = build_graph(_counted_loop(4, scan=True))
    ops = [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()]
    assert ops.count("Tanh") == 4 and ops.count("Concat") == 1
    assert {t.name: t.shape for t in graph.outputs} == {"h": (2, 8), "rows": (4, 2, 8)}
    assert any("Loop 'loop' runs 4 times (set in the file)" in w for w in graph.warnings)


def test_a_counted_loop_too_long_to_write_out_stays_one_kernel():
    from lilou.graph.loops import MAX_UNROLLED_NODES

    graph = build_graph(_counted_loop(MAX_UNROLLED_NODES))  # two body nodes: twice the budget
    assert [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()] == ["Loop"]
    assert any(w.startswith("control flow (Loop) is approximated") for w in graph.warnings)


def test_a_loop_whose_condition_is_false_at_the_start_never_runs():
    graph = build_graph(_counted_loop(4, condition=False))
    assert [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()] == ["Identity"]  # h = x
    assert graph.totals()["flops"] == 0
    assert "Loop 'loop' never runs: its condition is false before the first iteration" in graph.warnings


INT64_MAX, INT32_MAX = 2**63 - 1, 2**31 - 1


@pytest.mark.parametrize(("trips", "condition", "bound"), [
    (INT64_MAX, "mean", "no bound"),   # TorchScript's while loop: Loop(M=INT64_MAX, cond), cond from the body
    (INT32_MAX, "pass", "no bound"),   # the other exporters' sentinel, with a condition that never stops it
    (4, "mean", "at most 4"),          # a for loop with a break
])
def test_a_loop_its_condition_decides_is_one_iteration_written_out(trips, condition, bound):
    """A ``while`` loop scripted by TorchScript is ``Loop(M=INT64_MAX, cond)``: INT64_MAX is ONNX's "no bound", and
    the body was priced times it (7.2e15 ms for a greedy decoder with an early stop, with no error). A loop whose
    condition can stop it, or whose count is the sentinel, is one iteration of its body, written out as a counted
    loop of one iteration is (so its nodes have the shapes of the values the loop starts from), and a warning says
    its iterations are unknown and how to state them."""
    graph = build_graph(_counted_loop(trips, body_condition=condition))
    one = build_graph(_counted_loop(1, body_condition="pass"))  # one iteration of a loop that runs every trip
    ops = [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()]
    assert ops == {"mean": ["Tanh", "ReduceMean", "Greater", "Identity"], "pass": ["Tanh", "Identity"]}[condition]
    assert graph.totals()["flops"] == one.totals()["flops"] + {"mean": 17 + 1, "pass": 0}[condition] \
        == {"mean": 16 + 17 + 1, "pass": 16}[condition]  # Tanh over 2x8, its mean (16 adds, a divide), Greater
    said = (f"Loop 'loop' stops on a condition known only at run time ({bound}): its iterations are unknown, so it "
            if condition == "mean" else "Loop 'loop' has no bound: no condition stops it and its count is ONNX's \"no "
            "bound\" (2^31-1 or more), so its iterations are unknown; it ")
    assert said + "is costed as one iteration of its body, written out; state them with --value loop=N " \
        "(values={'loop': N} in the API)" in graph.warnings
    assert not any("is costed as its body times its trip count" in w or w.startswith("Loop 'loop' runs") for w in graph.warnings)


def test_a_sentinel_count_given_with_value_is_one_iteration(tmp_path):
    """``--value n=9223372036854775807`` for a loop over a count input is the sentinel too: one iteration, never
    the count."""
    model = _counted_loop(1)
    model.graph.initializer.remove(next(t for t in model.graph.initializer if t.name == "trips"))
    model.graph.input.append(tensor("trips", [], TensorProto.INT64))
    path = tmp_path / "count.onnx"
    onnx.save(model, path)
    graph = load_graph(path, values={"trips": [INT64_MAX]})
    assert [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()] == ["Tanh", "Identity"]
    assert graph.totals()["flops"] == 16
    assert any(w.startswith("Loop 'loop' has no bound: no condition stops it") for w in graph.warnings)


WHILE = "tests/data/control_flow/scripted-while.onnx"


def test_a_scripted_while_loop_is_one_iteration_priced_with_its_shapes():
    """tests/data/control_flow/scripted-while.onnx: ``while h.abs().mean() > 0.1: h = tanh(cell(h)) * 0.05``, as
    TorchScript writes it: ``Loop(M=INT64_MAX, cond)`` whose carried state has no shape in the body. Kept as one
    node its iteration was priced at 2 FLOPs (nothing in the body had a shape); written out, the 8x16 @ 16x16 GEMM
    and its bias (4,096 + 128), tanh, the scaling and the condition (abs, mean, compare) are priced, after the
    condition the loop checks before it starts."""
    graph = load_graph(WHILE, batch=8)
    ops = [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()]
    assert sorted(ops) == sorted(["Abs", "ReduceMean", "Greater", "Gemm", "Tanh", "Mul", "Abs", "ReduceMean",
                                  "Greater", "Identity"])
    (gemm,) = [n for n in graph.runtime_nodes() if graph.dag.nodes[n]["op"] == "Gemm"]
    assert graph.dag.nodes[gemm]["flops"] == 2 * 8 * 16 * 16 + 8 * 16
    assert [t.shape for t in graph.outputs] == [(8, 16)]
    assert "Loop '/Loop' stops on a condition known only at run time (no bound): its iterations are unknown, so it " \
        "is costed as one iteration of its body, written out; state them with --value /Loop=N (values={'/Loop': N} " \
        "in the API)" in graph.warnings


def test_the_iterations_of_a_while_loop_can_be_stated():
    """``--value /Loop=12`` (``values={"/Loop": 12}``): the loop runs 12 iterations, each written out with the
    nodes that compute its condition; the check before the loop stays. FLOPs: 12 iterations of the one above, plus
    the first check."""
    one, twelve = load_graph(WHILE, batch=8), load_graph(WHILE, batch=8, values={"/Loop": 12})
    ops = [twelve.dag.nodes[n]["op"] for n in twelve.runtime_nodes()]
    assert {op: ops.count(op) for op in set(ops)} == {"Gemm": 12, "Tanh": 12, "Mul": 12, "Abs": 13,
                                                     "ReduceMean": 13, "Greater": 13, "Identity": 1}
    check = sum(one.dag.nodes[n]["flops"] for n in one.runtime_nodes() if "iteration" not in n)
    assert twelve.totals()["flops"] == check + 12 * (one.totals()["flops"] - check)
    assert "Loop '/Loop' is stated to run 12 iterations (--value): the condition that stops it is still computed " \
        "in each one" in twelve.warnings
    assert "Loop '/Loop' runs 12 times (set by --value): its body is priced once per iteration, as eager launches " \
        "it" in twelve.warnings
    assert not any("iterations are unknown" in w for w in twelve.warnings)


def test_a_stated_count_up_to_the_budget_is_written_out():
    """2,500 iterations of the body's 8 nodes are the 20,000-node budget: written out, every iteration. Between 2,223
    and 2,500 the stated count was neither written out nor refused (a constant node added to the body made it 9
    nodes an iteration): one fallback node, priced from a body without shapes."""
    graph = load_graph(WHILE, batch=8, values={"/Loop": 2500})
    ops = collections.Counter(graph.dag.nodes[n]["op"] for n in graph.runtime_nodes())
    assert (ops["Gemm"], ops["Greater"], ops["Loop"]) == (2500, 2501, 0)


def test_stated_loops_share_the_budget(tmp_path):
    """Two stated loops write out their iterations from one budget: 1,300 + 1,300 iterations of 8 nodes are 20,800."""
    model = onnx.load(WHILE)
    second = onnx.NodeProto()
    second.CopyFrom(next(n for n in model.graph.node if n.op_type == "Loop"))
    second.name, second.output[0] = "/Loop_2", "h.4"
    second.input[2] = "h.3"
    model.graph.node.append(second)
    model.graph.output[0].name = "h.4"
    path = tmp_path / "two-loops.onnx"
    onnx.save(model, path)
    graph = load_graph(path, batch=8, values={"/Loop": 1200, "/Loop_2": 1300})  # 20,000 nodes: both written out
    assert [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()].count("Gemm") == 2500
    with pytest.raises(Exception, match=r"^--value: the stated loops \(/Loop=1300, /Loop_2=1300\) write 20,800 nodes, "
                                        r"more than Lilou writes out \(20,000 per model\)"):
        load_graph(path, batch=8, values={"/Loop": 1300, "/Loop_2": 1300})


@pytest.mark.parametrize(("value", "message"), [
    ("/Loop=-1", "--value /Loop=-1: '/Loop' is a Loop; give the number of iterations it runs, a whole number from 0"),
    ("/Loop=2.5", "--value /Loop=2.5: '/Loop' is a Loop; give the number of iterations it runs, a whole number from 0"),
    ("/Loop=true", "--value /Loop=true: '/Loop' is a Loop; give the number of iterations it runs, a whole number "
                   "from 0"),
    ("/Loop=3,4", "--value /Loop=3,4: '/Loop' is a Loop; give the number of iterations it runs, a whole number from 0"),
    ("/Loop=2147483647", "--value /Loop=2147483647: more iterations than any loop runs (at most 2,147,483,646)"),
    ("/Lop=3", "--value names /Lop, neither an input of the model (x) nor one of its Loops (/Loop)"),
    ("/Loop=2501", "--value /Loop=2501: 2,501 iterations of its 8 nodes are more than Lilou writes out (20,000 nodes "
                   "per model); price at most 2,500 iterations and scale the loop's share"),
])
def test_a_stated_count_that_is_not_one_is_refused_in_one_line(capsys, value, message):
    status, _, err = run_cli(capsys, "infer", WHILE, "--gpu", "a10g", "--batch", "8", "--value", value)
    assert (status, err) == (2, f"lilou: error: {message}\n")


@pytest.mark.parametrize(("count", "message"), [
    (10**400, "10000000000000000000... (401 digits): more iterations than any loop runs (at most 2,147,483,646)"),
    (-10**400, "-1000000000000000000... (401 digits): '/Loop' is a Loop; give the number of iterations it runs, a "
               "whole number from 0"),
    (1e300, "10000000000000000525... (301 digits): more iterations than any loop runs (at most 2,147,483,646)"),
])
def test_a_count_of_hundreds_of_digits_is_refused_in_one_line(count, message):
    """float() of a 400-digit count (JSON and Python allow one: /v1/predict's values) was an OverflowError, an internal
    error, and 1e300 was shown with its 301 digits (audit ua46)."""
    from lilou.api import Predictor
    from lilou.errors import LilouInputError

    with pytest.raises(LilouInputError) as error:
        Predictor().predict(WHILE, gpu="a10g", batch=8, values={"/Loop": count})
    assert str(error.value) == f"--value /Loop={message}"


def test_an_absurd_total_is_refused_in_one_line(capsys, tmp_path):
    """No forward pass takes 11.6 days: a total above 1e9 ms is refused (exit status 2) naming the kernel, not
    printed as a latency. A Loop of 2e9 4096^3 GEMMs (a real count, not the sentinel) is 7.2e9 ms on an A10G."""
    from lilou.api import Predictor
    from lilou.errors import LilouInputError

    body = helper.make_graph([helper.make_node("MatMul", ["h_in", "h_in"], ["h_out"], name="gemm")], "body",
                             [tensor("i", [], TensorProto.INT64), tensor("cond_in", [], TensorProto.BOOL),
                              tensor("h_in", [4096, 4096])],
                             [tensor("cond_in", [], TensorProto.BOOL), tensor("h_out", [4096, 4096])])
    loop = helper.make_node("Loop", ["trips", "", "x"], ["h"], name="loop", body=body)
    path = tmp_path / "huge.onnx"
    onnx.save(make_model([loop], [tensor("x", [4096, 4096])], [tensor("h", None)],
                         [numpy_helper.from_array(np.array(2_000_000_000, dtype=np.int64), "trips")], opset=17), path)
    with pytest.raises(LilouInputError, match=r"^the prediction on a10g is 7\.\d+e\+09 ms, more than the 1e\+09 ms "
                       r"\(11\.6 days\) no forward pass takes, most of it kernel 0 \(first node 'loop', Loop\)"):
        Predictor().predict(path, gpu="a10g")
    status, out, err = run_cli(capsys, "infer", str(path), "--gpu", "a10g")
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("lilou: error: the prediction on a10g is ")


def test_an_if_with_a_misnamed_branch_is_a_one_line_error():
    """Fuzz seed 3010: a byte mutant renamed then_branch to tjen_branch, and the inlining looked it up (an internal
    StopIteration); the If is left as the file has it, and ONNX's inference names what is wrong."""
    from lilou.errors import LilouInputError

    model = _if_model([helper.make_node("Relu", ["x"], ["out"])], [helper.make_node("Neg", ["x"], ["out_else"])])
    next(a for a in model.graph.node[1].attribute if a.name == "then_branch").name = "tjen_branch"
    with pytest.raises(LilouInputError, match="then_branch does not contain a graph"):
        build_graph(model)


def test_unrolling_stops_at_its_node_budget():
    """A small file must not make Lilou write millions of nodes: every unrolling together writes at most
    MAX_UNROLLED_NODES body nodes (three loops of 200 trips over 40 nodes: two are unrolled, the third stays)."""
    from lilou.graph.loops import MAX_UNROLLED_NODES

    loops, previous = [], "x"
    for index in range(3):
        chain = [helper.make_node("Tanh", [f"h{index}_{j}" if j else f"h{index}_in"], [f"h{index}_{j + 1}"])
                 for j in range(39)]
        chain.append(helper.make_node("Identity", [f"c{index}_in"], [f"c{index}_out"]))
        body = helper.make_graph(chain, f"body{index}", [tensor(f"i{index}", [], TensorProto.INT64),
                                                         tensor(f"c{index}_in", [], TensorProto.BOOL),
                                                         tensor(f"h{index}_in", [2, 8])],
                                 [tensor(f"c{index}_out", None, TensorProto.BOOL), tensor(f"h{index}_39", None)])
        loops.append(helper.make_node("Loop", ["trips", "", previous], [f"y{index}"], name=f"loop{index}", body=body))
        previous = f"y{index}"
    model = make_model(loops, [tensor("x", [2, 8])], [tensor(previous, None)],
                       [numpy_helper.from_array(np.array(200, dtype=np.int64), "trips")])
    graph = build_graph(model)
    ops = [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()]
    assert ops.count("Tanh") == 2 * 200 * 39 <= MAX_UNROLLED_NODES and ops.count("Loop") == 1


def test_the_shaping_budget_shrinks_with_the_model():
    """8 shapings of a 20,000-node model at most (the budget's floor for any model that large), 64 for a small one."""
    small = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", None)])
    assert shaping_budget(small) == 64
    large = make_model([helper.make_node("Relu", ["x" if i == 0 else f"h{i}"], [f"h{i + 1}"]) for i in range(40_000)],
                       [tensor("x", [2])], [tensor("h40000", None)])
    assert shaping_budget(large) == 8


SILERO = Path(__file__).resolve().parent / "data" / "control_flow" / "silero_vad_16k_op15.onnx"


def test_a_scripted_model_with_many_conditions_is_decided_to_the_end():
    """Silero VAD (its authors' scripted export, tests/data/control_flow/README.md): six Ifs on the path that runs,
    each decided by the bound shapes, every branch inlined; with a budget of four decisions per model the last
    ones stayed fallback kernels and the recurrent state after them had no shape."""
    graph = load_graph(SILERO, shapes={"batch": (1,), "sequence": (512,)})
    assert not any(d["op"] == "If" for _, d in graph.dag.nodes(data=True))
    assert not any("unknown shape" in w or "approximated" in w for w in graph.warnings)
    assert sum("which the shapes decide" in w for w in graph.warnings) == 6
    assert {t.name: t.shape for t in graph.outputs} == {"output": (1, 1), "stateN": (2, 1, 128)}


def test_a_loop_or_scan_left_as_one_kernel_is_priced_with_its_body(tmp_path):
    """A Scan of 16 steps over a 64x64 GEMM stays one fallback kernel; that kernel carries the body's FLOPs and
    bytes the graph counted. Its own op formula saw none: the Scan was a 0-FLOP memory pass over its outer tensors,
    while the warnings said the body was priced. A Loop whose trip count is a run-time input is one iteration,
    written out (its GEMM priced as a GEMM), or the count ``--value`` gives."""
    from lilou.api import Predictor

    body = helper.make_graph([helper.make_node("MatMul", ["row", "w"], ["out"], name="gemm")], "body",
                             [tensor("row", [64, 64])], [tensor("out", [64, 64])], [weight("w", [64, 64])])
    scan = helper.make_node("Scan", ["xs"], ["ys"], name="scan", body=body, num_scan_inputs=1)
    scan_path = tmp_path / "scan.onnx"
    onnx.save(make_model([scan], [tensor("xs", [16, 64, 64])], [tensor("ys", None)], opset=17), scan_path)
    loop_body = helper.make_graph([helper.make_node("MatMul", ["h_in", "w"], ["h_out"], name="gemm"),
                                   helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")], "body",
                                  [tensor("i", [], TensorProto.INT64), tensor("cond_in", [], TensorProto.BOOL),
                                   tensor("h_in", [64, 64])],
                                  [tensor("cond_out", None, TensorProto.BOOL), tensor("h_out", [64, 64])],
                                  [weight("w", [64, 64])])
    loop = helper.make_node("Loop", ["n", "go", "x"], ["h"], name="loop", body=loop_body)
    loop_path = tmp_path / "loop.onnx"
    onnx.save(make_model([loop], [tensor("x", [64, 64]), tensor("n", [], TensorProto.INT64)], [tensor("h", None)],
                         [numpy_helper.from_array(np.array(True), "go")], opset=17), loop_path)
    predictor = Predictor()
    graph = load_graph(scan_path)
    (node,) = [n for n in graph.runtime_nodes() if graph.dag.nodes[n]["op"] == "Scan"]
    assert graph.dag.nodes[node]["flops"] == 16 * 2 * 64 * 64 * 64
    (kernel,) = predictor.predict(scan_path, gpu="a10g").kernels
    assert kernel.type == "memory_fallback" and kernel.flops == 16 * 2 * 64 * 64 * 64
    assert kernel.bytes == graph.dag.nodes[node]["bytes_read"] + graph.dag.nodes[node]["bytes_written"]
    unknown = predictor.predict(loop_path, gpu="a10g")  # a count fed at run time: one iteration, written out
    assert [k.type for k in unknown.kernels if k.flops] == ["gemm_sgemm"] and unknown.kernels[0].flops == 2 * 64 * 64 * 64
    assert "Loop 'loop' has no constant trip count: costed as one iteration of its body, written out (a count the " \
        "file takes as an input can be given with --value NAME=N)" in unknown.warnings
    given = predictor.predict(loop_path, gpu="a10g", values={"n": [3]})
    assert sum(k.flops for k in given.kernels) == 3 * 2 * 64 * 64 * 64
    assert "Loop 'loop' runs 3 times (set by --value): its body is priced once per iteration, as eager launches " \
        "it" in given.warnings


def test_an_opset_8_scan_runs_its_body_once_per_batch_element_and_step(tmp_path):
    """At opset 8 a Scan's first input is the optional sequence_lens, every input has a leading batch axis the body
    does not see, and the scan axis is 1: xs [2, 16, 64, 64] is 2 x 16 runs of the body's 64x64 GEMM. The batch axis
    was taken as the scan length: 2 runs, 1/16 of the work."""
    body = helper.make_graph([helper.make_node("MatMul", ["row", "w"], ["out"], name="gemm")], "body",
                             [tensor("row", None)], [tensor("out", None)], [weight("w", [64, 64])])
    scan = helper.make_node("Scan", ["", "xs"], ["ys"], name="scan", body=body, num_scan_inputs=1)
    path = tmp_path / "scan8.onnx"
    onnx.save(make_model([scan], [tensor("xs", [2, 16, 64, 64])], [tensor("ys", None)], opset=8), path)
    graph = load_graph(path)
    (node,) = [n for n in graph.runtime_nodes() if graph.dag.nodes[n]["op"] == "Scan"]
    assert graph.dag.nodes[node]["flops"] == 2 * 16 * 2 * 64 * 64 * 64
    assert {t.name: t.shape for t in graph.outputs} == {"ys": (2, 16, 64, 64)}
    assert "Scan 'scan' (opset 8: its inputs hold a batch axis, the scan axis is 1) is costed as its body times its " \
        "batch times its scan length (32), as one kernel that eager launches 32 times (1 body kernel(s) per step; one " \
        "launch under TVM)" in graph.warnings
    assert graph.dag.nodes[node]["launches"] == 2 * 16
