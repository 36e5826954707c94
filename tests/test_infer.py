"""`lilou infer`: the DESIGN.md contract, every option, and bad input (exit 2, one line, no traceback)."""
from __future__ import annotations

import csv
import io
import json
import math
import re

import onnx
import pytest
from onnx import TensorProto, helper

from lilou.api import Predictor
from lilou.cli import main
from tests.conftest import REPO
from tests.onnx_builders import make_model, tensor, weight

EXAMPLE = str(REPO / "examples" / "resnet18.onnx")
JSON_FIELDS = {"model", "gpu", "mig", "backend", "batch", "precision", "precision_path", "precision_note", "tf32",
               "latency_ms", "interval_ms", "extrapolated_share", "fits", "kernels", "warnings"}
KERNEL_FIELDS = {"nodes", "type", "latency_ms", "interval_ms", "extrapolated", "flops", "bytes"}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def infer_json(capsys, *argv: str) -> dict:
    code, out, err = run(capsys, "infer", *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_json_has_exactly_the_design_fields(capsys):
    result = infer_json(capsys, EXAMPLE, "--gpu", "a10g")
    assert set(result) == JSON_FIELDS
    assert (result["model"], result["gpu"], result["mig"], result["backend"], result["batch"]) == (
        EXAMPLE, "a10g", None, "eager", 1)
    assert len(result["kernels"]) == 68  # rule-fused eager groups of ResNet-18 that launch a kernel
    assert all(set(k) == KERNEL_FIELDS for k in result["kernels"])
    assert math.isclose(result["latency_ms"], sum(k["latency_ms"] for k in result["kernels"]), rel_tol=1e-4)
    first = result["kernels"][0]
    assert first["nodes"] == ["node_conv2d"] and first["flops"] == 236_830_720 and first["type"].startswith("conv_")
    # Kernels the data never covered carry the fallback type, and a warning says how much time rests on them.
    by_op = {k["nodes"][0]: k["type"] for k in result["kernels"]}
    assert by_op["node_max_pool2d"] == "memory_fallback"
    note = next(w for w in result["warnings"] if "fallback" in w)
    assert "22 of 68 kernels" in note and "BatchNormalization" in note and "MaxPool" in note
    share = sum(k["latency_ms"] for k in result["kernels"] if k["type"] == "memory_fallback") / result["latency_ms"]
    assert f"{100 * share:.1f} %" in note


def test_mig_slice(capsys):
    whole = infer_json(capsys, EXAMPLE, "--gpu", "a100-80gb")
    slice_ = infer_json(capsys, EXAMPLE, "--gpu", "a100-80gb", "--mig", "1g.10gb")
    assert (slice_["gpu"], slice_["mig"]) == ("a100-sxm4-80gb", "1g.10gb")
    assert slice_["latency_ms"] > whole["latency_ms"]
    # the slice as rankings print it was "unknown GPU 'a100-80gb/1g.10gb'"
    assert infer_json(capsys, EXAMPLE, "--gpu", "a100-80gb/1g.10gb") == slice_
    code, _, err = run(capsys, "infer", EXAMPLE, "--gpu", "a100-80gb/1g.10gb", "--mig", "3g.40gb")
    assert code == 2 and err == ("lilou: error: 'a100-80gb/1g.10gb' names MIG profile '1g.10gb' and --mig names "
                                 "'3g.40gb'; give one\n")


def test_table_shows_total_count_top_kernels_and_bound(capsys):
    # Strict FP32 (as the NeuSight rows were measured): under TF32 the convolutions are no longer the largest share.
    code, out, _ = run(capsys, "infer", EXAMPLE, "--gpu", "a10g", "--top", "5", "--tf32", "off")
    assert code == 0
    out = " ".join(out.split())  # rich wraps titles and lines where the checkout's path is long
    total = infer_json(capsys, EXAMPLE, "--gpu", "a10g", "--tf32", "off")["latency_ms"]
    assert f"{total:.3f} ms" in out and "68 kernels" in out and "top 5 of 68 kernels" in out
    assert "conv_winograd" in out and ("compute" in out or "memory" in out)
    assert "fallback: 22 kernels" in out
    # ResNet-18 at batch 1 is launch-bound: most of the time the GPU waits for the host.
    share = float(re.search(r"waits for the host to launch kernels ([0-9.]+) %", out).group(1))
    assert 50 < share < 90 and "launch wait" in out
    # Where the time goes by category: ResNet-18 is convolutions and fallback kernels (BatchNorm, pooling).
    line = re.search(r"by category \(launch waits included\): ((?:[a-z_]+ [0-9.]+ %[,;]? ?)+)", out).group(1)
    shares = {name: float(value) for name, value in re.findall(r"(\w+) ([0-9.]+) %", line)}
    assert set(shares) == {"conv", "elementwise", "other", "gemm"} and max(shares, key=shares.get) == "conv"
    assert sum(shares.values()) == pytest.approx(100, abs=0.3)


def test_one_kernel_is_the_whole_time(capsys, tmp_path):
    """Shares are of the kernels' own sum: against the total (rounded to 4 decimals) a ReduceMean's 0.032024 ms
    read 100.1 %."""
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 128, 768])
    graph = helper.make_graph([helper.make_node("ReduceMean", ["x", "ax"], ["y"], keepdims=1)], "rm", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(__import__("numpy").array([-1], "int64"), "ax")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "rm.onnx")
    code, out, _ = run(capsys, "infer", str(tmp_path / "rm.onnx"), "--gpu", "a100-sxm4-80gb")
    assert code == 0 and "100.0 %" in out and "100.1 %" not in out


def test_a_negative_top_is_refused(capsys):
    code, out, err = run(capsys, "infer", EXAMPLE, "--gpu", "t4", "--top", "-1")
    assert code == 2 and out == "" and err == "lilou: error: --top -1: give the number of kernels the table lists, 0 or more\n"


def test_csv_one_row_per_kernel(capsys):
    code, out, err = run(capsys, "infer", EXAMPLE, "--gpu", "t4", "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 68
    assert set(rows[0]) == {"index", "ops", "nodes", "type", "category", "bound", "fallback", "latency_ms",
                            "launch_wait_ms", "gpu_ms", "work_ms", "flops", "bytes"}
    assert {(r["ops"], r["category"]) for r in rows if r["ops"] in ("Conv", "Reshape+Gemm", "MaxPool")} == {
        ("Conv", "conv"), ("Reshape+Gemm", "gemm"), ("MaxPool", "other")}
    assert all(r["category"] == "other" for r in rows if r["fallback"] == "1")
    assert {r["bound"] for r in rows} <= {"compute", "memory"}
    assert all(0 <= float(r["launch_wait_ms"]) <= float(r["latency_ms"]) for r in rows)
    assert float(rows[0]["launch_wait_ms"]) > 0  # the GPU is idle until the host has issued the first kernel
    # the GPU time in the running model is the kernel model's time alone scaled by the fitted back-to-back scale
    scale = Predictor().model.overhead.scale
    assert all(float(r["latency_ms"]) == pytest.approx(float(r["launch_wait_ms"]) + float(r["gpu_ms"]), abs=2e-6)
               and float(r["gpu_ms"]) == pytest.approx(scale * float(r["work_ms"]), abs=2e-6) for r in rows)
    assert "fallback" in err  # warnings go to stderr, stdout stays CSV


def test_plot_writes_a_png(capsys, tmp_path):
    target = tmp_path / "breakdown.png"
    code, out, _ = run(capsys, "infer", EXAMPLE, "--gpu", "a100-80gb", "--mig", "1g.10gb", "--plot", str(target))
    assert code == 0 and f"wrote {target}" in out
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tvm_backend_runs_and_says_what_it_was_fitted_on(capsys):
    result = infer_json(capsys, EXAMPLE, "--gpu", "a10g", "--backend", "tvm")
    assert result["backend"] == "tvm" and result["kernels"]
    assert any("eager" in w for w in result["warnings"])


def test_help_names_the_default_backend(capsys):
    with pytest.raises(SystemExit):
        main(["infer", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "eager = PyTorch eager, the runtime of the real latency measurements (default)" in text


def test_python_api_matches_the_cli(capsys):
    from lilou import Predictor

    result = Predictor(backend="eager").predict(EXAMPLE, gpu="a10g")
    assert result.to_json() == infer_json(capsys, EXAMPLE, "--gpu", "a10g")
    assert 0 < result.fallback_share < 1


@pytest.mark.slow
def test_weight_free_transformer(capsys, zoo_onnx):
    path = zoo_onnx("bert-base", batch=2, seq=64)  # stripped weights: no tensor bytes in the file
    result = infer_json(capsys, str(path), "--gpu", "l4")
    assert result["batch"] == 2
    types = {k["type"] for k in result["kernels"]}
    assert {"layernorm", "gemm_sgemm"} <= types and any(t.startswith("softmax") for t in types)


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(("argv", "message"), [
    (["--gpu", "nosuchgpu"], "unknown GPU 'nosuchgpu'"),
    (["--gpu", "a10g", "--mig", "1g.10gb"], "has no MIG support"),
    (["--gpu", "a100-80gb", "--mig", "9g.99gb"], "has no MIG profile '9g.99gb'; valid profiles: 1g.10gb"),
    (["--gpu", "a10g", "--batch", "0"], "--batch must be a positive integer"),
    (["--gpu", "a10g", "--shape", "input=1x3xax4"], "cannot parse --shape"),
    (["--gpu", "a10g", "--shape", "nonsense"], "cannot parse --shape"),
    (["--gpu", "a10g", "--batch", "4"], "fixed shapes baked in"),
    (["--gpu", "a10g", "--plot", "/nonexistent/folder/x.png"], "does not exist"),
    (["--gpu", "a10g", "--backend", "inductor"], "invalid choice"),
    (["--gpu", "a10g", "--launch-gap-us", "-3"], "--launch-gap-us -3: give 0 to 1000 microseconds"),
    (["--gpu", "a10g", "--launch-gap-us", "nan"], "--launch-gap-us nan: give 0 to 1000 microseconds"),
    ([], "--gpu"),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    code, out, err = run(capsys, "infer", EXAMPLE, *argv)
    assert code == 2 and out == ""
    assert err.startswith("lilou: error:") and err.count("\n") == 1 and "Traceback" not in err
    assert message in err


def test_launch_gap_of_the_host_composes_the_queue(capsys):
    """--launch-gap-us replaces NeuSight's 2023 hosts' issue time per kernel: 0 (CUDA-graph replay) leaves the
    kernels' GPU time alone, a gap longer than every kernel makes the model launch-bound (one gap per kernel, then
    the last kernel's GPU time); the default is the checkpoint's."""
    import numpy as np

    from lilou.api import Predictor
    from lilou.latency.composition.overhead import load_overhead, queue_shares

    default = Predictor()
    assert default.model.overhead.gap_ms == load_overhead(REPO / "checkpoints" / "e2e_overhead")["overhead"]["gap_ms"]
    prepared = default.prepare(EXAMPLE)
    device = default.predict(prepared, "a10g")
    assert device.latency_ms == infer_json(capsys, EXAMPLE, "--gpu", "a10g")["latency_ms"]
    no_gap = Predictor(launch_gap_ms=0.0).predict(prepared, "a10g")
    slow_host = Predictor(launch_gap_ms=1.0).predict(prepared, "a10g")
    from lilou.hardware import resolve_device

    work = default.model.kernel_work(prepared.kernels, [resolve_device("a10g")], 1, lambda d: _path(default, prepared, d))
    gpu = default.model.overhead.gpu_ms(work.work_ms)[:, 0]
    assert no_gap.latency_ms == round(float(gpu.sum()), 4) < device.latency_ms
    assert gpu.max() < 1.0
    assert slow_host.latency_ms == round(float(len(gpu) * 1.0 + gpu[-1]), 4)
    assert np.isclose(queue_shares(gpu, 1.0).sum(), len(gpu) + gpu[-1])
    assert infer_json(capsys, EXAMPLE, "--gpu", "a10g", "--launch-gap-us", "0")["latency_ms"] == no_gap.latency_ms


def _path(predictor, prepared, device):
    from lilou.api import _GraphPrecision

    return _GraphPrecision.of(prepared.graph, None, None).path(device)


def test_missing_file(capsys, tmp_path):
    code, _, err = run(capsys, "infer", str(tmp_path / "none.onnx"), "--gpu", "a10g")
    assert code == 2 and "no such file" in err


def test_unsupported_op_is_predicted_with_the_fallback_and_named(capsys, tmp_path):
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                        helper.make_node("LpNormalization", ["h"], ["y"], name="hm", axis=-1, p=2)],
                       [tensor("x", [4, 64])], [tensor("y", [4, 32])], [weight("w", [64, 32])])
    path = tmp_path / "lpnorm.onnx"
    onnx.save(model, path)
    result = infer_json(capsys, str(path), "--gpu", "a10g")
    # Whatever the fusion model groups it with, the kernel holding the unknown op uses the fallback.
    assert [k["type"] for k in result["kernels"] if "hm" in k["nodes"]] == ["memory_fallback"]
    assert any("unsupported op(s) LpNormalization" in w and "fallback" in w for w in result["warnings"])
    assert result["latency_ms"] > 0


@pytest.mark.parametrize("nodes", ["none", "views only"])
def test_graph_without_kernels_exits_2(capsys, tmp_path, nodes):
    if nodes == "none":
        model = make_model([], [tensor("x", [4, 64])], [tensor("x", [4, 64])])
    else:
        model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"], name="r")], [tensor("x", [4, 64])],
                           [tensor("y", [256])], [helper.make_tensor("s", TensorProto.INT64, [1], [256])])
    path = tmp_path / "empty.onnx"
    onnx.save(model, path)
    code, out, err = run(capsys, "infer", str(path), "--gpu", "a10g")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "empty graph" in err or "no node of the graph launches a GPU kernel" in err


def test_model_left_in_training_mode_prices_batch_statistics(tmp_path, capsys):
    """ResNet-18 left in train() (as PyTorch runs a module nobody called eval() on) and exported keeping its
    training mode: each of its 20 BatchNormalization nodes computes the batch's mean and variance, a second pass
    over its input, and the warnings say so. The eval-mode export has its BatchNorms folded into the convolutions."""
    import torch

    from lilou.zoo.registry import build

    built = build("resnet18", batch=8)
    paths = {}
    for mode in (torch.onnx.TrainingMode.PRESERVE, torch.onnx.TrainingMode.EVAL):
        paths[mode] = tmp_path / f"resnet18-{mode.name.lower()}.onnx"
        built.module.train()
        torch.onnx.export(built.module, built.args, paths[mode], dynamo=False, training=mode,
                          input_names=list(built.input_names), opset_version=18)
    trained = infer_json(capsys, str(paths[torch.onnx.TrainingMode.PRESERVE]), "--gpu", "t4")
    assert "20 BatchNormalization node(s) run in training mode" in " ".join(trained["warnings"])
    stem = next(k for k in trained["kernels"] if k["nodes"][0].endswith("embedder/normalization/BatchNormalization"))
    activation = 8 * 64 * 112 * 112 * 4  # the stem's output, FP32
    assert stem["bytes"] == 2 * activation + activation + 4 * 64 * 4 + 2 * 64 * 4  # X twice, Y, parameters, stats
    folded = infer_json(capsys, str(paths[torch.onnx.TrainingMode.EVAL]), "--gpu", "t4")
    assert not any("training mode" in w for w in folded["warnings"])
    assert not any("BatchNormalization" in n for k in folded["kernels"] for n in k["nodes"])


def test_dynamo_export_of_a_training_mode_batchnorm_is_priced_as_one(tmp_path, capsys):
    """The dynamo exporter writes a training-mode batch norm (``aten._native_batch_norm_legit_functional``) as an
    ONNX BatchNormalization without ``training_mode``; its name and metadata still say what PyTorch ran, and the
    prediction equals the TorchScript export's, which keeps ``training_mode=1``."""
    import torch

    module = torch.nn.BatchNorm2d(64).train()
    example = (torch.randn(16, 64, 64, 64),)
    paths = {"dynamo": tmp_path / "bn-dynamo.onnx", "torchscript": tmp_path / "bn-torchscript.onnx"}
    torch.onnx.export(module, example, paths["dynamo"], dynamo=True)
    torch.onnx.export(module, example, paths["torchscript"], dynamo=False, opset_version=18,
                      training=torch.onnx.TrainingMode.PRESERVE)
    capsys.readouterr()  # the dynamo exporter reports its steps on stdout
    (node,) = [n for n in onnx.load(paths["dynamo"]).graph.node if n.op_type == "BatchNormalization"]
    assert not any(a.name == "training_mode" and a.i for a in node.attribute)
    results = {name: infer_json(capsys, str(path), "--gpu", "a10g") for name, path in paths.items()}
    for result in results.values():
        assert "1 BatchNormalization node(s) run in training mode" in " ".join(result["warnings"])
        (kernel,) = result["kernels"]
        activation = 16 * 64 * 64 * 64 * 4
        assert 3 * activation < kernel["bytes"] <= 3 * activation + 6 * 64 * 4  # X twice, Y; parameters and statistics
    # kernel times (6 decimals), not the totals rounded to 4: two 0.12915 ms kernels round either way
    (dynamo,), (torchscript,) = results["dynamo"]["kernels"], results["torchscript"]["kernels"]
    assert dynamo["latency_ms"] == pytest.approx(torchscript["latency_ms"], rel=1e-4)
    eval_path = tmp_path / "bn-eval.onnx"
    torch.onnx.export(module.eval(), example, eval_path, dynamo=True)
    capsys.readouterr()
    assert not any("training mode" in w for w in infer_json(capsys, str(eval_path), "--gpu", "a10g")["warnings"])


def test_torchscript_mse_loss_prices_no_broadcast_shape_work(tmp_path, capsys):
    """The TorchScript exporter writes ``F.mse_loss``'s ``broadcast_tensors`` as ``ConstantOfShape`` + two
    ``Add`` of the inputs read only by the ``Shape`` that sizes an ``Expand`` of each input. Eager computes
    broadcast shapes without touching data and expands by views: the Adds compute nothing and the Expands
    launch nothing. What is left is (a - b), (a - b) again (the exporter writes the square as a product), their
    product and the mean, where each Add and Expand launched one before (8). Eager's ``mse_loss`` is two kernels (the
    squared difference, then the mean); the dynamo exporter's file is one aten call in the eager oracle's labels
    (``op-mse-loss``). The fusion model, which has no oracle for a TorchScript file, runs the two subtractions apart
    and the product with the mean: 3 kernels (the version-6 model: 4)."""
    import torch

    class MSE(torch.nn.Module):
        def forward(self, a, b):
            return torch.nn.functional.mse_loss(a, b)

    path = tmp_path / "mse.onnx"
    torch.onnx.export(MSE(), (torch.randn(128, 4096), torch.randn(128, 4096)), path, dynamo=False, opset_version=18)
    op_of = {n.name: n.op_type for n in onnx.load(path).graph.node}
    ops = list(op_of.values())
    assert ops.count("Add") == 2 and ops.count("Expand") == 2 and "ConstantOfShape" in ops
    result = infer_json(capsys, str(path), "--gpu", "a100-sxm4-80gb")
    kernel_ops = sorted(tuple(op_of[n] for n in k["nodes"]) for k in result["kernels"])
    assert kernel_ops == [("Mul", "ReduceMean"), ("Sub",), ("Sub",)]
    # two Subs and the Mul, one add per element of the mean and its division
    assert sum(k["flops"] for k in result["kernels"]) == 4 * 128 * 4096 + 1


def test_a_matrix_vector_product_is_priced_as_the_pass_over_its_matrix(tmp_path):
    """``A @ v`` with a 1-D ``v`` is eager's ``mv`` (cuBLAS's GEMV), a memory pass over the matrix that no source
    measured: the GEMM model, which saw only matrices, priced a 64 MB one at 12 % of the DRAM bandwidth on every GPU
    (0.29 ms on an A100-80GB). It goes to the memory-bound fallback, as a pass over its bytes. A 2-D product with one
    column stays a GEMM: eager's ``mm`` runs cuBLAS's SGEMM there, as NeuSight's linear rows with N = 1 measured."""
    predictor = Predictor()
    vector = tmp_path / "mv.onnx"
    onnx.save(make_model([helper.make_node("MatMul", ["a", "v"], ["y"])], [tensor("a", [4096, 4096]), tensor("v", [4096])],
                         [tensor("y", None)]), vector)
    column = tmp_path / "mm.onnx"
    onnx.save(make_model([helper.make_node("MatMul", ["a", "v"], ["y"])],
                         [tensor("a", [4096, 4096]), tensor("v", [4096, 1])], [tensor("y", None)]), column)
    mv, mm = (predictor.predict(path, gpu="a100-sxm4-80gb", tf32="off") for path in (vector, column))
    (kernel,) = mv.kernels
    assert kernel.type == "memory_fallback" and kernel.bytes == 4 * (4096 * 4096 + 2 * 4096)
    assert kernel.work_ms < kernel.bytes / 2039e9 * 1e3 * 1.5  # within 1.5x of the DRAM time at spec bandwidth
    assert any("MatMul (matrix-vector)" in w for w in mv.warnings)
    assert [k.type for k in mm.kernels] == ["gemm_sgemm"]


def test_a_flip_is_a_copy_kernel_of_its_own(tmp_path):
    """``torch.flip`` exports as a Slice with step -1; eager runs it as a copy (no view has a negative stride),
    where any other slice is a view. ``cumsum(x.flip(1), 1).flip(1)`` was one kernel (the first flip joined to the
    cumsum, the second launching nothing); it is three, and reads and writes the tensor three times."""
    from tests.onnx_builders import ints

    flip = dict(starts="start", ends="end", axes="axis", steps="step")
    nodes = [helper.make_node("Slice", ["x", *flip.values()], ["flipped"], name="flip"),
             helper.make_node("CumSum", ["flipped", "axis0"], ["summed"], name="cumsum"),
             helper.make_node("Slice", ["summed", *flip.values()], ["y"], name="flip_back")]
    constants = [ints("start", [-1]), ints("end", [-(2 ** 63)]), ints("axis", [1]), ints("step", [-1]),
                 helper.make_tensor("axis0", TensorProto.INT64, [], [1])]
    path = tmp_path / "reverse_cumsum.onnx"
    onnx.save(make_model(nodes, [tensor("x", [64, 4096])], [tensor("y", None)], constants), path)
    kernels = Predictor().predict(path, gpu="a10g").kernels
    assert [k.nodes for k in kernels] == [("flip",), ("cumsum",), ("flip_back",)]
    assert all(k.bytes >= 2 * 4 * 64 * 4096 for k in kernels)
    forward = tmp_path / "slice.onnx"  # a slice with a positive step stays a view of the op that reads it
    nodes[0] = helper.make_node("Slice", ["x", "start0", "end0", "axis", "step1"], ["flipped"], name="slice")
    onnx.save(make_model(nodes[:2], [tensor("x", [64, 4096])], [tensor("summed", None)],
                         [ints("start0", [0]), ints("end0", [2048]), ints("axis", [1]), ints("step1", [1]),
                          helper.make_tensor("axis0", TensorProto.INT64, [], [1])]), forward)
    assert len(Predictor().predict(forward, gpu="a10g").kernels) == 1


def test_cross_entropy_is_eager_s_log_softmax_and_nll_loss(tmp_path):
    """``F.cross_entropy`` exports as one SoftmaxCrossEntropyLoss (both exporters); eager runs its ONNX function's two
    ops, ``log_softmax`` and ``nll_loss``, one kernel each: it was one softmax kernel, a launch short."""
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["loss"], name="ce", reduction="mean")
    path = tmp_path / "ce.onnx"
    onnx.save(make_model([node], [tensor("scores", [16, 1000]), tensor("labels", [16], TensorProto.INT64)],
                         [tensor("loss", None)], opset=17), path)
    kernels = Predictor().predict(path, gpu="a10g").kernels
    assert [(k.ops, k.category) for k in kernels] == [(("LogSoftmax",), "softmax"),
                                                      (("NegativeLogLikelihoodLoss",), "other")]
    assert kernels[0].bytes == 2 * 4 * 16 * 1000  # the scores read, their log-probabilities written


def test_a_fit_leaves_room_for_the_cuda_context():
    """An eager process holds about 0.5 GiB of CUDA context before any tensor (``lilou llm``'s HF engine took it
    already): a model of 4.4 GiB was said to fit an A100 1g.5gb slice, which holds 4.75 GiB."""
    from lilou.caveats import memory_warning
    from lilou.graph.memory import fits_memory
    from lilou.hardware import resolve_device

    small = resolve_device("a100-sxm4-40gb", "1g.5gb")
    assert small.memory_gib == 4.75
    assert fits_memory((int(4.2 * 2**30), 0), small) and not fits_memory((int(4.4 * 2**30), 0), small)
    (line,) = memory_warning([small], [(int(4.4 * 2**30), 0)])
    assert "> 4.25 GiB (its 4.75 less 0.5 GiB of CUDA context)" in line


def test_plot_of_a_model_whose_name_is_not_utf8(capsys, tmp_path):
    """A model named in bytes that are not UTF-8 (from a Windows or legacy share; Python holds them as lone
    surrogates) crashed `--plot` with an internal TypeError in matplotlib's font layer, and nothing was printed."""
    model = tmp_path / "m\udcff\udcfe.onnx"
    model.write_bytes((REPO / "examples" / "resnet18.onnx").read_bytes())
    target = tmp_path / "breakdown.png"
    code, out, err = run(capsys, "infer", str(model), "--gpu", "a10g", "--plot", str(target))
    assert code == 0, err
    assert f"wrote {target}" in out and target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from lilou.report.mpl import title_name

    assert title_name(model) == "m\\xff\\xfe.onnx" and title_name("/x/ü.onnx") == "ü.onnx"  # the bytes, shown
