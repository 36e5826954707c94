"""A file exported without its parameters (``torch.onnx.export(..., export_params=False)``) feeds every weight as a
graph input. ``--batch`` set those weights' leading dimension too (a convolution of 8 output channels: shape
inference failed), and the weights were priced as activations that grow with the batch. Such a file is now read as
the export with its weights: the same kernels, FLOPs, bytes, memory and latency (lilou.graph.batch_axis)."""
from __future__ import annotations

import warnings

import onnx
import pytest
import torch
from onnx import helper

from lilou.api import Predictor
from lilou.errors import LilouInputError
from lilou.graph.batch_axis import (graph_unbatched_inputs, graph_weight_inputs, onnx_fixed_size_inputs,
                                    onnx_unbatched_inputs, unbatched_inputs)
from lilou.graph.dag import load_graph
from lilou.graph.memory import memory_needed
from lilou.zoo.registry import build
from tests.onnx_builders import make_model, tensor


def _export(name: str, path, params: bool, dynamic: bool, **overrides) -> str:
    built = build(name, **overrides)
    axes = {n: {0: "batch"} for n in built.input_names} if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(built.module.eval(), built.args, str(path), dynamo=False, export_params=params,
                          input_names=list(built.input_names), dynamic_axes=axes)
    return str(path)


@pytest.fixture(scope="module")
def bert_pair(tmp_path_factory):
    """A one-layer BERT (hidden 64, seq 16) exported by TorchScript with a dynamic batch, with and without weights."""
    folder = tmp_path_factory.mktemp("bert")
    options = dict(num_hidden_layers=1, hidden_size=64, num_attention_heads=4, intermediate_size=128, seq=16, batch=1)
    return (_export("bert-base", folder / "with.onnx", True, True, **options),
            _export("bert-base", folder / "without.onnx", False, True, **options))


@pytest.fixture(scope="module")
def resnet_pair(tmp_path_factory):
    """ResNet-18 at 64 pixels, static batch 1: TorchScript folds each batch norm into its convolution, and without
    weights feeds the folded weights (``onnx::Conv_<n>``) as inputs."""
    folder = tmp_path_factory.mktemp("resnet")
    return (_export("resnet18", folder / "with.onnx", True, False, image_size=64),
            _export("resnet18", folder / "without.onnx", False, False, image_size=64))


def _summary(prediction) -> tuple:
    return (prediction.latency_ms, [(k.nodes, k.type, k.flops, k.bytes, k.latency_ms) for k in prediction.kernels])


@pytest.mark.parametrize("batch", [1, 8])
def test_bert_without_its_weights_is_priced_as_with_them(bert_pair, batch) -> None:
    with_weights, without = bert_pair
    assert len(onnx.load(without).graph.input) == 1 + 12 and not onnx.load(without).graph.initializer
    predictor = Predictor()
    theirs = predictor.predict(with_weights, "a10g", batch=batch)
    ours = predictor.predict(without, "a10g", batch=batch)
    assert _summary(ours) == _summary(theirs)
    assert len(ours.kernels) == 20  # the weights' Transposes are folded, as the export with weights folded them
    assert any(w.startswith("12 input(s) (model.embeddings.word_embeddings.weight, ") and w.endswith(
        " and 8 more) do not hold the batch, read as weights fed at run time (as torch.onnx.export(..., "
        "export_params=False) feeds every parameter): read once per call whatever the batch, and --batch leaves them "
        "as they are") for w in ours.warnings)
    assert not any("hold the batch" in w for w in theirs.warnings)


@pytest.mark.parametrize("batch", [None, 4])
def test_resnet_without_its_weights_keeps_its_restored_batch_norms(resnet_pair, batch) -> None:
    with_weights, without = resnet_pair
    predictor = Predictor()
    theirs = predictor.predict(with_weights, "l4", batch=batch)
    ours = predictor.predict(without, "l4", batch=batch)
    assert _summary(ours) == _summary(theirs)
    assert sum(k.nodes[0].endswith("__batch_norm") for k in ours.kernels) == 20
    assert memory_needed(load_graph(without, batch=batch)) == memory_needed(load_graph(with_weights, batch=batch))


def test_batch_leaves_weight_inputs_alone(resnet_pair) -> None:
    """Before, ``--batch 4`` made the first convolution's weight [4, 3, 7, 7]: shape inference refused the file."""
    graph = load_graph(resnet_pair[1], batch=4)
    shapes = {t.name: t.shape for t in graph.inputs}
    assert shapes.pop("pixel_values") == (4, 3, 64, 64)
    assert len(shapes) == 26 and graph_unbatched_inputs(graph) == set(shapes)
    assert all(shape[0] != 4 for shape in shapes.values())


def _matmul(weight_dims, x_dims=("batch", 64)):
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    return make_model([node], [tensor("x", list(x_dims)), tensor("w", list(weight_dims))], [tensor("y", None)])


def test_which_inputs_hold_the_batch() -> None:
    # a dynamic batch: inputs whose batch axis is fixed do not take it, whatever their size
    assert onnx_unbatched_inputs(_matmul([64, 32]).graph, _matmul([64, 32]).graph.input) == {"w"}
    # every size fixed: those of another size than the first input's, or read only as parameters
    static = _matmul([64, 32], x_dims=(1, 64))
    assert onnx_unbatched_inputs(static.graph, static.graph.input) == {"w"}
    assert unbatched_inputs({"x": 1, "w": 1}, parameters=set()) == set()
    # an input nothing reads, dynamic or not, tells nothing: x keeps the batch
    unused = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                        [tensor("x", [4, 64]), tensor("w", [64, 32]), tensor("unused", ["weird", 7])], [tensor("y", None)])
    assert onnx_unbatched_inputs(unused.graph, unused.graph.input) == {"w"}
    assert unbatched_inputs({"w": 1, "x": 1}, parameters={"w"}) == {"w"}  # a conv weight of one output channel
    assert unbatched_inputs({"w": 64}, parameters={"w"}) == set()  # nothing tells a batch apart: as before


def test_a_weight_fed_as_an_input_is_priced_as_an_initializer(tmp_path) -> None:
    """An FP32 GEMV 1x4096 by 4096x2048, the weight an initializer or an input: one price (they differed by 15 %
    on an L4 in FP16, the input's bytes scaled on the size ladder as an activation's)."""
    import numpy as np
    from onnx import numpy_helper

    weight = numpy_helper.from_array(np.zeros((4096, 2048), np.float32), "w")
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    as_input = make_model([node], [tensor("x", [1, 4096]), tensor("w", [4096, 2048])], [tensor("y", None)])
    as_initializer = make_model([node], [tensor("x", [1, 4096])], [tensor("y", None)], initializers=[weight])
    onnx.save(as_input, tmp_path / "input.onnx")
    onnx.save(as_initializer, tmp_path / "initializer.onnx")
    predictor = Predictor()
    for batch in (None, 4):
        priced = [predictor.predict(str(tmp_path / f), "l4", batch=batch) for f in ("input.onnx", "initializer.onnx")]
        assert _summary(priced[0]) == _summary(priced[1])


def test_a_dynamo_export_without_weights_says_how_to_export(tmp_path) -> None:
    """The dynamo exporter with export_params=False lists neither the weights nor inputs for them: the file cannot
    run anywhere, and the error says which export would."""
    built = build("resnet18", image_size=64)
    path = tmp_path / "dynamo.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(built.module.eval(), built.args, str(path), dynamo=True, export_params=False, verbose=False)
    with pytest.raises(LilouInputError, match=r"which no node, input or initializer provides; torch.onnx.export\(\.\.\., "
                                              r"dynamo=True, export_params=False\) writes no weights"):
        load_graph(str(path))


def test_an_input_of_another_size_beside_the_files_weights_is_a_second_activation(tmp_path) -> None:
    """A file with weights of its own that also takes a [64, 32] matrix: not the batch (``--batch 2`` left it as it
    is; it was set to [2, 32] before, and the MatMul refused), but an operand eager multiplies as it is given, not a
    weight with a bias to make one aten.linear of: the MatMul and the Add stay two kernels."""
    from tests.onnx_builders import weight

    nodes = [helper.make_node("MatMul", ["x", "m"], ["s"], name="scores"),
             helper.make_node("Add", ["s", "b"], ["y"], name="bias")]
    model = make_model(nodes, [tensor("x", [4, 64]), tensor("m", [64, 32])], [tensor("y", None)], [weight("b", [32])])
    onnx.save(model, tmp_path / "second.onnx")
    graph = load_graph(str(tmp_path / "second.onnx"), batch=2)
    assert graph_unbatched_inputs(graph) == {"m"} and graph_weight_inputs(graph) == set()
    assert {t.name: t.shape for t in graph.inputs} == {"x": (2, 64), "m": (64, 32)}
    assert graph.dag.nodes["scores"]["flops"] == 2 * 2 * 64 * 32 and not graph.dag.nodes["scores"]["constant"]
    assert "1 input(s) (m) do not hold the batch, their size is not the batch's: read once per call whatever the " \
           "batch, and --batch leaves them as they are" in graph.warnings
    kernels = Predictor().predict(str(tmp_path / "second.onnx"), "l4", batch=2).kernels
    assert [k.nodes for k in kernels] == [("scores",), ("bias",)]


def test_batch_sets_the_dimension_it_is_named_by_in_every_input() -> None:
    """Silero VAD's ``state`` is ``[2, batch, 128]``: ``--batch 2`` set its leading 2 (to 2, by chance; ``--batch 1``
    made it [1, batch, 128]) and left its ``batch`` unset, so the file was refused. The batch's name is that size in
    every input, as ``--shape batch=2`` sets it, and ``state`` holds the batch (in its second axis)."""
    from pathlib import Path

    silero = str(Path(__file__).parent / "data" / "control_flow" / "silero_vad_16k_op15.onnx")
    model = onnx.load(silero, load_external_data=False)  # a weight-stripped export
    unbatched = onnx_unbatched_inputs(model.graph, model.graph.input)
    assert unbatched == {"state"} and onnx_fixed_size_inputs(model.graph, model.graph.input, unbatched) == set()
    for batch in (1, 2):
        graph = load_graph(silero, batch=batch, shapes={"sequence": (512,)})
        assert {t.name: t.shape for t in graph.inputs} == {"input": (batch, 512), "state": (2, batch, 128), "sr": ()}
        assert not any("hold the batch" in w for w in graph.warnings)
        predictor = Predictor()
        by_batch = predictor.predict(silero, "a10g", batch=batch, shapes={"sequence": (512,)})
        by_name = predictor.predict(silero, "a10g", shapes={"batch": (batch,), "sequence": (512,)})
        assert _summary(by_batch) == _summary(by_name) and by_batch.batch == batch
