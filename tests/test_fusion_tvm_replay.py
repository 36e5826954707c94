"""The FuseOps replay (a GNN feature) against TVM's own grouping, on hand-built and zoo graphs."""
from __future__ import annotations

import pytest
from onnx import helper

from lilou.fusion.partition import fused_edge_labels
from lilou.fusion.tvm_replay import INJECTIVE, OPAQUE, OUT_EWISE_FUSABLE, replay_tvm_fusion, replayed_fused_edges, \
    tvm_pattern
from lilou.graph.dag import build_graph, load_graph
from tests.onnx_builders import make_model, tensor, weight
from tests.test_fusion_tvm import TINY_BERT, conv_mlp_model


def groups_of(graph) -> set[frozenset[str]]:
    replay = replay_tvm_fusion(graph)
    return {frozenset(n for n, g in replay.items() if g == gid) for gid in set(replay.values())}


def pool_branch_model():
    """A NAS-Bench-201-like cell: bn = BN(conv(x)); y = relu(bn + avgpool(x))."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"], name="bn"),
        helper.make_node("AveragePool", ["x"], ["p"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["bn", "p"], ["sum"], name="add"),
        helper.make_node("Relu", ["sum"], ["y"], name="relu"),
    ]
    return make_model(nodes, [tensor("x", [1, 8, 8, 8])], [tensor("y", [1, 8, 8, 8])],
                      [weight("w", [8, 8, 3, 3])] + [weight(n, [8]) for n in "sbmv"])


def test_patterns_follow_relax_legalisation():
    assert tvm_pattern("Conv") == OUT_EWISE_FUSABLE and tvm_pattern("Softmax") == OUT_EWISE_FUSABLE
    assert tvm_pattern("BatchNormalization") == INJECTIVE  # batch_norm returns a tuple: injective, not elementwise
    assert tvm_pattern("Identity") is None and tvm_pattern("NoSuchOp") == OPAQUE


def test_conv_takes_its_elementwise_tail_and_softmax_stays_alone():
    graph = build_graph(conv_mlp_model())
    assert groups_of(graph) == {frozenset({"conv", "bias", "relu"}), frozenset({"flatten"}),
                                frozenset({"matmul", "bias2"}), frozenset({"softmax"})}


def test_injective_node_never_joins_an_anchored_group():
    # The pool (an anchor) takes add and relu in phase 0; batch norm is injective and may only join an
    # injective group in phase 1, so it stays alone, as do the conv (its post-dominator is not elementwise).
    graph = build_graph(pool_branch_model())
    assert groups_of(graph) == {frozenset({"conv"}), frozenset({"bn"}), frozenset({"pool", "add", "relu"})}
    pytest.importorskip("tvm")
    from lilou.fusion.backends.tvm import tvm_partition

    assert {frozenset(g.nodes) for g in tvm_partition(pool_branch_model()).kernels} == groups_of(graph)


def test_pass_through_between_fused_nodes_joins_them():
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="add"),
             helper.make_node("Identity", ["a"], ["i"], name="dropout"),
             helper.make_node("Relu", ["i"], ["r"], name="relu"),
             helper.make_node("Identity", ["r"], ["y"], name="out")]
    graph = build_graph(make_model(nodes, [tensor("x", [4, 64])], [tensor("y", [4, 64])]))
    assert groups_of(graph) == {frozenset({"add", "dropout", "relu"})}  # "out" sits in no group


def test_a_long_run_of_pass_through_nodes_joins_without_recursion():
    """Relu -> 1,200 Identity -> Relu: the walk over pass-through nodes was recursive and overflowed Python's
    limit from about 400 in a row (an internal RecursionError in `infer`, eager and TVM alike)."""
    count = 1200
    nodes = [helper.make_node("Relu", ["x"], ["p0"], name="first")]
    nodes += [helper.make_node("Identity", [f"p{i}"], [f"p{i + 1}"], name=f"pass{i}") for i in range(count)]
    nodes.append(helper.make_node("Relu", [f"p{count}"], ["y"], name="last"))
    graph = build_graph(make_model(nodes, [tensor("x", [4, 64])], [tensor("y", [4, 64])]))
    assert groups_of(graph) == {frozenset({"first", "last", *(f"pass{i}" for i in range(count))})}


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_matches_the_tvm_oracle_on_tiny_bert(tmp_path, dynamo):
    pytest.importorskip("tvm")
    from lilou.fusion.backends.tvm import tvm_partition
    from lilou.zoo.export import export_onnx
    from lilou.zoo.registry import build

    path = export_onnx(build("bert-base", **TINY_BERT), tmp_path / "bert.onnx", strip_weights=True, dynamo=dynamo)
    graph = load_graph(path)
    truth = fused_edge_labels(graph, tvm_partition(path, graph))
    assert replayed_fused_edges(graph) == truth
    assert sum(truth.values()) >= 10


def test_matches_the_tvm_oracle_on_a_cell_with_duplicate_pools(tmp_path):
    # NAS-Bench-201 cell 3 averages the same tensor twice into one sum: TVM fuses the first pool into
    # the add. This graph also exercises the oracle's matching of duplicated computations.
    pytest.importorskip("tvm")
    from lilou.fusion.backends.tvm import tvm_partition_with_stats
    from lilou.zoo.export import export_onnx
    from lilou.zoo.registry import build

    path = export_onnx(build("nas201-3"), tmp_path / "cell.onnx", strip_weights=True, dynamo=True)
    graph = load_graph(path)
    partition, stats = tvm_partition_with_stats(path, graph)
    assert stats.untagged_kernels == 0
    truth = fused_edge_labels(graph, partition)
    assert replayed_fused_edges(graph) == truth


def test_long_residual_chain_respects_tvm_fuse_depth_without_recursion_limits():
    # a0 feeds the final Add directly and through 2000 Relus: its post-dominator is 2000 nodes away
    # (deeper than Python's recursion limit), and TVM caps a fused function at 256 ops.
    depth = 2000
    nodes = [helper.make_node("Relu", ["x"], ["a0"], name="r0")]
    nodes += [helper.make_node("Relu", [f"a{i - 1}"], [f"a{i}"], name=f"r{i}") for i in range(1, depth)]
    nodes.append(helper.make_node("Add", [f"a{depth - 1}", "a0"], ["y"], name="add"))
    model = make_model(nodes, [tensor("x", [4, 8])], [tensor("y", [4, 8])])
    graph = build_graph(model)
    groups = groups_of(graph)
    # From the end backwards, groups fill to 256; a0 cannot join the Add's full group and stays alone.
    assert sorted(len(g) for g in groups) == [1, 208] + [256] * 7
    assert frozenset({"r0"}) in groups
    pytest.importorskip("tvm")
    from lilou.fusion.backends.tvm import tvm_partition

    assert {frozenset(k.nodes) for k in tvm_partition(model, graph).kernels} == groups


def normalise_model(reduction: str):
    """``F.normalize``'s shape: a reduction over the last axis, clamped, then a division (ONNX opset 18)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node(reduction, ["r", "axes"], ["n"], name="norm", keepdims=1),
             helper.make_node("Clip", ["n", "eps"], ["c"], name="clamp"),
             helper.make_node("Div", ["r", "c"], ["y"], name="div")]
    axes = helper.make_tensor("axes", 7, [1], [1])
    eps = helper.make_tensor("eps", 1, [], [1e-12])
    model = make_model(nodes, [tensor("x", [2, 16])], [tensor("y", [2, 16])], [axes, eps])
    model.opset_import[0].version = 18
    return model


@pytest.mark.parametrize("reduction, clamp_joins", [("ReduceL2", True), ("ReduceLogSum", True), ("ReduceL1", False),
                                                    ("ReduceSumSquare", False), ("ReduceSum", False)])
def test_a_reduction_with_an_elementwise_tail_shares_it_with_its_reader(reduction, clamp_joins):
    """TVM computes ReduceL2 as a sum then a sqrt, and the sqrt fuses with the Clip that reads it; ReduceL1 ends in
    its sum, and the Clip is a kernel of its own. Checked against TVM itself when it is installed."""
    graph = build_graph(normalise_model(reduction))
    assert replayed_fused_edges(graph)[("norm", "clamp")] is clamp_joins
    pytest.importorskip("tvm")
    from lilou.fusion.backends.tvm import tvm_partition

    assert replayed_fused_edges(graph) == fused_edge_labels(graph, tvm_partition(normalise_model(reduction), graph))
