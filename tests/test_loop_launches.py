"""A ``Loop`` or ``Scan`` left as one node launches its body's kernels once per iteration in eager: the graph records
the count (lilou.graph.dag ``_node_cost``), the kernel carries it (lilou.latency.composition.eager_calls), and the
launch queue issues each launch a gap after the one before (lilou.latency.composition.overhead.queue_shares)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lilou.api import Predictor
from lilou.fusion.predict import predict_partition
from lilou.graph.dag import load_graph
from lilou.latency.composition.end_to_end import describe_kernels
from lilou.latency.composition.overhead import LAUNCH_GAP_RANGE, queue_shares
from tests.onnx_builders import make_model, tensor

STEPS = 300


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor()


def _scan(path, steps: int = STEPS, body_nodes=None, initializers=()):
    """s = s + x_t over ``steps`` rows of xs [steps, 8] (the reported scan_1e4.onnx at another length)."""
    nodes = body_nodes or [helper.make_node("Add", ["s_in", "x_t"], ["s_out"], name="add"),
                           helper.make_node("Identity", ["s_out"], ["y_t"], name="row")]
    body = helper.make_graph(nodes, "body", [tensor("s_in", [8]), tensor("x_t", [8])],
                             [tensor("s_out", [8]), tensor("y_t", [8])], list(initializers))
    scan = helper.make_node("Scan", ["s0", "xs"], ["sf", "ys"], name="scan", body=body, num_scan_inputs=1)
    onnx.save(make_model([scan], [tensor("s0", [8]), tensor("xs", [steps, 8])],
                         [tensor("sf", None), tensor("ys", None)], opset=17), path)
    return path


def _counted_loop(path, trips: int = STEPS):
    """s = s + b ``trips`` times, a constant count: written out, one Add kernel per iteration."""
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"], name="keep"),
                              helper.make_node("Add", ["s_in", "b"], ["s_out"], name="add")], "body",
                             [tensor("i", [], TensorProto.INT64), tensor("c_in", [], TensorProto.BOOL),
                              tensor("s_in", [8])], [tensor("c_out", [], TensorProto.BOOL), tensor("s_out", [8])])
    loop = helper.make_node("Loop", ["trips", "", "s0"], ["s"], name="loop", body=body)
    onnx.save(make_model([loop], [tensor("s0", [8])], [tensor("s", None)],
                         [numpy_helper.from_array(np.array(trips, dtype=np.int64), "trips"),
                          numpy_helper.from_array(np.ones(8, dtype=np.float32), "b")], opset=17), path)
    return path


def test_a_scan_launches_its_body_once_per_step_as_a_written_out_loop_does(tmp_path, predictor):
    """A Scan is one node whatever its length; eager launches its body's Add once per step. It was one launch: 300
    steps of an 8-element Add at 0.030 ms, the same loop written out 9.06 ms."""
    path = _scan(tmp_path / "scan.onnx")
    graph = load_graph(path)
    (node,) = graph.runtime_nodes()
    assert graph.dag.nodes[node]["launches"] == STEPS  # the Identity is a view: one launch per step
    (spec,) = describe_kernels(graph, predict_partition(graph, "eager")).specs
    assert spec.launches == STEPS
    assert (f"Scan 'scan' is costed as its body times its scan length ({STEPS}), as one kernel that eager launches "
            f"{STEPS} times (1 body kernel(s) per step; one launch under TVM)") in graph.warnings
    scan = predictor.predict(path, gpu="a10g")
    written = predictor.predict(_counted_loop(tmp_path / "loop.onnx"), gpu="a10g")
    assert len(scan.kernels) == 1 and len(written.kernels) == STEPS
    assert scan.latency_ms == pytest.approx(written.latency_ms, rel=1e-3)
    work = predictor.model.overhead.gpu_ms(scan.kernels[0].alone_ms)
    gap = predictor.model.overhead.gap_ms
    assert scan.latency_ms == pytest.approx(float(queue_shares(np.array([work]), gap, launches=[STEPS]).sum()),
                                            abs=1e-4)


def test_the_interval_requeues_every_launch(tmp_path, predictor):
    """The 90 % interval runs the queue again with the same launches: it holds the estimate, and its lower end is
    the launches at the launch gap's lower end (it was 0.03-0.06 ms around the one-launch figure)."""
    scan = predictor.predict(_scan(tmp_path / "scan.onnx"), gpu="a10g")
    low, high = scan.interval_ms
    assert low <= scan.latency_ms <= high
    assert low >= STEPS * predictor.model.overhead.gap_ms * LAUNCH_GAP_RANGE[0] * (1 - 1e-3)


def test_tvm_keeps_one_launch(tmp_path):
    """A loop TVM compiles is not issued from Python per iteration: its kernel stays one launch."""
    graph = load_graph(_scan(tmp_path / "scan.onnx"))
    assert [spec.launches for spec in describe_kernels(graph, predict_partition(graph, "tvm")).specs] == [1]


def test_a_body_counts_what_eager_launches_and_nested_loops_their_own(tmp_path):
    """Per step: the Mul (the Constant, the Shape and the Gather of it are known before the step runs, the Reshape
    and Identity are views) and a nested Loop of 3 iterations of a Tanh: 1 + 3 launches."""
    inner = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"], name="keep"),
                               helper.make_node("Tanh", ["h_in"], ["h_out"], name="tanh")], "inner",
                              [tensor("i", [], TensorProto.INT64), tensor("c_in", [], TensorProto.BOOL),
                               tensor("h_in", [8])], [tensor("c_out", [], TensorProto.BOOL), tensor("h_out", [8])])
    nodes = [helper.make_node("Constant", [], ["two"], name="two", value=numpy_helper.from_array(np.float32(2.0))),
             helper.make_node("Shape", ["x_t"], ["size"], name="shape"),
             helper.make_node("Reshape", ["x_t", "size"], ["x_flat"], name="flat"),
             helper.make_node("Mul", ["x_flat", "two"], ["doubled"], name="mul"),
             helper.make_node("Loop", ["three", "", "doubled"], ["s_out"], name="inner", body=inner),
             helper.make_node("Identity", ["s_out"], ["y_t"], name="row")]
    graph = load_graph(_scan(tmp_path / "nested.onnx", steps=5, body_nodes=nodes,
                             initializers=[numpy_helper.from_array(np.array(3, dtype=np.int64), "three")]))
    (node,) = graph.runtime_nodes()
    assert graph.dag.nodes[node]["launches"] == 5 * (1 + 3)
    assert "Loop 'inner' is costed as its body times its trip count (3), as one kernel that eager launches 3 times " \
        "(1 body kernel(s) per iteration; one launch under TVM)" in graph.warnings


def test_no_eager_kernel_spans_two_iterations_of_an_unrolled_loop(tmp_path):
    """The counted loop written out is one Add per iteration, each reading the one before: eager runs one per
    iteration. Every edge between two iterations is cut from what a fusion model joins (the version-8 GNN joined two
    of 300); the edge to the loop's output (an Identity Lilou writes after the last iteration) is not."""
    from lilou.fusion.eager_replay import kept_whole
    from lilou.fusion.partition import runtime_edges

    graph = load_graph(_counted_loop(tmp_path / "loop.onnx", trips=4))
    edges = runtime_edges(graph)
    assert [(u.split("/")[-1], v.split("/")[-1]) for u, v in edges] == [
        ("iteration_0", "iteration_1"), ("iteration_1", "iteration_2"), ("iteration_2", "iteration_3"),
        ("iteration_3", "lilou_final_0")]
    assert kept_whole(graph, edges) == edges[-1:]
