"""`lilou graph` on real zoo architectures against counts derived by hand from the papers."""
from __future__ import annotations

import json

import pytest

from lilou.cli import main
from lilou.errors import LilouInputError
from lilou.graph import load_graph


def resnet50_macs(image: int = 224, classes: int = 1000) -> int:
    """Multiply-accumulates of ResNet-50 v1.5 (stride on the 3x3 conv), conv and fc layers."""
    size = image // 2
    macs = size * size * 64 * 3 * 7 * 7  # stem conv, 112x112
    size //= 2  # max pool -> 56x56
    channels = 64
    for blocks, mid, out, stride in ((3, 64, 256, 1), (4, 128, 512, 2), (6, 256, 1024, 2), (3, 512, 2048, 2)):
        for block in range(blocks):
            s = stride if block == 0 else 1
            out_size = size // s
            macs += size * size * channels * mid            # 1x1 reduce
            macs += out_size * out_size * mid * mid * 9      # 3x3 (strided)
            macs += out_size * out_size * mid * out          # 1x1 expand
            if block == 0:
                macs += out_size * out_size * channels * out  # projection shortcut
            size, channels = out_size, out
    return macs + channels * classes


def bert_gemm_flops(layers: int, hidden: int, heads: int, ffn: int, seq: int, batch: int = 1) -> int:
    """FLOPs of the matrix products of a BERT encoder (projections, attention, FFN)."""
    tokens = batch * seq
    projections = 2 * tokens * hidden * (3 * hidden + hidden + 2 * ffn)
    attention = 2 * 2 * batch * heads * seq * seq * (hidden // heads)
    return layers * (projections + attention)


def flops_by_op(graph, ops: set[str]) -> int:
    return sum(graph.dag.nodes[n]["flops"] for n in graph.runtime_nodes() if graph.dag.nodes[n]["op"] in ops)


@pytest.mark.slow
def test_resnet50_totals_match_hand_count(zoo_onnx):
    graph = load_graph(zoo_onnx("resnet50", batch=1))
    hand = 2 * resnet50_macs()
    assert hand == pytest.approx(8.18e9, rel=0.01)  # the well-known ~4.1 GMAC
    conv_and_fc = flops_by_op(graph, {"Conv", "Gemm", "MatMul"})
    assert conv_and_fc == pytest.approx(hand, rel=0.005)  # biases add well under 0.5 %
    assert graph.totals()["flops"] == pytest.approx(hand, rel=0.02)
    assert not graph.warnings


@pytest.mark.slow
def test_bert_base_seq128_totals_match_hand_count(zoo_onnx):
    graph = load_graph(zoo_onnx("bert-base", batch=1, seq=128))
    hand = bert_gemm_flops(layers=12, hidden=768, heads=12, ffn=3072, seq=128)
    matmuls = flops_by_op(graph, {"MatMul", "Gemm"})
    assert matmuls == pytest.approx(hand, rel=0.005)
    assert graph.totals()["flops"] == pytest.approx(hand, rel=0.02)
    assert {d["op"] for _, d in graph.dag.nodes(data=True)} >= {"Softmax", "MatMul", "Gather"}
    assert not graph.warnings


@pytest.mark.slow
def test_stripped_export_keeps_shapes_and_costs(zoo_onnx):
    stripped = load_graph(zoo_onnx("bert-base", batch=2, seq=32, strip_weights=True))
    full = load_graph(zoo_onnx("bert-base", batch=2, seq=32, strip_weights=False))
    assert [t.shape for t in stripped.inputs] == [(2, 32)]
    assert stripped.totals() == full.totals()


def test_example_json_contract(capsys, tmp_path):
    status = main(["graph", "examples/resnet18.onnx", "--format", "json"])
    result = json.loads(capsys.readouterr().out)
    assert status == 0
    assert set(result["totals"]) == {"nodes", "flops", "bytes"}
    first = result["nodes"][0]
    assert {"name", "op", "inputs", "outputs", "flops", "bytes_read", "bytes_written"} <= set(first)
    runtime = [n for n in result["nodes"] if not n["constant"]]
    assert result["totals"]["nodes"] == len(runtime)
    assert result["totals"]["flops"] == sum(n["flops"] for n in runtime)
    # ResNet-18: 1.82 GMAC in conv + fc -> 3.64 GFLOPs.
    assert result["totals"]["flops"] == pytest.approx(3.64e9, rel=0.01)
    # the inputs it was read at, as the table's header shows them (the JSON had no word of them)
    assert result["inputs"] == [{"name": "pixel_values", "shape": [1, 3, 224, 224], "dtype": "float32"}]
    assert [(t["name"], t["shape"]) for t in result["outputs"]] == [("logits", [1, 1000])]


def test_example_table_shows_totals(capsys):
    assert main(["graph", "examples/resnet18.onnx"]) == 0
    out = capsys.readouterr().out
    assert "pixel_values=1x3x224x224" in out
    assert "3.64 GFLOPs" in out


def test_pyg_conversion_keeps_nodes_and_edges():
    from lilou.graph.pyg import NUM_EDGE_FEATURES, NUM_NODE_FEATURES, OP_VOCABULARY, to_pyg

    graph = load_graph("examples/resnet18.onnx")
    data = to_pyg(graph)
    assert data.num_nodes == graph.dag.number_of_nodes()
    assert data.x.shape == (graph.dag.number_of_nodes(), NUM_NODE_FEATURES)
    assert data.edge_index.shape == (2, graph.dag.number_of_edges())
    assert data.edge_attr.shape == (graph.dag.number_of_edges(), NUM_EDGE_FEATURES)
    assert data.x[:, : len(OP_VOCABULARY)].sum(dim=1).eq(1).all()  # exactly one op slot per node
    conv_slot = OP_VOCABULARY.index("Conv")
    convs = sum(1 for _, d in graph.dag.nodes(data=True) if d["op"] == "Conv")
    assert int(data.x[:, conv_slot].sum()) == convs
    order = {name: i for i, name in enumerate(data.node_names)}
    assert all(order[u] < order[v] for u, v in graph.dag.edges)  # file order is topological


@pytest.mark.slow
def test_batch_sets_a_dynamic_batch_export(zoo_onnx):
    path = zoo_onnx("resnet18", batch=2, dynamic_batch=True)
    one, four = load_graph(path, batch=1), load_graph(path, batch=4)
    assert [t.shape for t in four.inputs] == [(4, 3, 224, 224)]
    assert four.totals()["flops"] == 4 * one.totals()["flops"]
    assert not four.warnings
    with pytest.raises(LilouInputError, match="dynamic dimensions"):
        load_graph(path)  # the symbol must be set


@pytest.mark.slow
def test_dynamic_batch_bert_has_every_shape_at_any_batch(zoo_onnx):
    """The attention-mask broadcast once left 84 nodes with a stale symbolic batch at --batch 1."""
    fixed = load_graph(zoo_onnx("bert-base", batch=1, seq=128))
    path = zoo_onnx("bert-base", batch=2, seq=128, dynamic_batch=True)
    one, four = load_graph(path, batch=1), load_graph(path, batch=4)
    assert not one.warnings and not four.warnings
    assert one.totals() == fixed.totals()
    assert four.totals()["flops"] == 4 * one.totals()["flops"]


def test_derived_facts_are_computed_once_per_graph_and_not_shared_with_a_retyped_copy():
    """``ModelGraph.derived``: the aten calls the eager replay and the GNN's ceiling both ask for are found once
    per graph; a retyped copy (a new DAG) finds its own."""
    from pathlib import Path

    from lilou.fusion.eager_replay import aten_call_groups, replayed_eager_fused_edges
    from lilou.graph.retype import retyped

    graph = load_graph(str(Path(__file__).parent / "data" / "sdpa" / "sdpa-calls-dynamo.onnx"))
    calls: list[str] = []
    assert graph.derived("probe", lambda: calls.append("once") or 7) == graph.derived("probe", lambda: 8) == 7
    assert calls == ["once"]
    groups = aten_call_groups(graph)
    joins = graph.derived("aten_call_joins", lambda: None)
    assert joins is not None and len(groups) == 3  # the three scaled_dot_product_attention calls
    fused = replayed_eager_fused_edges(graph)
    assert graph.derived("aten_call_joins", lambda: None) is joins
    assert all(fused[u, v] for members in groups for u, v in graph.dag.subgraph(members).edges)
    half = retyped(graph, "fp16")
    assert half is not graph and half.derived("probe", lambda: 9) == 9
    assert aten_call_groups(half) == groups
