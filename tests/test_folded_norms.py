"""Batch norms an exporter folded into the convolution before them are put back, as eager PyTorch runs them: real
exports of a conv-BN-ReLU-conv-BN block, by the dynamo exporter with and without its optimiser and by TorchScript."""
from __future__ import annotations

import onnx
import pytest

from lilou.api import Predictor
from lilou.graph.dag import load_graph


def _block(training: bool):
    import torch

    module = torch.nn.Sequential(torch.nn.Conv2d(32, 64, 3, padding=1, bias=False), torch.nn.BatchNorm2d(64),
                                 torch.nn.ReLU(), torch.nn.Conv2d(64, 48, 3, padding=1), torch.nn.BatchNorm2d(48))
    return module.train(training), (torch.randn(8, 32, 56, 56),)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """{(training, optimize): path} of the same block exported by the dynamo exporter."""
    import torch

    folder = tmp_path_factory.mktemp("folded")
    paths = {}
    for training in (False, True):
        module, example = _block(training)
        for optimize in (False, True):
            paths[training, optimize] = folder / f"block-train{int(training)}-opt{int(optimize)}.onnx"
            torch.onnx.export(module, example, paths[training, optimize], dynamo=True, optimize=optimize)
    return paths


@pytest.mark.parametrize("training", [False, True])
def test_folded_batch_norms_are_restored_with_their_channels(exports, training):
    folded = exports[training, True]
    assert [n.op_type for n in onnx.load(folded).graph.node] == ["Conv", "Relu", "Conv"]  # the optimiser folded both
    graph = load_graph(folded)
    norms = [n for n in graph.nodes_in_order() if graph.dag.nodes[n]["op"] == "BatchNormalization"]
    assert [graph.dag.nodes[n]["inputs"][1].shape for n in norms] == [(64,), (48,)]
    assert [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()] == [
        "Conv", "BatchNormalization", "Relu", "Conv", "BatchNormalization"]
    note = next(w for w in graph.warnings if "folded" in w)
    assert note.startswith("2 BatchNormalization(s) that the exporter folded into the node before them")
    assert any("run in training mode" in w for w in graph.warnings) == training
    assert len([n for n in load_graph(folded, restore_folded=False).runtime_nodes()]) == 3


@pytest.mark.parametrize("training", [False, True])
def test_restored_export_is_predicted_like_the_unoptimised_one(exports, training):
    """The same kernels and bytes as the export that kept its batch norms (but the zero bias of 64 floats that the
    unoptimised export gives the first, bias-free convolution); training mode reads the input twice. The second
    convolution has a bias of its own (``3.bias``), which eager adds after cuDNN's convolution, before the norm."""
    predictor = Predictor()
    kept, restored = (predictor.predict(exports[training, optimize], gpu="t4") for optimize in (False, True))
    ops = [("Conv",), ("BatchNormalization",), ("Relu",), ("Conv",), ("Add",), ("BatchNormalization",)]
    assert [k.ops for k in kept.kernels] == ops and [k.ops for k in restored.kernels] == ops
    assert [k.bytes for k in restored.kernels] == [kept.kernels[0].bytes - 64 * 4] + [k.bytes for k in kept.kernels[1:]]
    assert restored.latency_ms == pytest.approx(kept.latency_ms, rel=1e-3)
    first_norm = kept.kernels[1]
    activation = 8 * 64 * 56 * 56 * 4
    assert first_norm.bytes - 4 * 64 * 4 == (3 if training else 2) * activation


def test_a_half_precision_model_gets_half_precision_batch_norm_parameters():
    """The restored parameters take the weight's type (FP16 here), so ONNX's type inference accepts the node."""
    from onnx import TensorProto, helper

    from lilou.graph.dag import build_graph
    from tests.onnx_builders import make_model, tensor

    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv")
    entry = node.metadata_props.add()
    entry.key, entry.value = "namespace", "m: BatchNorm2d/bn: aten._native_batch_norm_legit_no_training.default"
    weight = helper.make_tensor("w", TensorProto.FLOAT16, [16, 8, 3, 3], [0.0] * (16 * 8 * 9))
    model = make_model([node], [tensor("x", [2, 8, 10, 10], TensorProto.FLOAT16)], [tensor("y", None, TensorProto.FLOAT16)],
                       [weight])
    graph = build_graph(model)
    (norm,) = [n for n in graph.runtime_nodes() if graph.dag.nodes[n]["op"] == "BatchNormalization"]
    scale = graph.dag.nodes[norm]["inputs"][1]
    assert (scale.shape, scale.dtype) == ((16,), "float16")
    assert graph.dag.nodes[norm]["outputs"][0].shape == (2, 16, 8, 8)


def test_batch_norms_torchscript_folded_are_restored_and_plain_convolutions_are_not(tmp_path):
    """TorchScript's exporter folds eval-mode batch norms and keeps no metadata; the folded weight and bias are
    constants it named ``onnx::Conv_<n>``. A convolution with its own bias (``2.bias``) keeps its module names."""
    import torch

    module, example = _block(training=False)
    folded = tmp_path / "block-ts.onnx"
    torch.onnx.export(module, example, folded, dynamo=False)
    convs = [n for n in onnx.load(folded).graph.node if n.op_type == "Conv"]
    assert [n.op_type for n in onnx.load(folded).graph.node] == ["Conv", "Relu", "Conv"]
    assert all(name.startswith("onnx::Conv_") for n in convs for name in n.input[1:])
    graph = load_graph(folded)
    assert [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()] == [
        "Conv", "BatchNormalization", "Relu", "Conv", "BatchNormalization"]
    assert next(w for w in graph.warnings if "folded" in w).startswith("2 BatchNormalization(s) that the exporter folded")
    unfolded = tmp_path / "block-dynamo.onnx"
    torch.onnx.export(module, example, unfolded, dynamo=True, optimize=False)
    kept = Predictor().predict(unfolded, gpu="t4")
    restored = Predictor().predict(folded, gpu="t4")
    # TorchScript's fold hides that the second convolution had a bias of its own (``3.bias``, added apart in eager):
    # its folded bias is read as the norm's shift alone, as for the usual bias-free convolution before a norm
    (add,) = [k for k in kept.kernels if k.role == "bias add"]
    assert [k.ops for k in restored.kernels] == [k.ops for k in kept.kernels if k is not add]
    assert restored.latency_ms == pytest.approx(kept.latency_ms - add.latency_ms, rel=1e-2)

    plain = torch.nn.Sequential(torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(), torch.nn.Conv2d(64, 8, 1)).eval()
    torch.onnx.export(plain, example, tmp_path / "plain-ts.onnx", dynamo=False)
    assert [n.input[2] for n in onnx.load(tmp_path / "plain-ts.onnx").graph.node if n.op_type == "Conv"] == [
        "0.bias", "2.bias"]
    plain_graph = load_graph(tmp_path / "plain-ts.onnx")
    assert [plain_graph.dag.nodes[n]["op"] for n in plain_graph.runtime_nodes()] == ["Conv", "Relu", "Conv"]


def test_the_bias_a_fold_made_is_not_priced_on_the_convolution(tmp_path):
    """With trained statistics the fold writes a bias for the bias-free first convolution (the dynamo exporter's
    ``0.weight_bias``, TorchScript's ``onnx::Conv_<n>``): it is the batch norm's shift, which the restored norm adds,
    so the convolution is priced as eager runs it, without one (it was counted: +8 x 64 x 56 x 56 FLOPs). The second
    convolution's own bias (``3.bias``) stays with the dynamo exporter; TorchScript's names cannot tell it from a
    fold's, and a convolution before a batch norm has none in the usual model, so there it goes too."""
    import torch

    module, example = _block(training=False)
    torch.manual_seed(0)
    for norm in (module[1], module[4]):
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.5, 2)
        norm.weight.data.uniform_(0.5, 2)
        norm.bias.data.uniform_(-1, 1)
    paths = {kind: tmp_path / f"{kind}.onnx" for kind in ("kept", "dynamo", "torchscript")}
    torch.onnx.export(module, example, paths["kept"], dynamo=True, optimize=False)
    torch.onnx.export(module, example, paths["dynamo"], dynamo=True, optimize=True)
    torch.onnx.export(module, example, paths["torchscript"], dynamo=False)
    assert [list(n.input[1:]) for n in onnx.load(paths["dynamo"]).graph.node if n.op_type == "Conv"] == [
        ["0.weight", "0.weight_bias"], ["3.weight", "3.bias"]]

    def conv_flops(path):
        graph = load_graph(path)
        return [graph.dag.nodes[n]["flops"] for n in graph.runtime_nodes() if graph.dag.nodes[n]["op"] == "Conv"]

    kept = conv_flops(paths["kept"])
    assert kept == [2 * 32 * 9 * 8 * 64 * 56 * 56, (2 * 64 * 9 + 1) * 8 * 48 * 56 * 56]
    assert conv_flops(paths["dynamo"]) == kept
    assert conv_flops(paths["torchscript"]) == [kept[0], kept[1] - 8 * 48 * 56 * 56]


def test_folded_batch_norms_stay_folded_for_tvm(exports):
    """TVM compiles the file as written: no batch norm is put back for its kernels, which match its oracle's, and
    `lilou infer --backend tvm` prices the file's three nodes (a restored norm split TVM's Conv + ReLU group)."""
    pytest.importorskip("tvm")
    from lilou.fusion.backends.tvm import tvm_partition
    from lilou.fusion.predict import predict_partition

    folded = exports[False, True]
    graph = load_graph(folded, backend="tvm")
    assert [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()] == ["Conv", "Relu", "Conv"]
    assert not any("folded" in w for w in graph.warnings)
    predicted = [tuple(g.nodes) for g in predict_partition(graph, "tvm").kernels]
    assert predicted == [tuple(g.nodes) for g in tvm_partition(folded).kernels]
    assert [[graph.dag.nodes[n]["op"] for n in group] for group in predicted] == [["Conv", "Relu"], ["Conv"]]
    assert [k.ops for k in Predictor(backend="tvm").predict(folded, gpu="t4").kernels] == [("Conv", "Relu"), ("Conv",)]
    assert len(load_graph(folded).runtime_nodes()) == 5  # eager's graph keeps them restored


def test_fuse_json_flags_the_restored_batch_norms(exports, capsys):
    """The kernels name the restored batch norms, which the file does not hold; `synthetic_nodes` says so, and which
    convolution each was folded into (the oracle's groups, of the file's own nodes, have none)."""
    import json

    from lilou.cli import main

    folded = exports[False, True]
    assert main(["fuse", str(folded), "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    convolutions = [n.name for n in onnx.load(folded).graph.node if n.op_type == "Conv"]
    assert payload["synthetic_nodes"] == {f"{conv}__batch_norm": {"restored_from": conv} for conv in convolutions}
    listed = {n for k in payload["kernels"] for n in k["nodes"]}
    assert set(payload["synthetic_nodes"]) <= listed
