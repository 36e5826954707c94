"""Recurrent layers: an ONNX LSTM/GRU/RNN node is one kernel priced by the recurrent model fitted on DeepBench."""
from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import helper

from lilou.api import Predictor
from lilou.data.kernel_table import load_rows
from lilou.graph.dag import build_graph
from lilou.hardware import resolve_device
from lilou.latency.kernel_model.recurrent import RecurrentModel, RecurrentShape
from tests.onnx_builders import make_model, tensor, weight


def lstm_model(steps: int, batch: int, hidden: int, op: str = "LSTM", directions: int = 1) -> onnx.ModelProto:
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    node = helper.make_node(op, ["x", "w", "r"], ["y"], name="cell", hidden_size=hidden,
                            direction="bidirectional" if directions == 2 else "forward")
    return make_model([node], [tensor("x", [steps, batch, hidden])],
                      [tensor("y", [steps, directions, batch, hidden])],
                      [weight("w", [directions, gates * hidden, hidden]), weight("r", [directions, gates * hidden, hidden])])


def test_an_lstm_layer_is_one_kernel_priced_by_the_recurrent_model(tmp_path: Path) -> None:
    path = tmp_path / "lstm.onnx"
    onnx.save(lstm_model(25, 16, 512), path)
    prediction = Predictor().predict(path, gpu="p100-pcie-16gb", tf32="off")
    (kernel,) = prediction.kernels
    assert kernel.type == "recurrent" and not kernel.fallback
    assert not any("fallback" in w and "LSTM" in w for w in prediction.warnings)
    device = resolve_device("p100-pcie-16gb")
    expected = RecurrentModel.load().work_ms(RecurrentShape("lstm", 25, 16, 1, 512, 512, 4), device.fp32_tflops,
                                             device.memory_bandwidth_gbs)
    assert kernel.alone_ms == pytest.approx(expected, rel=1e-9)
    # DeepBench measured this layer on the P100 (cuDNN, forward, FP32): 1.478 ms; the fit (42 % leave-one-GPU-out
    # MAPE on LSTMs) gives 0.95 ms, within a factor of 2.
    measured = load_rows("family = 'rnn' AND op = 'lstm' AND mode = 'forward' AND dtype = 'fp32' AND "
                         "gpu = 'p100-pcie-16gb' AND batch = 16 AND hidden = 512 AND timesteps = 25",
                         ["latency_ms"]).column("latency_ms").to_pylist()
    assert measured == [1.478] and 0.5 < kernel.alone_ms / measured[0] < 2


def test_directions_and_steps_scale_the_sequential_part() -> None:
    model = RecurrentModel.load()
    one = model.work_ms(RecurrentShape("gru", 50, 8, 1, 256, 256), 10.0, 700.0)
    both = model.work_ms(RecurrentShape("gru", 50, 8, 2, 256, 256), 10.0, 700.0)
    longer = model.work_ms(RecurrentShape("gru", 100, 8, 1, 256, 256), 10.0, 700.0)
    assert both == pytest.approx(2 * one, rel=1e-9) and longer == pytest.approx(2 * one, rel=1e-9)


def test_a_vanilla_rnn_is_never_priced_above_the_lstm_of_its_shape(tmp_path: Path) -> None:
    """Its rows measure hidden 1760-2560 only; their step floor (twice the LSTM's) put a 512-wide RNN at 1.5x the
    LSTM that does four times its GEMM work. Where it measured, the RNN keeps its own fit."""
    model, a10g = RecurrentModel.load(), resolve_device("a10g")
    peaks = (a10g.fp32_tflops, a10g.memory_bandwidth_gbs)
    small_rnn, small_lstm = (model.work_ms(RecurrentShape(cell, 100, 16, 1, 512, 512), *peaks) for cell in ("rnn", "lstm"))
    assert small_rnn == small_lstm  # the LSTM's price bounds it
    wide = RecurrentShape("rnn", 50, 16, 1, 1760, 1760)
    own = model._cell_ms(wide, "rnn", *peaks)
    assert model.work_ms(wide, *peaks) == own < model.work_ms(RecurrentShape("lstm", 50, 16, 1, 1760, 1760), *peaks)
    predictions = {}
    for op in ("RNN", "LSTM"):
        onnx.save(lstm_model(100, 16, 512, op), tmp_path / f"{op}.onnx")
        predictions[op] = Predictor().predict(tmp_path / f"{op}.onnx", gpu="a10g").latency_ms
    assert predictions["RNN"] <= predictions["LSTM"]


def test_the_fit_is_ahead_of_the_roofline_on_held_out_gpus() -> None:
    fit = json.loads((Path(__file__).resolve().parents[1] / "lilou" / "latency" / "kernel_model" /
                      "recurrent.json").read_text())
    for cell in ("lstm", "gru", "rnn"):
        row = fit["leave_one_gpu_out"][cell]
        assert row["gpus"] >= 5 and row["logo_mape"] < row["roofline_logo_mape"], cell


def test_a_graph_of_a_bidirectional_gru_has_its_kernel_spec() -> None:
    graph = build_graph(lstm_model(10, 4, 64, op="GRU", directions=2))
    from lilou.fusion.predict import predict_partition
    from lilou.latency.composition.end_to_end import describe_kernels

    kernels = describe_kernels(graph, predict_partition(graph, "eager"))
    assert [spec.recurrent for spec in kernels.specs] == [("gru", 10, 4, 2, 64, 64, 4)]
    assert not kernels.unique_fallback.any()


def test_a_two_layer_lstm_exported_by_dynamo_is_two_recurrent_kernels(tmp_path: Path) -> None:
    """``nn.LSTM(num_layers=2)`` is one ``aten.lstm`` call, which the dynamo exporter writes as one inlined
    function holding two ONNX LSTM nodes, and a ``Concat`` of both layers' final states. cuDNN runs each layer as
    its own kernels: the prediction has one recurrent kernel per layer, as for the TorchScript export of the same
    module, not one fallback kernel for the call (which priced it at 2.5 % of the layers' time)."""
    import torch

    module = torch.nn.LSTM(128, 256, num_layers=2, batch_first=True)
    example = (torch.randn(10, 512, 128),)
    paths = {"dynamo": tmp_path / "lstm-dynamo.onnx", "torchscript": tmp_path / "lstm-torchscript.onnx"}
    torch.onnx.export(module, example, paths["dynamo"], dynamo=True)
    torch.onnx.export(module, example, paths["torchscript"], dynamo=False, opset_version=18)
    predictor = Predictor()
    latency = {}
    for exporter, path in paths.items():
        prediction = predictor.predict(path, gpu="a100-sxm4-80gb")
        layers = [k for k in prediction.kernels if k.type == "recurrent"]
        assert len(layers) == 2 and sum(k.latency_ms for k in layers) > 0.99 * prediction.latency_ms, exporter
        assert sum(1 for k in layers for n in k.nodes if n.startswith(("node_LSTM", "/LSTM"))) == 2
        latency[exporter] = prediction.latency_ms
    # the two exports differ only in small kernels around the layers (the input transpose, the initial states)
    assert latency["dynamo"] == pytest.approx(latency["torchscript"], rel=1e-3)


def test_an_lstm_without_bias_counts_no_bias_flops() -> None:
    """nn.LSTM(bias=False) exports without the B input; its FLOPs were those of a biased layer (30,720 of 3,048,960
    at 20 steps, batch 3, hidden 64, input 32: 1 % over the layer's GEMMs and pointwise work)."""
    def flops(inputs: list[str], weights: list) -> int:
        node = helper.make_node("LSTM", inputs, ["y"], name="cell", hidden_size=64)
        model = make_model([node], [tensor("x", [20, 3, 32])], [tensor("y", [20, 1, 3, 64])], weights)
        return build_graph(model).dag.nodes["cell"]["flops"]

    w, r = weight("w", [1, 256, 32]), weight("r", [1, 256, 64])
    unbiased, biased = flops(["x", "w", "r"], [w, r]), flops(["x", "w", "r", "b"], [w, r, weight("b", [1, 512])])
    assert biased - unbiased == 20 * 3 * 2 * 4 * 64
    assert unbiased == 20 * 3 * (2 * 4 * 64 * (32 + 64) + 18 * 64)  # the gates' GEMMs and 18 pointwise ops per unit


def test_the_batch_of_a_time_major_recurrent_layer_is_its_second_axis(tmp_path: Path) -> None:
    """ONNX's LSTM reads X as [seq, batch, input] (layout 0), as PyTorch's nn.LSTM exports by default: --batch set
    the sequence length (a [seq, batch, 512] file was refused for its dynamic batch) and the report named the
    sequence length the batch."""
    node = helper.make_node("LSTM", ["x", "w", "r"], ["y"], name="cell", hidden_size=64)
    dynamic = make_model([node], [tensor("x", ["seq", "batch", 64])], [tensor("y", ["seq", 1, "batch", 64])],
                         [weight("w", [1, 256, 64]), weight("r", [1, 256, 64])])
    onnx.save(dynamic, tmp_path / "dynamic.onnx")
    onnx.save(lstm_model(20, 8, 64), tmp_path / "static.onnx")  # x: [20, 8, 64]
    predictor = Predictor()
    asked = predictor.predict(tmp_path / "dynamic.onnx", gpu="a10g", batch=8, shapes={"seq": (20,)})
    static = predictor.predict(tmp_path / "static.onnx", gpu="a10g")
    assert (asked.batch, static.batch) == (8, 8) and asked.latency_ms == static.latency_ms
    (kernel,) = predictor.predict(tmp_path / "static.onnx", gpu="a10g", batch=32).kernels
    model = RecurrentModel.load()
    device = resolve_device("a10g")
    expected = model.work_ms(RecurrentShape("lstm", 20, 32, 1, 64, 64), device.fp32_tflops, device.memory_bandwidth_gbs)
    assert kernel.alone_ms == pytest.approx(expected, rel=1e-9)  # 20 steps at batch 32, not 32 steps at batch 8
    batch_major = helper.make_node("LSTM", ["x", "w", "r"], ["y"], name="cell", hidden_size=64, layout=1)
    onnx.save(make_model([batch_major], [tensor("x", [8, 20, 64])], [tensor("y", [8, 20, 1, 64])],
                         [weight("w", [1, 256, 64]), weight("r", [1, 256, 64])], opset=14), tmp_path / "layout1.onnx")
    assert predictor.predict(tmp_path / "layout1.onnx", gpu="a10g", batch=4).batch == 4
