"""Eager kernels of ``F.scaled_dot_product_attention`` written as its math, and aten calls kept whole.

Fixtures: ``tests/data/sdpa/`` (``scripts/make_sdpa_fixtures.py``: three SDPA calls exported by TorchScript and by
dynamo), the TorchScript Llama decoder step ``tests/data/kv_cache/llama-past.onnx``, onnxruntime's T5 and
diffusers UNet fixtures (SDPA) and their classic-attention twins."""
from __future__ import annotations

from pathlib import Path

import pytest

from lilou.fusion.attention_decomposition import sdpa_decompositions
from lilou.fusion.eager_replay import rotate_half_concats
from lilou.fusion.export_names import fused_call_nodes, without_exporter_names
from lilou.fusion.predict import predict_partition
from lilou.graph.dag import build_graph, load_graph
from lilou.graph.loading import load_onnx

DATA = Path(__file__).parent / "data"
SDPA_TS, SDPA_DYNAMO = DATA / "sdpa" / "sdpa-calls-ts.onnx", DATA / "sdpa" / "sdpa-calls-dynamo.onnx"
PAST = DATA / "kv_cache" / "llama-past.onnx"
STEP = {"sequence_length": (1,), "past_sequence_length": (511,)}


def _computing_ops(graph, nodes) -> list[str]:
    views = {"Reshape", "Transpose", "Unsqueeze", "Squeeze", "Slice", "Expand", "Identity"}
    return sorted(graph.dag.nodes[n]["op"] for n in nodes if graph.dag.nodes[n]["op"] not in views)


def _launching(graph, partition) -> list[list[str]]:
    return [[graph.dag.nodes[n]["op"] for n in group.nodes] for group in partition.groups if group.launches]


def test_the_form_matched_without_names_is_the_call_the_dynamo_exporter_names():
    named = load_graph(SDPA_DYNAMO)
    calls = sorted(_computing_ops(named, call) for call in fused_call_nodes(named))
    assert len(calls) == 3
    nameless = build_graph(without_exporter_names(load_onnx(SDPA_DYNAMO)), name="nameless")
    assert fused_call_nodes(nameless) == []
    assert sorted(_computing_ops(nameless, m) for m in sdpa_decompositions(nameless)) == calls
    # the boolean mask's call: made 0 / -inf, added, softmax, NaN rows zeroed
    assert ["Add", "IsNaN", "MatMul", "MatMul", "Mul", "Mul", "Softmax", "Where", "Where"] in calls


@pytest.mark.parametrize("path", [SDPA_TS, SDPA_DYNAMO])
def test_each_sdpa_call_is_one_eager_kernel_from_either_exporter(path):
    graph = build_graph(without_exporter_names(load_onnx(path)), name=path.stem)
    groups = _launching(graph, predict_partition(graph, "eager"))
    attention = [g for g in groups if "Softmax" in g]
    assert len(attention) == 3 and all(g.count("MatMul") == 2 for g in attention)
    # q + 1, k + 1, q + 2, k + 2, the two adds of the results, and the boolean mask's Greater: calls of their own
    assert sorted(g for g in groups if "Softmax" not in g) == [["Add"]] * 6 + [["Greater"]]


def test_hand_written_attention_is_not_read_as_sdpa():
    """Attention that scales the scores after Q.K^T (BERT, GPT-2) or runs diffusers' classic AttnProcessor
    (baddbmm) is several kernels in eager."""
    for name in ("ort/bert.onnx", "ort/gpt2.onnx", "diffusion/unet.onnx"):
        assert sdpa_decompositions(load_graph(DATA / name)) == []


def test_a_torchscript_llama_step_runs_sdpa_rotate_half_and_rsqrt_as_eager_does():
    """Hugging Face's Llama with its default attention, exported by TorchScript: per layer one SDPA kernel (seven
    before session 33), rotate_half as a neg and a cat (one kernel before), and each RMS norm's rsqrt apart from
    the add before it and the multiply after it (one kernel of four before), as in eager."""
    graph = load_graph(PAST, batch=2, shapes=STEP)
    groups = _launching(graph, predict_partition(graph, "eager"))
    attention = [g for g in groups if "Softmax" in g]
    assert len(attention) == 2
    assert [sorted(op for op in g if op not in ("Reshape", "Transpose")) for g in attention] == [
        ["Add", "IsNaN", "MatMul", "MatMul", "Mul", "Mul", "Softmax", "Where", "Where"]] * 2
    assert groups.count(["Sqrt", "Div"]) == 5  # two norms per layer and the final one
    assert [[op for op in g if op != "Slice"] for g in groups].count(["Neg"]) == 4  # the slice it negates: a view
    assert len(rotate_half_concats(graph)) == 4
    assert not any("Concat" in g and len([op for op in g if op not in ("Slice", "Reshape", "Transpose")]) > 1
                   for g in groups)


def test_a_torchscript_llama_step_is_grouped_alike_at_every_batch():
    """The GNN reads sizes; with calls kept whole it no longer groups the rotary and cache ops by batch."""
    from lilou.api import Predictor

    predictor = Predictor()
    assert [len(predictor.prepare(PAST, batch=b, shapes=STEP).kernels.nodes) for b in (1, 2, 4)] == [90, 90, 90]


def test_t5_and_unet_with_sdpa_are_priced_with_one_attention_kernel_per_call():
    from lilou.api import Predictor

    predictor = Predictor()
    t5 = predictor.predict(DATA / "ort" / "t5.onnx", gpu="a10g")
    assert len(t5.kernels) == 53 and sum("Softmax" in k.ops for k in t5.kernels) == 2
    assert any(w.startswith("2 fused attention kernel(s)") for w in t5.warnings)
    unet = predictor.predict(DATA / "diffusion" / "unet-sdpa.onnx", gpu="a10g")
    classic = predictor.predict(DATA / "diffusion" / "unet.onnx", gpu="a10g")
    # the upsampler's nearest Resize and its Conv: two kernels (a library call alone, session 34); 217 and 273 groups,
    # each with 33 bias adds (every convolution has a bias, added apart in cuDNN's path), 21 group norms of three
    # kernels and the copies of 4 layer norms' permuted inputs (lilou/latency/composition/eager_calls.py); the
    # classic UNet's 4 cross-attentions copy their keys into heads before the bmm (tests/test_eager_calls.py)
    assert (len(unet.kernels), len(classic.kernels)) == (296, 352)
    assert sum("Softmax" in k.ops and k.ops.count("MatMul") == 2 for k in unet.kernels) == 8


def test_a_key_fed_straight_from_a_graph_input_is_no_sdpa():
    """Both scaled operands of Q.K^T read graph inputs, K untransposed: not SDPA's form (and no error)."""
    import onnx
    from onnx import TensorProto, helper

    def tensor(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    nodes = [helper.make_node("Mul", ["q", "c"], ["qs"]), helper.make_node("Mul", ["k", "c"], ["ks"]),
             helper.make_node("MatMul", ["qs", "ks"], ["s"]), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    graph = helper.make_graph(nodes, "g", [tensor("q", [2, 4, 8]), tensor("k", [2, 8, 4]), tensor("v", [2, 4, 8])],
                              [tensor("y", [2, 4, 8])], [helper.make_tensor("c", TensorProto.FLOAT, [], [0.5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    assert sdpa_decompositions(build_graph(onnx.shape_inference.infer_shapes(model))) == []
