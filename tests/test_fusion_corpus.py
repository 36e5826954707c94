"""The decomposition corpus (lilou/zoo/decomp.py): real exports, eager labels, recurrent layers, splits, costs."""
from __future__ import annotations

from collections import Counter

import pytest

from lilou.errors import LilouInputError
from lilou.fusion.backends.eager import eager_partition
from lilou.fusion.benchmark import LabelledGraph, edge_misses
from lilou.fusion.dataset import (
    CORPUS_EXPORTERS,
    CORPUS_SEQUENCE_EXPORTERS,
    TEST_EXPORTERS,
    TEST_OPS,
    SampleSpec,
    catalogue,
    corpus_catalogue,
    select,
    split_of,
)
from lilou.fusion.eager_replay import replay_eager_partition
from lilou.fusion.partition import fused_edge_labels, partition_from_fused_edges
from lilou.graph.dag import build_graph
from lilou.graph.loading import load_onnx
from lilou.zoo import decomp, decomp_nets
from lilou.zoo.export import export_onnx
from lilou.zoo.catalogue import get_entry, list_models
from lilou.zoo.registry import build


def kernel_ops(graph, partition) -> list[list[str]]:
    return [[graph.dag.nodes[n]["op"] for n in k.nodes] for k in partition.kernels]


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """Export a corpus entry once per setting: ``export(name, opset=None, optimize=False)`` -> (path, graph)."""
    root = tmp_path_factory.mktemp("corpus")
    done: dict[tuple, tuple] = {}

    def run(name: str, opset: int | None = None, optimize: bool = False):
        key = (name, opset, optimize)
        if key not in done:
            path = root / f"{name}-{opset}-{int(optimize)}.onnx"
            export_onnx(build(name), path, strip_weights=True, optimize=optimize, opset=opset)
            done[key] = (path, build_graph(load_onnx(path), name=name))
        return done[key]

    return run


def test_every_corpus_op_has_its_module_maker():
    """The corpus as data (lilou.zoo.decomp, no torch) and its modules (decomp_nets) are two tables: one key set."""
    assert list(decomp_nets.MAKERS) == list(decomp.OPS)
    assert len(decomp.OPS) == 36 and len(decomp.corpus_names()) == 86


def test_corpus_entries_are_zoo_models():
    names = decomp.corpus_names()
    assert len(names) == len(set(names)) == len(decomp.OPS) + sum(len(s.sequences) for s in decomp.OPS.values())
    zoo = {e.name: e for e in list_models()}
    assert all(zoo[name].family == "decomp" for name in names)
    assert decomp.op_of("lin-gelu-erf") == "gelu-erf" and decomp.parse("conv-layer-norm") is None
    assert get_entry("conv-batch-norm-train").description.startswith("decomposition corpus: norm")
    with pytest.raises(LilouInputError, match="unknown zoo model 'op-no-such-op'"):
        get_entry("op-no-such-op")
    with pytest.raises(LilouInputError, match="fixed target"):
        build("op-mse-loss", batch=3)
    assert build("op-gelu-erf", batch=5).args[0].shape == (5, 6, decomp.WIDTH)
    assert build("op-batch-norm-train").module.training and not build("op-batch-norm").module.training


def test_export_refuses_an_opset_the_exporters_do_not_write(tmp_path):
    with pytest.raises(LilouInputError, match="opset must be between 7 and 23, got 30"):
        export_onnx("op-relu6", tmp_path / "relu6.onnx", opset=30)
    assert not (tmp_path / "relu6.onnx").exists()


@pytest.mark.slow
def test_erf_gelu_after_linear_is_one_eager_kernel(export):
    path, graph = export("lin-gelu-erf", opset=18)
    assert kernel_ops(graph, eager_partition(load_onnx(path), graph)) == [
        ["MatMul", "Add"], ["Div", "Erf", "Add", "Mul", "Mul"], ["ReduceSum"]]


@pytest.mark.slow
def test_opset_23_with_the_optimiser_writes_one_gelu_node(export):
    path, graph = export("op-gelu-erf", opset=23, optimize=True)
    assert [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()] == ["Gelu"]
    props = {p.key: p.value for p in load_onnx(path).metadata_props}
    assert props["lilou.zoo.opset"] == "23" and props["lilou.zoo.optimize"] == "true"


@pytest.mark.slow
def test_opset_17_drops_the_metadata_so_those_files_are_tvm_only(export):
    path, graph = export("op-gelu-erf", opset=17)
    with pytest.raises(LilouInputError, match="no exporter metadata"):
        eager_partition(load_onnx(path), graph)
    assert SampleSpec("op-gelu-erf", "op-gelu-erf", 0, "d17").backends() == ("tvm",)
    assert SampleSpec("op-gelu-erf", "op-gelu-erf", 0, "o23").backends() == ("eager", "tvm")


@pytest.mark.slow
def test_stacked_bidirectional_lstm_is_one_kernel_per_layer(export):
    path, graph = export("lin-lstm-bi2")
    oracle = eager_partition(load_onnx(path), graph)
    assert kernel_ops(graph, oracle) == [
        ["MatMul", "Add"], ["Transpose", "LSTM", "Transpose", "Reshape"],
        ["LSTM", "Transpose", "Reshape", "Transpose"], ["ReduceSum"]]
    # The replay (a GNN prior, no metadata) puts the layout views in the layer's kernel too.
    assert fused_edge_labels(graph, replay_eager_partition(graph)) == fused_edge_labels(graph, oracle)


@pytest.mark.slow
def test_decomposed_rnn_loop_is_one_kernel(export):
    path, graph = export("op-rnn-tanh")
    kernels = kernel_ops(graph, eager_partition(load_onnx(path), graph))
    assert len(kernels) == 1
    ops = Counter(kernels[0])
    # 6 time steps: the input projection, the recurrent MatMul of steps 2-6 (step 1's multiplies the zero
    # initial state: a constant subgraph) and a tanh per step.
    assert (ops["MatMul"], ops["Tanh"], ops["Concat"]) == (6, 6, 1)


@pytest.mark.slow
def test_recurrent_cost_formulas(export):
    _, graph = export("op-lstm-bi2")
    lstm = [graph.dag.nodes[n] for n in graph.runtime_nodes() if graph.dag.nodes[n]["op"] == "LSTM"]
    # 6 steps x batch 2 x 2 directions x (2*4*16*(I+16) + 2*4*16 + 18*16), I = 16 then 32.
    assert [n["flops"] for n in lstm] == [108_288, 157_440]
    _, graph = export("op-gru")
    (gru,) = [graph.dag.nodes[n] for n in graph.runtime_nodes() if graph.dag.nodes[n]["op"] == "GRU"]
    assert gru["flops"] == 6 * 2 * (2 * 3 * 16 * 32 + 2 * 3 * 16 + 14 * 16)
    # X (2x6x16 fp32, after the layout transpose), W and B once; R (1x48x16) once per time step.
    x, w, r, b = (6 * 2 * 16 * 4, 48 * 16 * 4, 48 * 16 * 4, 96 * 4)
    assert gru["bytes_read"] == x + w + 6 * r + b + 2 * 16 * 4


def test_splits_hold_out_ops_and_an_exporter_setting():
    assert split_of("op-softplus", "dynamo") == "test-op"
    assert split_of("op-softplus", "o20") == "test-op"
    assert split_of("op-gelu-erf", "o18") == "test-exporter"
    assert split_of("op-gelu-erf", "o20") == "train"
    assert split_of("op-selu", "o18") == "val"
    assert split_of("swin", "dynamo") == "test" and split_of("bert", "o18") == "train"
    corpus = corpus_catalogue()
    singles = [s for s in corpus if s.model.startswith("op-")]
    assert len(singles) == len(decomp.OPS) * len(CORPUS_EXPORTERS)
    assert len(corpus) - len(singles) == sum(len(s.sequences) for s in decomp.OPS.values()) * len(
        CORPUS_SEQUENCE_EXPORTERS)
    train = [s for s in corpus if s.split == "train"]
    assert train and not any(s.family.removeprefix("op-") in TEST_OPS or s.exporter in TEST_EXPORTERS
                             for s in train)
    assert {s.family for s in select(catalogue(), ["corpus"], ["test-op"])} == {f"op-{op}" for op in TEST_OPS}
    assert len({s.id for s in catalogue()}) == len(catalogue())


@pytest.mark.slow
def test_edge_misses_name_the_unfused_decomposition(export):
    path, graph = export("op-softplus", opset=18)
    truth = eager_partition(load_onnx(path), graph)
    item = LabelledGraph("op-softplus-v0-d18", "op-softplus", "d18", graph, truth)
    misses = edge_misses([item], lambda g: partition_from_fused_edges(g, [], "eager"))
    assert [(m["producer"], m["consumer"], m["oracle"], m["edges"]) for m in misses] == [
        ("Div", "Where", "fused", 1), ("Greater", "Where", "fused", 1), ("Mul", "Greater", "fused", 1),
        ("Mul", "Softplus", "fused", 1), ("Softplus", "Div", "fused", 1)]
    assert edge_misses([item], lambda g: truth) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lin-gelu-erf", "op-gelu-tanh"])
def test_replay_joins_the_gelu_decompositions_of_opset_18(export, name):
    path, graph = export(name, opset=18)
    oracle = eager_partition(load_onnx(path), graph)
    assert fused_edge_labels(graph, replay_eager_partition(graph)) == fused_edge_labels(graph, oracle)
    assert any(len(k.nodes) >= 5 for k in oracle.kernels)


@pytest.mark.slow
def test_replay_leaves_a_hand_written_gelu_split(tmp_path):
    """``0.5 * x * (1 + erf(x / sqrt 2))`` in model code is five aten calls, five eager kernels."""
    import math

    import torch

    from lilou.zoo.registry import BuiltModel

    module = decomp_nets.Lambda(lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2.0))))
    path = export_onnx(BuiltModel("hand-gelu", module, (torch.zeros(2, 6, 16),), ("x",), "output"),
                       tmp_path / "hand-gelu.onnx", opset=18)
    graph = build_graph(load_onnx(path), name="hand-gelu")
    oracle = eager_partition(load_onnx(path), graph)
    assert len(oracle.kernels) == 5
    assert not any(fused_edge_labels(graph, replay_eager_partition(graph)).values())


@pytest.mark.slow
def test_an_optimised_rnn_export_is_kept_one_kernel_without_its_weight_names(export):
    """The optimiser folds ``weight_hh_l0`` into ``val_<k>`` initialisers: the replay knows the unrolled layer by its
    shape (one weight read step after step), so its eager ceiling keeps the oracle's one cuDNN kernel whole."""
    from lilou.fusion.eager_replay import kept_whole, recurrent_weight_layer
    from lilou.fusion.unrolled_recurrence import unrolled_recurrent_matmuls

    path, graph = export("op-rnn-tanh", opset=18, optimize=True)
    oracle = eager_partition(load_onnx(path), graph)
    assert len(oracle.kernels) == 1
    matmuls = [n for n in graph.runtime_nodes() if graph.dag.nodes[n]["op"] == "MatMul"]
    assert len(matmuls) == 6 and all(recurrent_weight_layer(graph, m) is None for m in matmuls)
    # the input projection and the five steps that read the hidden state
    assert unrolled_recurrent_matmuls(graph) == frozenset(matmuls)
    fused = [edge for edge, joined in fused_edge_labels(graph, oracle).items() if joined]
    assert len(fused) == 48 and kept_whole(graph, fused) == fused


@pytest.mark.slow
def test_baddbmm_keeps_its_scale_in_the_gemm_and_a_hand_written_scale_is_a_kernel_of_its_own(tmp_path):
    """``torch.baddbmm(bias, q, k, alpha=a)`` (Bloom's ALiBi scores) is one cuBLAS call whose epilogue scales and adds;
    the dynamo exporter writes a MatMul, a Mul and an Add that pass ``val_<k>`` values. ``q @ k * a + bias`` in model
    code is three aten calls."""
    import torch

    from lilou.fusion.eager_replay import kept_whole
    from lilou.fusion.partition import runtime_edges
    from lilou.zoo.registry import BuiltModel

    inputs = (torch.zeros(4, 8, 8), torch.zeros(4, 8, 16), torch.zeros(4, 16, 8))
    calls = {"baddbmm": lambda bias, q, k: torch.baddbmm(bias, q, k, beta=1.0, alpha=0.125),
             "hand": lambda bias, q, k: torch.bmm(q, k) * 0.125 + bias}
    kept = {}
    for name, call in calls.items():
        path = export_onnx(BuiltModel(name, decomp_nets.Lambda(call), inputs, ("bias", "q", "k"), "output"),
                           tmp_path / f"{name}.onnx", opset=18)
        graph = build_graph(load_onnx(path), name=name)
        edges = runtime_edges(graph)
        kept[name] = [(graph.dag.nodes[u]["op"], graph.dag.nodes[v]["op"]) for u, v in kept_whole(graph, edges)]
    assert kept == {"baddbmm": [("MatMul", "Mul"), ("Mul", "Add")], "hand": [("Mul", "Add")]}
