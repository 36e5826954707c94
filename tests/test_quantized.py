"""Quantized ONNX graphs (QDQ, QOperator, dynamic) are priced as the INT8 model they describe.

The graphs in tests/data/quantized are real: a Hugging Face ResNet (basic blocks, 64x64 images) and a two-layer BERT,
exported by torch.onnx (TorchScript) and quantized by onnxruntime 1.20's quantization tool in its three forms
(scripts/make_quantized_fixtures.py), weights stripped. The FP8 and weight-only graphs are built here: onnxruntime
1.20's FP8 calibration does not run beside this onnx.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lilou.graph import build_graph
from tests.onnx_builders import make_model, tensor

QUANTIZED = Path(__file__).resolve().parent / "data" / "quantized"


@pytest.fixture(scope="module")
def predictor():
    from lilou.api import Predictor

    return Predictor()


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
def test_a_quantized_resnet_runs_its_convolutions_in_int8(predictor, form: str) -> None:
    float_model = predictor.predict(QUANTIZED / "resnet.onnx", gpu="t4")
    quantized = predictor.predict(QUANTIZED / f"resnet-{form}.onnx", gpu="t4")
    assert quantized.precision == "int8"
    convs = [k for k in quantized.kernels if k.category == "conv"]
    assert len(convs) == 20 and {k.type for k in convs} == {"conv_int8_tensor"}
    float_convs = [k for k in float_model.kernels if k.category == "conv"]
    # The quantized convolutions add the bias the batch norms were folded into (one add per output element of the
    # 20, 101,376 in all), as an INT8 runtime runs them; the float export's are eager's, bias-free, with their batch
    # norms restored after them (the fold's bias is the norm's shift).
    assert sum(k.flops for k in convs) == sum(k.flops for k in float_convs) + 101_376
    # The stem convolution reads and writes INT8 (1x3x64x64 in, 1x32x32x32 out, 32x3x7x7 weights), its bias INT32;
    # the float export's reads and writes the same tensors in FP32, without the bias.
    stem = next(k for k in convs if "embedder/convolution/Conv" in k.nodes[0])
    assert stem.bytes == 3 * 64 * 64 + 32 * 3 * 7 * 7 + 4 * 32 + 32 * 32 * 32
    assert float_convs[0].bytes == 4 * (3 * 64 * 64 + 32 * 3 * 7 * 7 + 32 * 32 * 32)
    assert not any("unsupported op" in w or "unknown shape" in w for w in quantized.warnings)


def test_quantize_and_dequantize_fold_into_the_ops_beside_them(predictor) -> None:
    """Only the quantize of the float input is a kernel of its own (a conversion); the pair before the graph's
    float output goes with it (the residual add writes the float output), as an INT8 runtime runs it."""
    qdq = predictor.predict(QUANTIZED / "resnet-qdq.onnx", gpu="t4")
    assert len(qdq.kernels) == 30  # 20 convolutions, 8 residual adds, the max pool, the input's quantize
    conversions = [k.nodes for k in qdq.kernels if any("uantize" in n for n in k.nodes)]
    assert conversions == [("pixel_values_QuantizeLinear",)]
    assert qdq.kernels[-1].nodes == ("/model/encoder/stages.3/layers.1/Add",)
    assert any("quantized graph (54 DequantizeLinear, 30 QuantizeLinear): priced as the model it quantizes" in w
               for w in qdq.warnings)
    qoperator = predictor.predict(QUANTIZED / "resnet-qoperator.onnx", gpu="t4")
    # QOperator ends in its own dequantize of the last QLinearAdd's INT8 output: a conversion kernel.
    assert [k.nodes for k in qoperator.kernels if any("uantize" in n for n in k.nodes)] == [
        ("pixel_values_QuantizeLinear",), ("input.180_DequantizeLinear",)]


def test_an_int8_resnet_is_priced_faster_than_its_float_export_where_compute_bound(predictor) -> None:
    shape = {"pixel_values": (64, 3, 224, 224)}
    float_model = predictor.predict(QUANTIZED / "resnet.onnx", gpu="t4", shapes=shape)
    quantized = predictor.predict(QUANTIZED / "resnet-qdq.onnx", gpu="t4", shapes=shape)
    float_convs = sum(k.latency_ms for k in float_model.kernels if k.category == "conv")
    int8_convs = sum(k.latency_ms for k in quantized.kernels if k.category == "conv")
    assert int8_convs < float_convs / 3  # T4: 130 INT8 tensor TOPS against 8 FP32 TFLOPS
    assert quantized.latency_ms < float_model.latency_ms / 3


@pytest.mark.parametrize(("form", "note"), [
    ("qdq", "92 DequantizeLinear, 71 QuantizeLinear"),
    ("qoperator", "8 DequantizeLinear, 22 QLinearAdd, 16 QLinearMatMul, 6 QLinearMul, 2 QLinearSoftmax, "
                  "7 QuantizeLinear"),
])
def test_a_quantized_bert_has_the_kernels_of_its_export_in_int8(predictor, form: str, note: str) -> None:
    float_model = predictor.predict(QUANTIZED / "bert.onnx", gpu="t4")
    quantized = predictor.predict(QUANTIZED / f"bert-{form}.onnx", gpu="t4")
    assert len(quantized.kernels) == len(float_model.kernels) == 41
    assert Counter(k.type for k in quantized.kernels)["gemm_int8_tensor"] == 16
    assert Counter(k.category for k in quantized.kernels) == Counter(k.category for k in float_model.kernels)
    assert any(f"quantized graph ({note})" in w for w in quantized.warnings)
    assert not any("unsupported op" in w or "unknown shape" in w for w in quantized.warnings)


def test_dynamic_quantization_prices_the_range_and_the_int32_output(predictor) -> None:
    dynamic = predictor.predict(QUANTIZED / "bert-dynamic.onnx", gpu="t4")
    assert dynamic.precision == "int8"
    ranges = [k for k in dynamic.kernels if k.nodes[0].endswith("/lilou_range")]
    assert len(ranges) == 8  # one per DynamicQuantizeLinear, beside its conversion kernel
    # the note says what is priced (it said every quantize was folded into the op beside it, as QDQ's are)
    note = next(w for w in dynamic.warnings if "quantized graph" in w)
    assert note.startswith("dynamically quantized graph (") and "folded" not in note
    query = next(k for k in dynamic.kernels if k.nodes == ("/model/encoder/layer.0/attention/self/query/MatMul_quant",))
    # UINT8 activations 2x64x256, INT8 weights 256x256, INT32 output 2x64x256
    assert query.bytes == 2 * 64 * 256 + 256 * 256 + 4 * 2 * 64 * 256
    assert query.type == "gemm_int8_tensor"
    # The attention's two matmuls per layer stay float, and are priced so; the graph mixes precisions and says so.
    gemms = Counter(k.type for k in dynamic.kernels if k.category == "gemm")
    assert gemms == {"gemm_int8_tensor": 12, "gemm_sgemm": 4}
    assert any("mix precisions: each is priced on the unit of the type it reads" in w for w in dynamic.warnings)


def test_a_layer_left_in_float_is_priced_in_float(predictor) -> None:
    """``resnet-qdq-partial`` keeps its stem convolution in float (onnxruntime's ``nodes_to_exclude``): that
    convolution is priced as the float export's (with the folded bias the float export's restored batch norm adds
    instead: 32 floats read, one add per output), the 19 others as the fully quantized model's."""
    shape = {"pixel_values": (64, 3, 224, 224)}
    partial = predictor.predict(QUANTIZED / "resnet-qdq-partial.onnx", gpu="t4", shapes=shape)
    full = predictor.predict(QUANTIZED / "resnet-qdq.onnx", gpu="t4", shapes=shape)
    float_model = predictor.predict(QUANTIZED / "resnet.onnx", gpu="t4", shapes=shape)
    assert partial.precision == "int8"

    def convs(prediction):
        return {k.nodes[0]: k for k in prediction.kernels if k.category == "conv"}

    stem = "/model/embedder/embedder/convolution/Conv"
    assert convs(partial)[stem].latency_ms == pytest.approx(convs(float_model)[stem].latency_ms, rel=5e-3)
    assert convs(partial)[stem].bytes == convs(float_model)[stem].bytes + 4 * 32
    assert convs(partial)[stem].flops == convs(float_model)[stem].flops + 64 * 32 * 112 * 112
    assert convs(partial)[stem].type != "conv_int8_tensor"
    # its 90 % interval and extrapolation flag are those of an FP32 convolution, not of an INT8 one
    assert convs(partial)[stem].interval_ms == pytest.approx(convs(float_model)[stem].interval_ms, rel=5e-3)
    assert convs(partial)[stem].extrapolated == convs(float_model)[stem].extrapolated
    others = {name: k.latency_ms for name, k in convs(partial).items() if name != stem}
    assert len(others) == 19 and others == {name: k.latency_ms for name, k in convs(full).items() if name != stem}
    assert any("mix precisions" in w for w in partial.warnings)


def test_without_the_rewrite_the_quantized_ops_were_unsupported() -> None:
    from lilou.graph.dag import load_graph

    plain = load_graph(QUANTIZED / "resnet-qoperator.onnx", restore_folded=False)
    assert {"QLinearConv", "QLinearAdd", "QuantizeLinear"} <= set(plain.unsupported_ops)


def _qdq_matmul(kind: int, weight_kind: int, quantize_activation: bool = True):
    """x (float, 8x256) -> [Q -> DQ] -> MatMul with DQ(weight 256x512) -> y, the pattern NVIDIA ModelOpt writes."""
    point = numpy_helper.from_array(np.zeros((), dtype=helper.tensor_dtype_to_np_dtype(kind)), "point") \
        if kind != TensorProto.FLOAT8E4M3FN else helper.make_tensor("point", kind, [], [0.0])
    weight_point = helper.make_tensor("w_point", weight_kind, [], [0])
    initializers = [numpy_helper.from_array(np.array(0.1, dtype=np.float32), "scale"), point, weight_point,
                    helper.make_tensor("w", weight_kind, [256, 512], [0] * (256 * 512))]
    nodes = [helper.make_node("DequantizeLinear", ["w", "scale", "w_point"], ["w_float"])]
    if quantize_activation:
        nodes += [helper.make_node("QuantizeLinear", ["x", "scale", "point"], ["x_q"], name="x_quantize"),
                  helper.make_node("DequantizeLinear", ["x_q", "scale", "point"], ["x_dq"]),
                  helper.make_node("MatMul", ["x_dq", "w_float"], ["y"], name="matmul")]
    else:
        nodes.append(helper.make_node("MatMul", ["x", "w_float"], ["y"], name="matmul"))
    return make_model(nodes, [tensor("x", [8, 256])], [tensor("y", [8, 512])], initializers, opset=21)


def test_an_fp8_qdq_matmul_is_priced_in_fp8(predictor) -> None:
    graph = build_graph(_qdq_matmul(TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FN), name="fp8")
    matmul = graph.dag.nodes["matmul"]
    assert [t.dtype for t in matmul["inputs"]] == ["float8_e4m3fn", "float8_e4m3fn"]
    assert matmul["bytes_read"] == 8 * 256 + 256 * 512
    assert matmul["bytes_written"] == 4 * 8 * 512  # the dequantized float output


def test_weight_only_quantization_keeps_float_math_with_int8_weights() -> None:
    from lilou.graph.precision import model_precision

    graph = build_graph(_qdq_matmul(TensorProto.INT8, TensorProto.INT8, quantize_activation=False), name="w8")
    matmul = graph.dag.nodes["matmul"]
    assert [t.dtype for t in matmul["inputs"]] == ["float32", "int8"]
    assert model_precision(graph).precision == "fp32"
    assert matmul["bytes_read"] == 4 * 8 * 256 + 256 * 512


def test_a_quantized_graph_input_is_read_without_a_kernel(predictor, tmp_path: Path) -> None:
    """An image fed as UINT8 and dequantized before the first convolution: the dequantize folds into it."""
    initializers = [numpy_helper.from_array(np.array(0.02, dtype=np.float32), "scale"),
                    numpy_helper.from_array(np.array(128, dtype=np.uint8), "point"),
                    numpy_helper.from_array(np.array(0, dtype=np.int8), "w_point"),
                    numpy_helper.from_array(np.zeros((16, 3, 3, 3), dtype=np.int8), "w")]
    nodes = [helper.make_node("DequantizeLinear", ["image", "scale", "point"], ["image_float"]),
             helper.make_node("DequantizeLinear", ["w", "scale", "w_point"], ["w_float"]),
             helper.make_node("Conv", ["image_float", "w_float"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    model = make_model(nodes, [tensor("image", [1, 3, 32, 32], TensorProto.UINT8)], [tensor("y", [1, 16, 32, 32])],
                       initializers)
    onnx.save(model, tmp_path / "uint8-input.onnx")
    graph = build_graph(model, name="uint8-input")  # rewrites ``model`` in place
    conv = graph.dag.nodes["conv"]
    assert [t.dtype for t in conv["inputs"]] == ["uint8", "int8"]
    prediction = predictor.predict(tmp_path / "uint8-input.onnx", gpu="a100-80gb")
    # One kernel: the float stand-in of the input is a cast to its own type (a view), grouped with the convolution; it
    # takes the place, and the name, of the file's (unnamed, first) dequantize.
    assert [k.nodes for k in prediction.kernels] == [("DequantizeLinear_0", "conv")]
    assert prediction.precision == "int8" and prediction.kernels[0].type == "conv_int8_tensor"


def test_a_weight_held_by_a_constant_node_is_read_quantized() -> None:
    """A ``Constant`` node's INT8 weight (no initializer, no value info) dequantized into a convolution."""
    nodes = [helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(np.zeros((8, 3, 3, 3), np.int8))),
             helper.make_node("Constant", [], ["scale"], value=numpy_helper.from_array(np.array(0.1, np.float32))),
             helper.make_node("DequantizeLinear", ["w", "scale"], ["w_float"]),
             helper.make_node("Conv", ["x", "w_float"], ["y"], name="conv")]
    graph = build_graph(make_model(nodes, [tensor("x", [1, 3, 16, 16])], [tensor("y", None)], opset=21))
    conv = graph.dag.nodes["conv"]
    assert [t.dtype for t in conv["inputs"]] == ["float32", "int8"]
    assert conv["bytes_read"] == 4 * 3 * 16 * 16 + 8 * 3 * 3 * 3


def test_an_int32_accumulator_keeps_its_type_through_a_reshape() -> None:
    """``ConvInteger`` writes INT32; a Reshape of it (its value infos INT32, the graph's output INT32) stays INT32,
    and the float graph written for shape inference does not clash with the file's stated types."""
    nodes = [helper.make_node("ConvInteger", ["x", "w"], ["y"], name="conv"),
             helper.make_node("Reshape", ["y", "shape"], ["r"], name="reshape")]
    initializers = [numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.int8), "w"),
                    numpy_helper.from_array(np.array([1, -1], np.int64), "shape")]
    model = make_model(nodes, [tensor("x", [1, 3, 8, 8], TensorProto.UINT8)],
                       [tensor("r", [1, 144], TensorProto.INT32)], initializers, opset=17)
    model.graph.value_info.append(tensor("y", [1, 4, 6, 6], TensorProto.INT32))
    graph = build_graph(model, name="conv-integer")
    conv, reshape = graph.dag.nodes["conv"], graph.dag.nodes["reshape"]
    assert [t.dtype for t in conv["inputs"]] == ["uint8", "int8"]
    assert conv["outputs"][0].dtype == "int32" and reshape["outputs"][0].dtype == "int32"
    assert conv["flops"] == 2 * 4 * 6 * 6 * 3 * 3 * 3


def test_a_bitsandbytes_4bit_matmul_is_a_float_matmul_reading_four_bit_weights():
    """transformers.js' ``bnb4`` files: ``MatMulBnb4`` (FP4/NF4 weights packed two per byte, one absmax per block)."""
    node = helper.make_node("MatMulBnb4", ["a", "packed", "absmax"], ["y"], domain="com.microsoft", name="bnb4",
                            K=64, N=32, block_size=64, quant_type=1)
    packed = numpy_helper.from_array(np.zeros(64 * 32 // 2, dtype=np.uint8), "packed")
    absmax = numpy_helper.from_array(np.ones(64 * 32 // 64, dtype=np.float32), "absmax")
    model = make_model([node], [tensor("a", [2, 64])], [tensor("y", None)], [packed, absmax], opset=17)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    graph = build_graph(model)
    matmul = graph.dag.nodes["bnb4"]
    assert matmul["op"] == "MatMul" and matmul["flops"] == 2 * 2 * 64 * 32
    assert (matmul["inputs"][1].dtype, matmul["inputs"][1].shape, matmul["inputs"][1].nbytes) == ("uint4", (64, 32),
                                                                                                   1024)
    assert graph.outputs[0].shape == (2, 32) and not graph.unsupported_ops


def test_a_modelopt_fp8_resnet_runs_its_convolutions_in_fp8(predictor) -> None:
    """NVIDIA ModelOpt's FP8 export for TensorRT: every quantizer a TRT_FP8QuantizeLinear / TRT_FP8DequantizeLinear
    plugin pair (scripts/make_modelopt_fixtures.py), read as ONNX's FP8 Q/DQ: the 20 convolutions on the FP8 tensor
    cores with the float export's multiply-adds, nothing unsupported."""
    float_model = predictor.predict(QUANTIZED / "resnet.onnx", gpu="h100-sxm")
    fp8 = predictor.predict(QUANTIZED / "resnet-modelopt-fp8.onnx", gpu="h100-sxm")
    assert fp8.precision == "fp8"
    assert any("quantized graph (41 DequantizeLinear, 41 QuantizeLinear)" in w and "in FP8" in w for w in fp8.warnings)
    assert not any("unsupported op" in w or "unknown shape" in w for w in fp8.warnings)
    convs = [k for k in fp8.kernels if k.category == "conv"]
    assert len(convs) == 20 and {k.type for k in convs} == {"conv_fp8_tensor"}
    # the float export folds each batch norm into its convolution as a bias, which the quantized weights prevent
    assert sum(k.flops for k in convs) == pytest.approx(
        sum(k.flops for k in float_model.kernels if k.category == "conv"), rel=0.002)


def test_an_fp8_files_batch_norms_after_convolutions_launch_nothing(predictor) -> None:
    """ModelOpt leaves the ResNet's 20 batch norms for TensorRT to fold into the convolutions before them: priced as
    20 kernels of their own it came out 71 kernels and 2.14 ms on an H100, slower than the FP32 file (66 kernels,
    1.99 ms) and than ``--precision fp8`` on it (1.39 ms)."""
    fp8 = predictor.predict(QUANTIZED / "resnet-modelopt-fp8.onnx", gpu="h100-sxm")
    assert not any("BatchNormalization" in k.ops for k in fp8.kernels)
    assert len(fp8.kernels) == 51
    assert ("the 20 BatchNormalization(s) after convolutions are folded into them, as FP8 runtimes (TensorRT, "
            "onnxruntime) run them: a batch norm after each convolution launches no kernel of its own there"
            ) in fp8.warnings
    convs = [k for k in fp8.kernels if k.category == "conv"]
    assert len(convs) == 20 and {k.type for k in convs} == {"conv_fp8_tensor"}
    assert fp8.latency_ms < predictor.predict(QUANTIZED / "resnet.onnx", gpu="h100-sxm").latency_ms


def conv_layer(with_norm: bool) -> onnx.ModelProto:
    """x[8, 64, 56, 56] -> 3x3 Conv -> (BatchNormalization) -> Relu: a plain export keeps the norm, an optimised one
    folds it into the convolution's bias."""
    zeros = lambda *shape: numpy_helper.from_array(np.zeros(shape, dtype=np.float32))  # noqa: E731
    initializers = [zeros(64, 64, 3, 3)]
    initializers[0].name = "w"
    if with_norm:
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                 helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["n"], name="norm"),
                 helper.make_node("Relu", ["n"], ["y"], name="relu")]
        for name in ("scale", "shift", "mean", "var"):
            initializers.append(zeros(64))
            initializers[-1].name = name
    else:
        nodes = [helper.make_node("Conv", ["x", "w", "shift"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c"], ["y"], name="relu")]
        initializers.append(zeros(64))
        initializers[-1].name = "shift"
    return make_model(nodes, [tensor("x", [8, 64, 56, 56])], [tensor("y", [8, 64, 56, 56])], initializers)


@pytest.mark.parametrize("precision", ["int8", "fp8"])
def test_precision_int8_folds_a_plain_exports_batch_norms_as_an_optimised_export_has_them(predictor, precision) -> None:
    """A plain ResNet-50 export keeps its 53 batch norms as nodes, an ``--optimize``d one folds them: ``--precision
    int8`` priced the first 25-30 % slower (T4, A100, H100) though FP32 and FP16 agreed to 0.1 %. INT8 and FP8
    runtimes fold every batch norm after a convolution."""
    plain = predictor.predict(build_graph(conv_layer(True)), gpu="t4", precision=precision)
    folded = predictor.predict(build_graph(conv_layer(False)), gpu="t4", precision=precision)
    assert [k.ops for k in plain.kernels] == [k.ops for k in folded.kernels]
    assert not any("BatchNormalization" in k.ops for k in plain.kernels)
    assert plain.latency_ms == folded.latency_ms
    assert any("the 1 BatchNormalization(s) after convolutions are folded into them" in w for w in plain.warnings)
    # FP32 runs the norm as eager does, a kernel of its own
    assert ("BatchNormalization",) in [k.ops for k in predictor.predict(build_graph(conv_layer(True)), gpu="t4").kernels]


def test_a_modelopt_fp8_bert_runs_its_linear_layers_in_fp8(predictor) -> None:
    """FP8_DEFAULT_CFG quantizes Linear layers, not the attention's batched matmuls: 12 FP8 GEMMs (six per layer),
    the four Q.K^T and P.V products in the model's FP32."""
    fp8 = predictor.predict(QUANTIZED / "bert-modelopt-fp8.onnx", gpu="h100-sxm")
    assert fp8.precision == "fp8" and not any("unsupported op" in w for w in fp8.warnings)
    types = Counter(k.type for k in fp8.kernels if k.category == "gemm")
    assert types == {"gemm_fp8_tensor": 12, "gemm_sgemm": 4}


def test_tensorrt_fp8_plugins_become_onnx_fp8_qdq() -> None:
    from lilou.graph.tensorrt_qdq import standard_fp8_qdq

    model = onnx.load(QUANTIZED / "bert-modelopt-fp8.onnx", load_external_data=False)
    assert standard_fp8_qdq(model) == 58
    assert not any(n.domain == "trt" for n in model.graph.node)
    assert not any(o.domain == "trt" for o in model.opset_import)
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == 19
    quantize = next(n for n in model.graph.node if n.op_type == "QuantizeLinear")
    zero_point = next(t for t in model.graph.initializer if t.name == quantize.input[2])
    assert zero_point.data_type == TensorProto.FLOAT8E4M3FN


def test_a_dynamic_model_a_session_saved_is_priced_as_the_file_it_came_from(predictor) -> None:
    """onnxruntime's session fuses quantize_dynamic's MatMulInteger, cast, scale multiplications and bias add into
    ``MatMulIntegerToFloat`` (``DynamicQuantizeMatMul`` with the activation's quantize too). They had no cost formula:
    0-FLOP fallback kernels, and the model read as FP32 (1.435 ms, 47 kernels, 20 MFLOPs on a T4 against 3.429 ms,
    113 kernels, 424 MFLOPs for the file the session read). They are written back as that file's ops."""
    typed = Path(__file__).resolve().parent / "data" / "typed"
    saved = predictor.predict(typed / "bert-dynamic-session.onnx", gpu="t4")
    source = predictor.predict(QUANTIZED / "bert-dynamic.onnx", gpu="t4")
    assert saved.precision == "int8"
    assert not any("unsupported op" in w or "no cost formula" in w for w in saved.warnings)
    assert any("6 DynamicQuantizeMatMul" in w and "6 MatMulIntegerToFloat" in w for w in saved.warnings)
    assert len(saved.kernels) == len(source.kernels) == 113
    assert sum(k.flops for k in saved.kernels) == sum(k.flops for k in source.kernels)
    assert sum(k.bytes for k in saved.kernels) == sum(k.bytes for k in source.kernels)
    assert Counter(k.type for k in saved.kernels) == Counter(k.type for k in source.kernels)
    assert Counter(k.type for k in saved.kernels if k.category == "gemm") == {"gemm_int8_tensor": 12, "gemm_sgemm": 4}
    assert saved.latency_ms == source.latency_ms


def test_an_fp16_model_with_int8_qdq_is_read_as_int8(predictor) -> None:
    """ModelOpt's INT8 Q/DQ in a half-precision model (FP16 scales, opset 19; tests/data/typed). The float stand-ins
    were written as casts to FP32, so every op they fed inferred FP32 against the FP16 the file states, and the file was
    refused ("shape inference failed ... (1) vs (10)", with a hint about --batch and --shape). They follow the scales'
    float type now."""
    typed = Path(__file__).resolve().parent / "data" / "typed"
    prediction = predictor.predict(typed / "resnet-fp16-int8qdq.onnx", gpu="t4")
    assert prediction.precision == "int8"
    assert not any("unsupported op" in w or "unknown shape" in w for w in prediction.warnings)
    convs = [k for k in prediction.kernels if k.category == "conv"]
    assert len(convs) == 20 and {k.type for k in convs} == {"conv_int8_tensor"}
    # INT8 input and weights, the fold's FP16 bias, the FP16 output (ModelOpt quantizes what a convolution reads)
    assert convs[0].bytes == 3 * 64 * 64 + 32 * 3 * 7 * 7 + 2 * 32 + 2 * 32 * 32 * 32


def test_an_fp16_qdq_matmul_writing_the_graph_output_keeps_its_type() -> None:
    """The minimal case: an FP16 graph whose quantized MatMul writes the FP16 graph output."""
    initializers = [helper.make_tensor("scale", TensorProto.FLOAT16, [], [0.05]),
                    helper.make_tensor("point", TensorProto.INT8, [], [0]),
                    helper.make_tensor("w_scale", TensorProto.FLOAT16, [512], [0.01] * 512),
                    helper.make_tensor("w", TensorProto.INT8, [256, 512], [0] * (256 * 512))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "point"], ["x_q"], name="x_quantize"),
             helper.make_node("DequantizeLinear", ["x_q", "scale", "point"], ["x_dq"]),
             helper.make_node("DequantizeLinear", ["w", "w_scale"], ["w_dq"], axis=1),
             helper.make_node("MatMul", ["x_dq", "w_dq"], ["y"], name="matmul")]
    model = make_model(nodes, [tensor("x", [8, 256], TensorProto.FLOAT16)], [tensor("y", [8, 512], TensorProto.FLOAT16)],
                       initializers, opset=19)
    graph = build_graph(model, name="fp16-qdq")
    matmul = graph.dag.nodes["matmul"]
    assert [t.dtype for t in matmul["inputs"]] == ["int8", "int8"] and matmul["outputs"][0].dtype == "float16"
    assert matmul["bytes_read"] == 8 * 256 + 256 * 512 and matmul["bytes_written"] == 2 * 8 * 512
    assert graph.outputs[0].dtype == "float16"


def test_precision_int8_on_a_float_export_keeps_its_batch_norms_folded(predictor) -> None:
    """``--precision int8`` on the TorchScript export: the 20 batch norms the exporter folded were restored as eager
    runs them (66 kernels, 1.994 ms on a T4), which no INT8 runtime runs and the INT8 file of the same model does not
    have. They stay folded now, each convolution adding the fold's bias as the INT8 file's do."""
    asked = predictor.predict(QUANTIZED / "resnet.onnx", gpu="t4", precision="int8")
    quantized = predictor.predict(QUANTIZED / "resnet-qdq.onnx", gpu="t4")
    assert not any("BatchNormalization" in k.ops for k in asked.kernels)
    assert len(asked.kernels) == 46  # 66 less the 20 norms (the ReLUs stay: onnxruntime's quantizer dropped them)
    convs = [k for k in asked.kernels if k.category == "conv"]
    assert sorted(k.flops for k in convs) == sorted(k.flops for k in quantized.kernels if k.category == "conv")
    assert not any(w.startswith("20 BatchNormalization(s) that the exporter folded") for w in asked.warnings)
    assert any(w.startswith("--precision int8:") and "the 20 BatchNormalization(s) the exporter folded into the "
               "convolutions before them stay folded" in w for w in asked.warnings)
    # in FP16 eager runs them: they stay restored
    half = predictor.predict(QUANTIZED / "resnet.onnx", gpu="t4", precision="fp16")
    assert sum("BatchNormalization" in k.ops for k in half.kernels) == 20


def test_fuse_lists_every_node_of_a_quantized_file_and_none_of_its_own(capsys) -> None:
    """``lilou fuse`` on a QDQ file: its 92 DequantizeLinear and 71 QuantizeLinear were in neither ``kernels`` nor
    ``no_kernel`` and the float stand-ins of its weights appeared under invented names (``<weight>/lilou_as_float``).
    A stand-in now takes the name of the dequantize it replaces, and the quantize and dequantize nodes folded into the
    ops beside them are listed as no kernel, reason "folded"."""
    import json

    from lilou.cli import main

    path = QUANTIZED / "bert-qdq.onnx"
    assert main(["fuse", str(path), "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    listed = [n for k in payload["kernels"] + payload["no_kernel"] for n in k["nodes"]]
    assert sorted(listed) == sorted(n.name for n in onnx.load(path, load_external_data=False).graph.node)
    folded = next(k["nodes"] for k in payload["no_kernel"] if k["reason"] == "folded")
    # every quantize and dequantize but the 21 dequantizes of the distinct weights and constants, whose stand-ins
    # (no-kernel casts) take their names
    model = onnx.load(path, load_external_data=False)
    weights = {t.name for t in model.graph.initializer}
    kept = [n for n in model.graph.node if "uantizeLinear" in n.op_type and n.name not in folded]
    assert len(folded) == 92 + 71 - 21 and len(kept) == 21
    assert all(n.op_type == "DequantizeLinear" and n.input[0] in weights for n in kept)


def test_a_quantized_inputs_stand_in_launches_no_kernel_under_tvm(tmp_path: Path) -> None:
    """Under ``--backend tvm`` the stand-in of a UINT8 graph input (a cast to its own type) was a memory-bound kernel
    of its own (0.0617 ms on an H100 against 0.0315 for eager); TVM elides such a cast."""
    from lilou.api import Predictor

    initializers = [numpy_helper.from_array(np.array(0.02, dtype=np.float32), "scale"),
                    numpy_helper.from_array(np.array(128, dtype=np.uint8), "point"),
                    numpy_helper.from_array(np.zeros((256, 512), dtype=np.int8), "w")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "scale", "point"], ["x_float"], name="x_dequantize"),
             helper.make_node("DequantizeLinear", ["w", "scale"], ["w_float"], name="w_dequantize"),
             helper.make_node("MatMul", ["x_float", "w_float"], ["y"], name="matmul")]
    path = tmp_path / "uint8-input.onnx"
    onnx.save(make_model(nodes, [tensor("x", [256, 256], TensorProto.UINT8)], [tensor("y", [256, 512])], initializers),
              path)
    tvm = Predictor(backend="tvm").predict(path, gpu="h100-sxm")
    assert [k.nodes for k in tvm.kernels] == [("matmul",)] and tvm.kernels[0].type == "gemm_int8_tensor"


def test_sixteen_bit_activations_are_named_and_priced_as_float_math(predictor, tmp_path: Path) -> None:
    """onnxruntime's QUInt16 activations (opset 21) with INT8 weights: the matmul reads UINT16, which no GPU unit
    computes in, and is priced as FP32; the note said the tensors were INT8."""
    initializers = [numpy_helper.from_array(np.array(0.001, dtype=np.float32), "scale"),
                    numpy_helper.from_array(np.array(0, dtype=np.uint16), "point"),
                    numpy_helper.from_array(np.zeros((256, 512), dtype=np.int8), "w")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "point"], ["x_q"], name="x_quantize"),
             helper.make_node("DequantizeLinear", ["x_q", "scale", "point"], ["x_dq"], name="x_dequantize"),
             helper.make_node("DequantizeLinear", ["w", "scale"], ["w_dq"], name="w_dequantize"),
             helper.make_node("MatMul", ["x_dq", "w_dq"], ["y"], name="matmul")]
    path = tmp_path / "uint16.onnx"
    onnx.save(make_model(nodes, [tensor("x", [64, 256])], [tensor("y", [64, 512])], initializers, opset=21), path)
    prediction = predictor.predict(path, gpu="h100-sxm")
    matmul = next(k for k in prediction.kernels if k.nodes == ("matmul",))
    assert prediction.precision == "fp32" and matmul.type == "gemm_sgemm"
    assert matmul.bytes == 2 * 64 * 256 + 256 * 512 + 4 * 64 * 512  # UINT16 in, INT8 weights, FP32 out
    note = next(w for w in prediction.warnings if w.startswith("quantized graph"))
    assert "its tensors in INT16/INT8 (16-bit integers have no GPU math unit" in note


@pytest.mark.parametrize(("case", "message"), [
    ("fp8-at-opset-18", "quantizes to FP8, which the op takes from opset 19; the file's opset is 18"),
    ("axis-out-of-range", "has axis 7 for its 2-D input 'x'"),
    ("one-output", "has 1 output(s) but writes three"),
])
def test_quantizers_onnx_refuses_are_bad_input(case: str, message: str) -> None:
    """Files ONNX's checker or onnxruntime refuse were priced (exit 0): FP8 Q/DQ at opset 18, a per-axis quantize
    whose axis is not one of its input's, a DynamicQuantizeLinear with one output."""
    from lilou.errors import LilouInputError

    if case == "fp8-at-opset-18":
        model = _qdq_matmul(TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FN)
        next(o for o in model.opset_import if o.domain in ("", "ai.onnx")).version = 18
    elif case == "axis-out-of-range":
        initializers = [numpy_helper.from_array(np.full(256, 0.1, dtype=np.float32), "scale"),
                        numpy_helper.from_array(np.zeros(256, dtype=np.int8), "point"), weight_of([256, 512])]
        nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "point"], ["x_q"], axis=7),
                 helper.make_node("DequantizeLinear", ["x_q", "scale", "point"], ["x_dq"], axis=7),
                 helper.make_node("MatMul", ["x_dq", "w"], ["y"])]
        model = make_model(nodes, [tensor("x", [8, 256])], [tensor("y", [8, 512])], initializers, opset=19)
    else:
        nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["x_q"]),
                 helper.make_node("Cast", ["x_q"], ["y"], to=TensorProto.FLOAT)]
        model = make_model(nodes, [tensor("x", [8, 256])], [tensor("y", [8, 256])], opset=17)
    with pytest.raises(LilouInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_graph(model)


def weight_of(dims: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.zeros(dims, dtype=np.float32), "w")
