"""The exporter-name flag (lilou/fusion/export_names.py) against the eager oracle on real dynamo exports."""
from __future__ import annotations

import math

import pytest
import torch
from onnx import helper
from torch import nn

from lilou.fusion.backends.eager import eager_partition
from lilou.fusion.eager_replay import replay_eager_partition
from lilou.fusion.export_names import (
    edges_between_calls,
    edges_inside_one_call,
    fused_call_nodes,
    inlined_runs,
    without_exporter_names,
)
from lilou.fusion.features import EXPORT_NAME_COLUMN, fusion_arrays, with_backend_prior
from lilou.fusion.evaluation import node_groups
from lilou.fusion.partition import fused_edge_labels
from lilou.graph.dag import build_graph
from lilou.graph.loading import load_onnx
from lilou.zoo import decomp_nets
from lilou.zoo.export import export_onnx
from lilou.zoo.registry import BuiltModel
from tests.onnx_builders import make_model, tensor
from tests.test_fusion_corpus import export  # noqa: F401 - pytest fixture


def exported(tmp_path, name: str, module: nn.Module, optimize: bool = False):
    built = BuiltModel(name, module, (torch.zeros(2, 6, 16),), ("x",), "output")
    path = export_onnx(built, tmp_path / f"{name}.onnx", opset=18, optimize=optimize)
    return load_onnx(path), build_graph(load_onnx(path), name=name)


def oracle_fused(model, graph) -> set[tuple[str, str]]:
    return {e for e, fused in fused_edge_labels(graph, eager_partition(model, graph)).items() if fused}


def test_inlined_runs_start_again_where_the_numbers_stop_rising():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="n0"), helper.make_node("Relu", ["a"], ["b"], name="n1"),
             helper.make_node("Relu", ["b"], ["c"], name="n0_2"), helper.make_node("Relu", ["c"], ["d"], name="n3"),
             helper.make_node("Relu", ["d"], ["e"], name="node_relu"), helper.make_node("Relu", ["e"], ["y"], name="n4")]
    graph = build_graph(make_model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])]))
    assert inlined_runs(graph) == {"n0": 1, "n1": 1, "n0_2": 2, "n3": 2, "n4": 3}
    assert edges_inside_one_call(graph) == {("n0", "n1"), ("n0_2", "n3")}
    # TorchScript's names (scope path, op, output) say nothing about aten calls.
    scripted = [helper.make_node("Relu", ["x"], ["/0/Relu_output_0"], name="/0/Relu"),
                helper.make_node("Neg", ["/0/Relu_output_0"], ["y"], name="/1/Neg")]
    assert edges_inside_one_call(build_graph(make_model(scripted, [tensor("x", [2, 3])], [tensor("y", [2, 3])]))) == set()


def test_nodes_named_n0_n1_outside_a_dynamo_export_are_not_one_call():
    """A chain of 24 elementwise ops built by hand with nodes named n0..n23 was read as one inlined torchlib call
    and replayed as one eager kernel (0.036 ms on a T4 against 0.731 with any other names): the runs are read
    only in a file the dynamo exporter named."""
    from lilou.api import Predictor

    ops = ["Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp"] * 4
    names = [f"t{i}" for i in range(len(ops))]
    def chain(prefix):
        return make_model([helper.make_node(op, ["x" if i == 0 else names[i - 1]],
                                            [names[i] if i < len(ops) - 1 else "y"], name=f"{prefix}{i}")
                           for i, op in enumerate(ops)], [tensor("x", [64, 1024])], [tensor("y", [64, 1024])])
    hand = build_graph(chain("n"))
    assert inlined_runs(hand) == {} and edges_inside_one_call(hand) == set()
    predictor = Predictor()
    by_n, by_op = (predictor.predict(build_graph(chain(prefix)), "t4") for prefix in ("n", "op_"))
    assert len(by_n.kernels) == len(by_op.kernels) == 24 and by_n.latency_ms == by_op.latency_ms


@pytest.mark.slow
def test_two_softplus_calls_are_two_inlined_runs(tmp_path):
    """Softplus's threshold form is an inlined torchlib function: n0..n10, then n0_2..n10_2 for the second call."""
    model, graph = exported(tmp_path, "two-softplus", nn.Sequential(nn.Softplus(), nn.Softplus(beta=2.0)))
    truth = oracle_fused(model, graph)
    assert len(truth) == 10 and edges_inside_one_call(graph) == truth
    assert ("n10", "n2_2") not in truth
    # The eager replay joins each run: two kernels, as eager runs them.
    replay = replay_eager_partition(graph)
    assert {e for e, fused in fused_edge_labels(graph, replay).items() if fused} == truth
    assert len(replay.kernels) == 2
    # With every name prefixed (the benchmark's "names hidden"), nothing says where a call ends.
    hidden = build_graph(without_exporter_names(model))
    assert edges_inside_one_call(hidden) == set() and len(hidden.dag) == len(graph.dag)


@pytest.mark.slow
def test_internal_values_of_an_unoptimised_elu_and_linear(export):  # noqa: F811
    """ELU at opset 18 is Mul, Elu, Mul over val_<k> tensors; aten.linear is MatMul -> Add over one."""
    path, graph = export("lin-elu", opset=18)
    truth = oracle_fused(load_onnx(path), graph)
    flagged = edges_inside_one_call(graph)
    assert flagged == truth
    assert sorted((graph.dag.nodes[u]["op"], graph.dag.nodes[v]["op"]) for u, v in flagged) == [
        ("Elu", "Mul"), ("MatMul", "Add"), ("Mul", "Elu")]


@pytest.mark.slow
def test_a_hand_written_gelu_names_every_aten_call(tmp_path):
    """Five aten calls, each result named after its FX node: no edge is flagged, as eager runs five kernels."""
    model, graph = exported(tmp_path, "hand-gelu", decomp_nets.Lambda(lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2.0)))))
    assert oracle_fused(model, graph) == set() and edges_inside_one_call(graph) == set()


@pytest.mark.slow
def test_an_optimised_elu_before_an_inlined_softplus_is_not_joined_to_it(tmp_path):
    """The optimiser drops ELU's multiplications by 1, leaving its Elu node's val_<k> as the call's result; the
    inlined Softplus that reads it is another call."""
    model, graph = exported(tmp_path, "elu-softplus", nn.Sequential(nn.ELU(), nn.Softplus()), optimize=True)
    truth = oracle_fused(model, graph)
    assert truth and edges_inside_one_call(graph) == truth


def test_only_eager_sees_the_exporter_name_flag():
    nodes = [helper.make_node("Relu", ["x"], ["val_0"], name="node_Relu_0"),
             helper.make_node("Neg", ["val_0"], ["y"], name="node_relu")]
    arrays = fusion_arrays(build_graph(make_model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])])))
    assert arrays.edge_attr[:, EXPORT_NAME_COLUMN].tolist() == [1.0]
    assert with_backend_prior(arrays.edge_attr, "eager")[0, EXPORT_NAME_COLUMN] == 1.0
    assert with_backend_prior(arrays.edge_attr, "tvm")[0, EXPORT_NAME_COLUMN] == 0.0


@pytest.mark.slow
def test_hand_written_activations_keep_their_aten_calls(tmp_path):
    """``x * torch.sigmoid(x)`` and an erf GELU written out are several aten calls, each result named after its
    FX node: the replay's op patterns (silu's Sigmoid -> Mul, the erf chain) no longer join them, and eager's
    kernel counts (2 and 5) are the oracle's. ``F.silu`` keeps its one kernel: its Sigmoid writes a ``val_<k>``.
    TorchScript names say nothing, and the patterns still join there."""
    cases = {"hand-swish": (decomp_nets.Lambda(lambda x: x * torch.sigmoid(x)), 2),
             "hand-gelu": (decomp_nets.Lambda(lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2.0)))), 5),
             "silu": (nn.SiLU(), 1)}
    for name, (module, kernels) in cases.items():
        model, graph = exported(tmp_path, name, module)
        replay = replay_eager_partition(graph)
        assert len(replay.kernels) == len(eager_partition(model, graph).kernels) == kernels, name
    _, swish = exported(tmp_path, "hand-swish-names", cases["hand-swish"][0])
    assert edges_between_calls(swish) == {("node_sigmoid", "node_mul")}
    path = tmp_path / "hand-swish-ts.onnx"
    torch.onnx.export(cases["hand-swish"][0], (torch.zeros(2, 6, 16),), path, dynamo=False, opset_version=18)
    scripted = build_graph(load_onnx(path))
    assert edges_between_calls(scripted) == set() and len(replay_eager_partition(scripted).kernels) == 1


@pytest.mark.slow
def test_scaled_dot_product_attention_is_one_kernel(tmp_path):
    """The dynamo exporter writes ``F.scaled_dot_product_attention`` as its math (scale, Q.K^T, softmax, P.V) and
    names the last node after the call; eager runs one attention kernel, and so does the oracle. The replay and
    the prediction group the call as the oracle does; the prediction prices it as one kernel, flagged
    extrapolated and named in the warnings. The same attention written out by hand stays four kernels (the
    division by sqrt(d) is one)."""
    from lilou.api import Predictor
    from lilou.fusion.predict import predict_partition

    class Attention(nn.Module):
        def __init__(self, fused: bool):
            super().__init__()
            self.fused = fused

        def forward(self, q, k, v):
            if self.fused:
                return torch.nn.functional.scaled_dot_product_attention(q, k, v)
            return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1) @ v

    args = tuple(torch.randn(2, 4, 64, 32) for _ in range(3))
    for fused, kernels in ((True, 1), (False, 4)):
        built = BuiltModel("sdpa", Attention(fused), args, ("q", "k", "v"), "output")
        path = export_onnx(built, tmp_path / f"attention-{fused}.onnx")
        model, graph = load_onnx(path), build_graph(load_onnx(path), name="attention")
        oracle = eager_partition(model, graph)
        assert len(oracle.kernels) == kernels
        calls = fused_call_nodes(graph)
        assert len(calls) == int(fused)
        for partition in (replay_eager_partition(graph), predict_partition(graph, "eager")):
            assert node_groups(graph, partition, launching_only=True) == node_groups(graph, oracle, launching_only=True)
        prediction = Predictor().predict(path, gpu="a100-sxm4-80gb")
        assert len(prediction.kernels) == kernels
        warned = [w for w in prediction.warnings if "fused attention kernel" in w]
        assert len(warned) == int(fused)
        if fused:
            (kernel,) = prediction.kernels
            assert kernel.extrapolated
            assert kernel.flops == sum(graph.dag.nodes[n]["flops"] for n in calls[0])
            # Q, K and V read once, O written, and the two scale factors: no score matrix
            assert kernel.bytes == 4 * (4 * 2 * 4 * 64 * 32) + 2 * 4
