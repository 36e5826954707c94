"""The TVM (Relax, CUDA sm_80) fusion oracle on hand-built graphs and real zoo exports."""
from __future__ import annotations

from collections import Counter

import pytest
from onnx import helper

from lilou.errors import LilouInputError
from lilou.fusion.backends.tvm import check_tvm_supported, tvm_partition, tvm_partition_with_stats
from lilou.fusion.partition import KernelGroup, check_covers
from lilou.graph.dag import ModelGraph, build_graph, load_graph
from tests.onnx_builders import ints, make_model, tensor, weight

pytest.importorskip("tvm")  # a declared dependency; lilou itself imports it lazily

TINY_BERT = dict(batch=1, seq=16, num_hidden_layers=1, hidden_size=64, num_attention_heads=2,
                 intermediate_size=128, vocab_size=100, max_position_embeddings=32)


def conv_mlp_model():
    """Conv -> Add(bias) -> Relu -> Reshape -> MatMul -> Add(bias) -> Softmax (w2, 10 KiB, becomes a parameter)."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "b"], ["cb"], name="bias"),
        helper.make_node("Relu", ["cb"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["flat"], name="flatten"),
        helper.make_node("MatMul", ["flat", "w2"], ["m"], name="matmul"),
        helper.make_node("Add", ["m", "b2"], ["mb"], name="bias2"),
        helper.make_node("Softmax", ["mb"], ["y"], name="softmax", axis=-1),
    ]
    return make_model(nodes, [tensor("x", [1, 3, 8, 8])], [tensor("y", [1, 10])],
                      [weight("w", [4, 3, 3, 3]), weight("b", [1, 4, 1, 1]), ints("shape", [1, 256]),
                       weight("w2", [256, 10]), weight("b2", [10])])


def signatures(graph: ModelGraph, partition) -> Counter:
    ops = graph.dag.nodes
    return Counter("+".join(ops[n]["op"] for n in group.nodes) for group in partition.kernels)


def oracle(path) -> tuple[ModelGraph, object, object]:
    graph = load_graph(path)
    partition, stats = tvm_partition_with_stats(path, graph)
    check_covers(graph, partition)
    assert partition.backend == "tvm"
    assert stats.untagged_kernels == 0 and stats.weight_only_kernels == 0
    assert stats.kernels_tvm == stats.kernels + stats.kernels_merged
    return graph, partition, stats


def test_conv_bias_relu_is_one_kernel_and_matmul_takes_its_bias():
    # FuseOps: conv2d (out-elementwise fusable) absorbs the broadcast add and relu; the lone reshape
    # becomes a view (RewriteDataflowReshape); matmul absorbs its bias add; softmax (a reduction after
    # an out-elementwise group) is a kernel of its own.
    partition = tvm_partition(conv_mlp_model())
    assert partition.groups == [
        KernelGroup(("conv", "bias", "relu")),
        KernelGroup(("flatten",), launches=False, reason="view"),
        KernelGroup(("matmul", "bias2")),
        KernelGroup(("softmax",)),
    ]


def test_kernel_less_node_inside_a_kernel_joins_it():
    # Identity produces no binding at all; between two fused elementwise ops it sits inside their kernel
    # (otherwise the group would not be convex); a trailing Identity launches nothing.
    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"], name="add"),
        helper.make_node("Identity", ["a"], ["i"], name="dropout"),
        helper.make_node("Relu", ["i"], ["r"], name="relu"),
        helper.make_node("Identity", ["r"], ["y"], name="out"),
    ]
    model = make_model(nodes, [tensor("x", [4, 64])], [tensor("y", [4, 64])])
    partition, stats = tvm_partition_with_stats(model)
    assert partition.groups == [KernelGroup(("add", "dropout", "relu")), KernelGroup(("out",), launches=False, reason="view")]
    assert stats.absorbed_nodes == 1


def test_unsupported_op_is_named():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Celu", ["r"], ["y"], name="celu")]
    model = make_model(nodes, [tensor("x", [2, 8])], [tensor("y", [2, 8])])
    with pytest.raises(LilouInputError, match=r"^TVM cannot import op\(s\): Celu$"):
        check_tvm_supported(model)
    with pytest.raises(LilouInputError, match="Celu"):
        tvm_partition(model, build_graph(model))


def test_graph_of_another_model_is_refused():
    other = make_model([helper.make_node("Relu", ["x"], ["y"], name="other")], [tensor("x", [2])], [tensor("y", [2])])
    with pytest.raises(ValueError, match="node names differ"):
        tvm_partition(conv_mlp_model(), build_graph(other))


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_tiny_bert(tmp_path, dynamo):
    from lilou.zoo.export import export_onnx
    from lilou.zoo.registry import build

    path = export_onnx(build("bert-base", **TINY_BERT), tmp_path / "bert.onnx", strip_weights=True, dynamo=dynamo)
    graph, partition, stats = oracle(path)
    kernels = signatures(graph, partition)
    # One encoder layer: Q, K, V and output projections and FFN-in each fuse matmul with their bias add.
    assert kernels["Softmax"] == 1 and kernels["LayerNormalization"] == 3
    # The word-embedding Gather is two TVM kernels (index wrap-around, then take): merged into one group.
    assert kernels["Gather"] == 1 and len(stats.split_nodes) == 1
    if dynamo:
        assert kernels["MatMul+Add+Gelu"] == 1
    else:  # the TorchScript exporter writes GELU as Div/Erf/Add/Mul/Mul, all fused into the FFN matmul
        assert kernels["MatMul+Add+Div+Erf+Add+Mul+Mul"] == 1


@pytest.mark.slow
def test_resnet50(zoo_onnx):
    graph, partition, stats = oracle(zoo_onnx("resnet50", batch=1))
    kernels = signatures(graph, partition)
    # The default CUDA pipeline does not decompose batch_norm: every Conv is a kernel of its own and
    # each BatchNormalization fuses with what follows (residual Add, Relu).
    assert kernels["Conv"] == 53 and sum(kernels.values()) == 105
    assert kernels["BatchNormalization+Relu"] == 33 and kernels["BatchNormalization+Add+Relu"] == 12
    assert not stats.split_nodes


@pytest.mark.slow
def test_vit_b16(zoo_onnx):
    graph, partition, stats = oracle(zoo_onnx("vit-b16", batch=1))
    kernels = signatures(graph, partition)
    assert kernels["Softmax+Cast"] == 12 and kernels["MatMul+Add+Gelu"] == 12
    assert sum(kernels.values()) == 185 and not stats.split_nodes


@pytest.mark.slow
def test_bert_large(zoo_onnx):
    graph, partition, stats = oracle(zoo_onnx("bert-large", batch=1, seq=128))
    kernels = signatures(graph, partition)
    assert kernels["Softmax"] == 24 and kernels["MatMul+Add+Gelu"] == 24
    assert sum(kernels.values()) == 363 and stats.split_nodes == ["node_embedding"]


@pytest.mark.parametrize("fixture,op", [("scripted-if.onnx", "If"), ("scripted-loop.onnx", "Loop")])
def test_the_tvm_oracle_refuses_control_flow_in_one_line(fixture, op):
    """`lilou fuse --backend tvm --oracle` on a scripted If or Loop: the documented refusal (exit 2), as for Scan;
    Lilou's graph holds the branch taken or the body per iteration, whose names were an internal error."""
    from pathlib import Path

    from lilou.fusion.oracles import oracle_partition

    path = Path(__file__).parent / "data" / "control_flow" / fixture
    with pytest.raises(LilouInputError, match=f"TVM (oracle does not handle control flow \\({op}\\)|cannot import "
                                              f"op\\(s\\): {op})"):
        oracle_partition("tvm", path, load_graph(path, batch=2, restore_folded=False))
