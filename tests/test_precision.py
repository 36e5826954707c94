"""Precision from ONNX tensor types, PyTorch's TF32 defaults by compute capability, and what is said about them."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from lilou.api import Predictor
from lilou.cli import main
from lilou.errors import LilouInputError
from lilou.graph.dag import build_graph
from lilou.graph.precision import model_precision
from lilou.hardware import resolve_device
from lilou.latency.kernel_model.precision import default_tf32, precision_path
from tests.onnx_builders import make_model, tensor, weight

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "resnet18.onnx"


def matmul_model(dtype: int, m: int = 64, k: int = 1024, n: int = 1024, name: str = "mm") -> onnx.ModelProto:
    np_dtype = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16"}.get(dtype)
    initializers = [weight("w", [k, n], dtype=np_dtype)] if np_dtype else []
    inputs = [tensor("x", [m, k], dtype)] + ([] if np_dtype else [tensor("w", [k, n], dtype)])
    node = onnx.helper.make_node("MatMul", ["x", "w"], ["y"], name=name)
    return make_model([node], inputs, [tensor("y", [m, n], dtype)], initializers)


def mixed_model() -> onnx.ModelProto:
    """A large FP32 MatMul, then a cast to FP16 and a small FP16 MatMul."""
    nodes = [onnx.helper.make_node("MatMul", ["x", "w"], ["y"], name="big"),
             onnx.helper.make_node("Cast", ["y"], ["h"], to=TensorProto.FLOAT16, name="cast"),
             onnx.helper.make_node("MatMul", ["h", "v"], ["z"], name="small")]
    return make_model(nodes, [tensor("x", [512, 1024])], [tensor("z", [512, 16], TensorProto.FLOAT16)],
                      [weight("w", [1024, 1024]), weight("v", [1024, 16], dtype="float16")])


@pytest.mark.parametrize(("dtype", "expected"), [(TensorProto.FLOAT, "fp32"), (TensorProto.FLOAT16, "fp16"),
                                                 (TensorProto.BFLOAT16, "bf16")])
def test_precision_comes_from_the_tensor_types(dtype: int, expected: str) -> None:
    found = model_precision(build_graph(matmul_model(dtype)))
    assert found.precision == expected and found.shares == {expected: 1.0} and not found.mixed


def test_a_mixed_graph_reports_its_dominant_precision() -> None:
    found = model_precision(build_graph(mixed_model()))
    big, small = 2 * 512 * 1024 * 1024, 2 * 512 * 1024 * 16
    assert found.precision == "fp32" and found.mixed
    assert found.shares == {"fp32": pytest.approx(big / (big + small)), "fp16": pytest.approx(small / (big + small))}


def test_each_matmul_of_a_mixed_graph_is_priced_in_its_own_precision(tmp_path: Path) -> None:
    """The FP32 matmul runs on the CUDA cores and the FP16 one on the tensor cores, whatever the dominant precision;
    ``--precision`` puts both on its path."""
    path = tmp_path / "mixed.onnx"
    onnx.save(mixed_model(), path)
    predictor = Predictor()
    found = {k.nodes[0]: k.type for k in predictor.predict(path, gpu="a100-80gb").kernels}
    assert found["big"] == "gemm_sgemm" and found["small"] == "gemm_fp16_tensor"
    forced = {k.nodes[0]: k.type for k in predictor.predict(path, gpu="a100-80gb", precision="fp16").kernels}
    assert forced["big"] == forced["small"] == "gemm_fp16_tensor"


def test_tf32_defaults_follow_pytorch_by_compute_capability() -> None:
    assert {gpu: default_tf32(resolve_device(gpu)) for gpu in ("t4", "v100-sxm2-16gb", "a10g", "a100-sxm4-80gb",
                                                                 "h100-sxm", "b200", "rtx-5090")} == {
        "t4": "off", "v100-sxm2-16gb": "off", "a10g": "conv", "a100-sxm4-80gb": "conv", "h100-sxm": "conv",
        "b200": "conv", "rtx-5090": "conv"}  # "10.0" and "12.0" compare as numbers, newer than "8.0"
    assert precision_path("fp32", resolve_device("t4"), tf32="on").tf32 == "off"  # no TF32 before Ampere
    assert precision_path("fp32", resolve_device("a10g"), tf32="on").tf32 == "on"
    assert precision_path("fp32", resolve_device("a10g"), precision="tf32").tf32 == "on"


def test_infer_json_carries_precision_and_says_what_is_unmeasured(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bf16.onnx"
    onnx.save(matmul_model(TensorProto.BFLOAT16), path)
    assert main(["infer", str(path), "--gpu", "h200", "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["precision"], result["tf32"]) == ("bf16", "off")  # no FP32 matmul or convolution to run in TF32
    assert not any("BF16" in w for w in result["warnings"])  # AIConfigurator measured BF16 GEMMs on the H200
    # FP16 stands on BF16's measurements (one tensor-core rate); INT8 GEMMs were measured before Hopper only.
    assert not any("neighbour" in w for w in Predictor().predict(path, gpu="h200", precision="fp16").warnings)
    int8 = Predictor().predict(path, gpu="h200", precision="int8").warnings
    assert ("INT8 GEMMs on Hopper GPUs have no measured neighbour in the kernel table (measured on Pascal, Turing, "
            "GA100 only): extrapolated across architectures") in int8
    assert "v100-sxm2-16gb: no unit for BF16 GEMMs; they are predicted at FP32 CUDA-core rates, as measured FP32 " \
        "kernels" in Predictor().predict(path, gpu="v100-sxm2-16gb").warnings
    # INT8 on Volta runs on DP4A, not on tensor cores: said beside the missing measurements (it was not said;
    # tests/test_precision_gpus.py has the whole line)
    volta = Predictor().predict(path, gpu="v100-sxm2-16gb", precision="int8").warnings
    assert any(w.startswith("v100-sxm2-16gb: no INT8 tensor cores, so the INT8 GEMMs are priced on the CUDA cores' "
                            "DP4A instructions") for w in volta)
    assert any("INT8 GEMMs on Volta GPUs have no measured neighbour" in w for w in volta)


def test_fp8_and_fp4_on_gpus_without_their_tensor_cores_say_so(tmp_path: Path) -> None:
    """FP8 asked of an Ampere GPU (and FP4 of a Hopper one) is priced as weight-only kernels run there: FP8 weights,
    FP16 activations, on the FP16 tensor cores; the warning names the devices and what an engine that needs FP8 math
    would do. The activations were priced in FP8 too (1 byte), which made BERT-large 25 % faster in FP8 than in FP16
    on an A100, a V100 or a T4."""
    path = tmp_path / "fp32.onnx"
    onnx.save(matmul_model(TensorProto.FLOAT), path)
    predictor = Predictor()
    on_ampere = predictor.predict(path, gpu="a100-sxm4-80gb", precision="fp8")
    assert [k.type for k in on_ampere.kernels] == ["gemm_fp16_tensor"]
    assert [k.bytes for k in on_ampere.kernels] == [1024 * 1024 + 2 * (64 * 1024 + 64 * 1024)]  # FP8 w, FP16 x and y
    assert ("a100-sxm4-80gb: no FP8 tensor cores (FP8 needs compute capability 8.9 or newer): FP8 GEMMs are priced as "
            "weight-only FP8 kernels run there, on the FP16 tensor cores with FP8 weights and FP16 activations; an "
            "engine that needs the format's own math (TensorRT, ModelOpt) cannot run them there") in on_ampere.warnings
    assert not any("neighbour" in w for w in on_ampere.warnings)  # the line above says what it is priced as
    on_ada = predictor.predict(path, gpu="l4", precision="fp8")
    assert [k.type for k in on_ada.kernels] == ["gemm_fp8_tensor"] and not any("no FP8" in w for w in on_ada.warnings)
    assert [k.bytes for k in on_ada.kernels] == [1024 * 1024 + 64 * 1024 + 64 * 1024]  # FP8 throughout
    both = predictor.predict_many(path, ["l4", "a100-sxm4-80gb"], precision="fp8")
    assert [p.to_json() for p in both] == [on_ada.to_json(), on_ampere.to_json()]
    ranked = predictor.rank(path, gpus=["h100-sxm", "b200", "t4"], precision="fp4")
    assert [w for w in ranked.warnings if "no FP4 tensor cores" in w] == [
        "h100-sxm: no FP4 tensor cores (FP4 needs compute capability 10.0 or newer): FP4 GEMMs are priced as "
        "weight-only FP4 kernels run there, on the FP16 tensor cores with FP4 weights and FP16 activations; an engine "
        "that needs the format's own math (TensorRT, ModelOpt) cannot run them there"]
    # the weight-only kernels (vLLM's Marlin) need compute capability 8.0: on a T4 no known runtime runs them
    assert [w for w in ranked.warnings if w.startswith("t4: ")] == [
        "t4: no known runtime runs FP4 GEMMs there (the weight-only kernels that run them on other GPUs (vLLM's "
        "Marlin) need compute capability 8.0 or newer); they are priced as FP16 kernels with the format's smaller "
        "weights, a lower bound on what a runtime that upcasts them would take; their 90 % interval is FP16 kernels' "
        "around that bound and does not cover the upcast's cost"]
    by_device = {e.device: e for e in ranked}
    assert by_device["h100-sxm"].latency_ms == predictor.predict(path, gpu="h100-sxm", precision="fp4").latency_ms


def test_convolutions_on_the_fallback_are_not_said_to_run_in_tf32() -> None:
    """onnxruntime's CPU-session file writes its convolutions in the NCHWc layout domain: they go to the memory-bound
    fallback, and the TF32 line (priced on the TF32 tensor cores) was not true of them."""
    cpu_layout = Path(__file__).parent / "data" / "ort" / "cnn-ort-session-cpu.onnx"
    warnings = Predictor().predict(cpu_layout, gpu="l4").warnings
    assert any("unsupported op(s) Conv" in w for w in warnings) and TF32_WARNING not in warnings
    assert TF32_WARNING in Predictor().predict(cpu_layout.with_name("cnn.onnx"), gpu="l4").warnings


def test_tf32_asked_of_a_gpu_without_it_is_said() -> None:
    predictor = Predictor()
    line = ("t4: no TF32 tensor cores (TF32 needs compute capability 8.0 or newer): TF32 was asked for, and FP32 "
            "kernels are priced in strict FP32 there, as they run")
    asked = predictor.predict(EXAMPLE, gpu="t4", tf32="on")
    assert line in asked.warnings and asked.tf32 == "off"
    as_tf32, plain = predictor.predict(EXAMPLE, gpu="t4", precision="tf32"), predictor.predict(EXAMPLE, gpu="t4")
    assert line in as_tf32.warnings
    # what is priced is strict FP32, and so are its label, interval and flags (they were TF32's: unmeasured, wider)
    assert (as_tf32.precision, as_tf32.latency_ms, as_tf32.interval_ms, as_tf32.extrapolated_share) == \
        ("fp32", plain.latency_ms, plain.interval_ms, plain.extrapolated_share)
    assert line not in predictor.predict(EXAMPLE, gpu="t4").warnings  # not asked: PyTorch's default is no TF32 there
    assert not any("no TF32" in w for w in predictor.predict(EXAMPLE, gpu="a10g", tf32="on").warnings)


TF32_WARNING = ("FP32 convolutions run in TF32 (PyTorch's default for convolutions on compute capability 8.0 and "
                "newer): priced on the TF32 tensor cores at their peak, but no source of the kernel table measured "
                "TF32, so these kernels are extrapolated from 16-bit tensor-core measurements; --tf32 off predicts "
                "strict-FP32 runs")


def test_fp32_convolutions_on_ampere_run_in_tf32_unless_turned_off(capsys) -> None:
    predictor = Predictor()
    default = predictor.predict(EXAMPLE, gpu="a100-sxm4-80gb")
    assert (default.precision, default.tf32) == ("fp32", "conv")
    assert TF32_WARNING in default.warnings
    strict = predictor.predict(EXAMPLE, gpu="a100-sxm4-80gb", tf32="off")
    assert strict.tf32 == "off" and not any("TF32" in w for w in strict.warnings)
    # At 156 TF32 TFLOPS against 19.5 FP32, every convolution's GPU work shrinks, and every one of them is flagged
    # extrapolated (no source measured TF32); the other kernels are priced as before. (At batch 1 the A100 waits
    # for the host to launch kernels either way, so the end-to-end total hardly moves.)
    # Never above strict FP32 (TF32 only adds kernels to choose from); the 3x3 convolutions 3.9-5.1x faster.
    convs = [(t, s) for t, s in zip(default.kernels, strict.kernels) if t.category == "conv"]
    assert len(convs) == 20 and all(t.work_ms <= s.work_ms and t.extrapolated for t, s in convs)
    assert sum(s.work_ms for _, s in convs) / sum(t.work_ms for t, _ in convs) > 3.5
    assert [(k.work_ms, k.extrapolated) for k in default.kernels if k.category != "conv"] == \
        [(k.work_ms, k.extrapolated) for k in strict.kernels if k.category != "conv"]
    assert default.latency_ms <= strict.latency_ms
    turing = predictor.predict(EXAMPLE, gpu="t4")
    assert turing.tf32 == "off" and not any("TF32" in w or "precision" in w for w in turing.warnings)
    assert turing.latency_ms == predictor.predict(EXAMPLE, gpu="t4", tf32="on").latency_ms  # no TF32 on Turing


def conv_model(kernel: int, channels: int = 256, size: int = 56, batch: int = 32) -> onnx.ModelProto:
    """One FP32 convolution, 'same' padding, stride 1."""
    pad = kernel // 2
    node = onnx.helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[kernel, kernel], pads=[pad] * 4)
    return make_model([node], [tensor("x", [batch, channels, size, size])],
                      [tensor("y", [batch, channels, size, size])], [weight("w", [channels, channels, kernel, kernel])])


@pytest.mark.parametrize("gpu", ["t4", "v100", "gtx-1080-ti"])
def test_a_1x1_convolution_is_slower_per_flop_than_a_winograd_3x3(tmp_path: Path, gpu: str) -> None:
    """cuDNN may run a 3x3 stride-1 FP32 convolution as Winograd (2.25x fewer multiplications); a 1x1 one is a plain
    implicit GEMM. DeepBench measured the 1x1 ones at 1.7x (T4) to 4.4x (P100) the 3x3 ones' time per FLOP (rows
    over 0.3 ms); the NeuSight-only model, which saw 3x3 ones alone, priced both at one rate. Strict-FP32
    convolutions are priced by the tensor-core model, which trained on every geometry."""
    predictor = Predictor()
    assert predictor.model.prices_fp32_convolutions
    per_flop = {}
    for kernel in (1, 3):
        path = tmp_path / f"conv{kernel}.onnx"
        onnx.save(conv_model(kernel), path)
        result = predictor.predict(path, gpu=gpu, tf32="off")
        conv, = [k for k in result.kernels if k.category == "conv"]
        per_flop[kernel] = conv.work_ms / conv.flops
    assert per_flop[1] / per_flop[3] > 1.25


def test_tf32_matmuls_only_with_tf32_on(tmp_path: Path) -> None:
    """Matmuls stay strict FP32 by default (torch.backends.cuda.matmul.allow_tf32 is False) and run on the TF32
    tensor cores with --tf32 on: faster than strict FP32, slower than BF16 on the same tensor cores."""
    predictor = Predictor()
    path = tmp_path / "fp32.onnx"
    onnx.save(matmul_model(TensorProto.FLOAT, m=4096, k=4096, n=4096), path)
    default = predictor.predict(path, gpu="a100-sxm4-80gb")
    assert default.latency_ms == predictor.predict(path, gpu="a100-sxm4-80gb", tf32="off").latency_ms
    assert not any("TF32" in w for w in default.warnings)
    tf32 = predictor.predict(path, gpu="a100-sxm4-80gb", tf32="on")
    assert any(w.startswith("FP32 matmuls run in TF32: priced on the TF32 tensor cores") for w in tf32.warnings)
    bf16 = predictor.predict(path, gpu="a100-sxm4-80gb", precision="bf16")
    assert bf16.latency_ms < tf32.latency_ms < default.latency_ms / 2
    assert tf32.extrapolated_share == 1.0


def test_precision_override_and_rank(capsys) -> None:
    predictor = Predictor()
    forced = predictor.predict(EXAMPLE, gpu="a100-80gb", precision="fp16")
    assert forced.precision == "fp16"
    assert "--precision fp16: the file's FP32 model is priced as run in FP16, its kernels on that path and its " \
           "floating-point tensors stored so (integer tensors keep their types)" in forced.warnings
    # each kernel moves half the bytes at the same FLOPs, but the pooling mean's int64 axes (16 bytes), kept as stored
    stored = predictor.predict(EXAMPLE, gpu="a100-80gb")
    axes = [16 if k.ops == ("ReduceMean",) else 0 for k in stored.kernels]
    assert sum(axes) == 16
    assert [f.bytes for f in forced.kernels] == [(k.bytes - a) // 2 + a for k, a in zip(stored.kernels, axes)]
    assert [k.flops for k in forced.kernels] == [k.flops for k in stored.kernels]
    ranking = predictor.rank(EXAMPLE, gpus=["t4", "a10g"])
    assert {(e.gpu, e.tf32) for e in ranking} == {("t4", "off"), ("a10g", "conv")}
    assert all(set(entry) == {"gpu", "mig", "latency_ms", "interval_ms", "extrapolated_share", "fits", "precision",
                                   "precision_path", "precision_note", "precision_warnings", "tf32", "gpu_work_ms",
                                   "memory_gb", "backend"}
               for entry in ranking.to_json())
    with pytest.raises(LilouInputError, match="unknown precision"):
        predictor.predict(EXAMPLE, gpu="t4", precision="fp64")
    with pytest.raises(LilouInputError, match="unknown --tf32"):
        predictor.rank(EXAMPLE, gpus=["t4"], tf32="maybe")
    assert main(["infer", str(EXAMPLE), "--gpu", "t4", "--precision", "fp64"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--precision" in err


def test_kernel_units_follow_precision_and_the_device() -> None:
    from lilou.latency.kernel_model.precision import kernel_unit

    h100, t4, p100 = resolve_device("h100-sxm"), resolve_device("t4"), resolve_device("p100-pcie-16gb")

    def unit(family, precision, device):
        return kernel_unit(family, precision_path(precision, device), device)

    assert unit("gemm", "bf16", h100) == "bf16_tensor" and unit("conv", "fp8", h100) == "fp8_tensor"
    assert unit("gemm", "fp32", h100) is None and unit("elementwise", "bf16", h100) is None
    assert unit("gemm", "bf16", t4) == "fp32"          # no BF16 on Turing: emulated in FP32
    assert unit("gemm", "fp8", t4) == "fp16_tensor"    # no FP8 unit: upcast to FP16 tensor cores
    assert unit("gemm", "int8", t4) == "int8_tensor" and unit("gemm", "int8", p100) is None  # P100: no DP4A
    # FP16 without tensor cores is FP32 math in PyTorch (cuBLAS compute type FP32): not the 1/64-rate FP16 units of
    # a GTX 1080 Ti, which priced an FP16 BERT 43x slower than FP32; the kernel table labels P100 FP16 rows so
    assert unit("gemm", "fp16", p100) == "fp32" and unit("conv", "fp16", resolve_device("gtx-1080-ti")) == "fp32"
    a10g = resolve_device("a10g")
    # PyTorch's default on compute capability >= 8.0: FP32 convolutions in TF32, matmuls strict FP32.
    assert unit("conv", "fp32", a10g) == "tf32_tensor" and unit("gemm", "fp32", a10g) is None
    assert kernel_unit("gemm", precision_path("fp32", a10g, tf32="on"), a10g) == "tf32_tensor"
    assert kernel_unit("conv", precision_path("fp32", a10g, tf32="off"), a10g) is None
    assert unit("gemm", "tf32", a10g) == "tf32_tensor" and unit("elementwise", "tf32", a10g) is None
    assert unit("conv", "fp32", t4) is None and unit("conv", "tf32", t4) is None  # Turing has no TF32
    # INT4 is weight-only (W4A16): 16-bit tensor-core math, as the kernel table's int4-weight-only rows are
    # labelled, never an A100's or T4's INT4 tensor-core peak (no runtime here runs W4A4)
    a100 = resolve_device("a100-sxm4-80gb")
    assert (unit("gemm", "int4", a100), unit("gemm", "int4", t4), unit("gemm", "int4", h100)) == (
        "bf16_tensor", "fp16_tensor", "bf16_tensor")
    assert a100.peak_tflops["int4_tensor"] and unit("gemm", "int4", p100) == "fp32"


def test_a_bf16_gemm_is_predicted_faster_than_the_same_fp32_gemm_on_tensor_cores(tmp_path: Path) -> None:
    predictor = Predictor()
    assert not predictor.model.kernel_model.uses_units and predictor.model.tensor_model.uses_units
    path = tmp_path / "bf16.onnx"
    onnx.save(matmul_model(TensorProto.BFLOAT16, m=4096, k=4096, n=4096), path)
    for gpu, peak_ratio in (("h200", 989.4 / 66.9), ("a100-sxm4-80gb", 312 / 19.5)):
        bf16 = predictor.predict(path, gpu=gpu).latency_ms
        fp32 = predictor.predict(path, gpu=gpu, precision="fp32").latency_ms
        assert 4 < fp32 / bf16 < peak_ratio, gpu  # faster, but not beyond the ratio of the two peaks
    # The V100 has no BF16 unit: the GEMM stays on the FP32 CUDA cores, priced by the FP32 model.
    v100 = predictor.predict(path, gpu="v100-sxm2-16gb")
    assert v100.latency_ms == predictor.predict(path, gpu="v100-sxm2-16gb", precision="fp32").latency_ms


def test_a_kernel_on_another_unit_is_named_by_it(tmp_path: Path) -> None:
    """The type head learned NeuSight's FP32 kernel names (``gemm_sgemm`` ...): a BF16 GEMM on tensor cores is
    named by its unit, not as an SGEMM; on a V100 (no BF16 unit) it is an SGEMM; TF32 convolutions by theirs."""
    predictor = Predictor()
    path = tmp_path / "bf16.onnx"
    onnx.save(matmul_model(TensorProto.BFLOAT16, m=4096, k=4096, n=4096), path)
    assert [k.type for k in predictor.predict(path, gpu="h200").kernels] == ["gemm_bf16_tensor"]
    assert [k.type for k in predictor.predict(path, gpu="h200", precision="fp8").kernels] == ["gemm_fp8_tensor"]
    assert [k.type for k in predictor.predict(path, gpu="v100-sxm2-16gb").kernels] == ["gemm_sgemm"]
    convs = [k.type for k in predictor.predict(EXAMPLE, gpu="a100-sxm4-80gb").kernels if k.category == "conv"]
    assert len(convs) == 20 and set(convs) == {"conv_tf32_tensor"}
    strict = [k.type for k in predictor.predict(EXAMPLE, gpu="a100-sxm4-80gb", tf32="off").kernels
              if k.category == "conv"]
    assert not any(t.endswith("_tensor") for t in strict)


class PeakEcho:
    """A stand-in kernel model: work = FLOPs at the peak it is handed."""

    uses_units = True

    def predict_work(self, kernels, devices):
        work = kernels.flops / (devices.compute_tflops * 1e9)
        return work, np.ones(len(work), dtype=bool)

    def predict_types(self, kernels, devices):
        return np.array(["gemm"] * len(kernels), dtype=object)


def test_a_units_aware_model_gets_each_gemms_unit_peak() -> None:
    """EndToEndModel hands a model that learned the kernel table's units the peak of each GEMM's unit (the FP32 path is
    ``--precision fp32`` on the BF16 file: without it, the kernel's own BF16 type sets its unit)."""
    from lilou.fusion.predict import predict_partition
    from lilou.latency.composition.end_to_end import describe_kernels


    predictor = Predictor()
    predictor.model.kernel_model = PeakEcho()
    graph = build_graph(matmul_model(TensorProto.BFLOAT16, m=4096, k=4096, n=4096))
    kernels = describe_kernels(graph, predict_partition(graph, "eager"))
    h200 = resolve_device("h200")
    flops = 2 * 4096 ** 3
    bf16 = predictor.model.kernel_work(kernels, [h200], 1, lambda d: precision_path("bf16", d)).work_ms
    fp32 = predictor.model.kernel_work(kernels, [h200], 1, lambda d: precision_path("bf16", d, "fp32")).work_ms
    assert float(bf16.max()) == pytest.approx(flops / (989.4 * 1e9), rel=1e-6)
    assert float(fp32.max()) == pytest.approx(flops / (66.9 * 1e9), rel=1e-6)


def test_the_tensor_model_prices_only_what_runs_off_the_fp32_cores() -> None:
    """The NeuSight-trained model keeps FP32 kernels; the tensor-core model gets BF16 GEMMs at their unit's peak."""
    from lilou.fusion.predict import predict_partition
    from lilou.latency.composition.end_to_end import describe_kernels


    predictor = Predictor()
    graph = build_graph(matmul_model(TensorProto.BFLOAT16, m=4096, k=4096, n=4096))
    kernels = describe_kernels(graph, predict_partition(graph, "eager"))
    h200 = resolve_device("h200")
    fp32_before = predictor.model.kernel_work(kernels, [h200], 1, lambda d: precision_path("bf16", d, "fp32")).work_ms
    predictor.model.tensor_model = PeakEcho()
    bf16 = predictor.model.kernel_work(kernels, [h200], 1, lambda d: precision_path("bf16", d)).work_ms
    fp32 = predictor.model.kernel_work(kernels, [h200], 1, lambda d: precision_path("bf16", d, "fp32")).work_ms
    assert float(bf16.max()) == pytest.approx(2 * 4096 ** 3 / (989.4 * 1e9), rel=1e-6)
    assert np.array_equal(fp32, fp32_before)


@pytest.mark.parametrize("gpu", ["a100-sxm4-80gb", "l4", "h100-sxm"])
def test_bf16_and_fp16_gemms_of_one_shape_are_priced_alike_where_their_tensor_rate_is_one(gpu: str) -> None:
    """Ampere, Ada and Hopper run dense FP16 and BF16 MMAs at one rate; the kernel model sees them as one unit
    (``UNIT_STAND_INS``). With a one-hot column each, learned from different sources (Vidur's FP16 rows,
    AIConfigurator's BF16 ones), a 64x1024x1024 GEMM on an A100 was priced 55 % slower in BF16 than in FP16."""
    from lilou.fusion.predict import predict_partition
    from lilou.latency.composition.end_to_end import describe_kernels

    predictor = Predictor()
    device = resolve_device(gpu)
    assert device.peak_tflops["bf16_tensor"] == device.peak_tflops["fp16_tensor"]
    for m, k, n in [(64, 1024, 1024), (256, 1024, 1024), (128, 4096, 4096), (1, 4096, 28672), (1, 14336, 4096),
                      (4096, 4096, 4096)]:
        work = {}
        for precision, dtype in [("fp16", TensorProto.FLOAT16), ("bf16", TensorProto.BFLOAT16)]:
            # both operands graph inputs (matmul_model makes an FP16 weight an initializer, a BF16 one an input)
            node = onnx.helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
            graph = build_graph(make_model([node], [tensor("x", [m, k], dtype), tensor("w", [k, n], dtype)],
                                           [tensor("y", [m, n], dtype)], []))
            kernels = describe_kernels(graph, predict_partition(graph, "eager"))
            work[precision] = float(predictor.model.kernel_work(
                kernels, [device], 1, lambda d, p=precision: precision_path(p, d), floored=False).work_ms.sum())
        assert work["bf16"] == pytest.approx(work["fp16"], rel=0.02), (m, k, n, work)


def test_bf16_without_tensor_cores_stays_slower_than_fp16() -> None:
    """The stand-in is for a BF16 tensor unit: a V100 has none, so a BF16 GEMM runs at FP32 CUDA-core rates."""
    from lilou.fusion.predict import predict_partition
    from lilou.latency.composition.end_to_end import describe_kernels

    predictor = Predictor()
    v100 = resolve_device("v100-sxm2-32gb")
    work = {}
    for precision, dtype in [("fp16", TensorProto.FLOAT16), ("bf16", TensorProto.BFLOAT16)]:
        graph = build_graph(matmul_model(dtype, m=512, k=4096, n=4096))
        kernels = describe_kernels(graph, predict_partition(graph, "eager"))
        work[precision] = float(predictor.model.kernel_work(
            kernels, [v100], 1, lambda d, p=precision: precision_path(p, d), floored=False).work_ms.sum())
    assert work["bf16"] > 3 * work["fp16"]


def test_fp16_on_pascal_is_fp32_math_not_the_slow_half_units() -> None:
    """A GTX 1080 Ti's FP16 units run at 1/64 of FP32; PyTorch never uses them for GEMMs or convolutions (cuBLAS and
    cuDNN compute in FP32). ResNet-18 in FP16 was predicted about 30x slower than in FP32 there."""
    predictor = Predictor()
    fp32 = predictor.predict(EXAMPLE, gpu="gtx-1080-ti", precision="fp32")
    fp16 = predictor.predict(EXAMPLE, gpu="gtx-1080-ti", precision="fp16")
    assert 0.5 * fp32.latency_ms < fp16.latency_ms <= fp32.latency_ms
    assert any(w.startswith("gtx-1080-ti: no tensor cores, so PyTorch runs FP16 convolutions with FP32 math")
               for w in fp16.warnings)


def test_int8_below_the_16_bit_rate_is_said() -> None:
    """B300 cut INT8 to 153.5 TOPS against 2,250 TFLOPS of BF16: INT8 serving priced 9.6x slower in TTFT with no word."""
    from lilou.latency.kernel_model.precision import slower_than_16_bit

    (note,) = slower_than_16_bit("int8", [resolve_device("b300"), resolve_device("b200")])
    assert note == ("INT8 tensor cores peak below the FP16/BF16 ones on b300 153.5 TOPS against 2250 TFLOPS (dense, "
                    "the GPU database's datasheet figures): INT8 GEMMs are priced slower than 16-bit ones there")
    assert slower_than_16_bit("int8", [resolve_device("b200")]) == []
    assert note in Predictor().predict(EXAMPLE, gpu="b300", precision="int8").warnings


def test_a_float64_model_is_fp64_and_never_faster_than_the_fp64_peak(tmp_path: Path) -> None:
    """A ``.double()`` export was read as FP32 (its GEMMs in TF32 on Ampere): ResNet-50 at batch 8 on a T4 was 27 ms
    where 65.7 GFLOPs at the T4's 0.254 TFLOPS of FP64 take 259 at least. It is FP64, each GEMM and convolution
    priced as its strict-FP32 twin with 8-byte tensors and never below the FP64 peak's roofline, and said."""
    path = tmp_path / "fp64.onnx"
    onnx.save(matmul_model(TensorProto.DOUBLE, m=1024, k=1024, n=1024), path)
    graph = build_graph(onnx.load(path))
    assert model_precision(graph).precision == "fp64" and model_precision(graph).shares == {"fp64": 1.0}
    predictor = Predictor()
    flops = 2 * 1024**3
    for gpu, peak in (("t4", 0.254), ("a10g", 0.547), ("a100-80gb", 19.4)):  # the A100's FP64 tensor cores: 2 x 9.7
        fp64, fp32 = predictor.predict(path, gpu=gpu), predictor.predict(path, gpu=gpu, precision="fp32")
        assert fp64.precision == "fp64" and fp64.kernels[0].type == "gemm_sgemm"  # never the TF32 tensor cores
        assert fp64.kernels[0].alone_ms >= flops / (peak * 1e9) * (1 - 1e-9)  # the kernel model, before the scale
        assert fp64.kernels[0].work_ms >= fp32.kernels[0].work_ms * (1 if gpu == "a100-80gb" else 8)  # 1:32, 1:64
        assert any(w.startswith(f"FP64 GEMMs: no source of the kernel table measured FP64; they are priced as strict-FP32 "
                                f"kernels on 8-byte tensors, never faster than the FP64 peak ({peak:g} TFLOPS")
                   for w in fp64.warnings)


@pytest.mark.parametrize("mode", ["off", "conv"])
def test_precision_tf32_with_tf32_off_or_conv_is_refused(capsys, mode: str) -> None:
    """--precision tf32 --tf32 off priced TF32 and dropped the --tf32 without a word (CLI and service alike)."""
    assert main(["infer", str(EXAMPLE), "--gpu", "a10g", "--precision", "tf32", "--tf32", mode]) == 2
    assert capsys.readouterr().err == (f"lilou: error: --precision tf32 runs FP32 matmuls and convolutions in TF32, "
                                       f"which --tf32 {mode} contradicts: give one of the two (--precision fp32 --tf32 "
                                       "MODE for FP32 with TF32 so)\n")
    with pytest.raises(LilouInputError, match="contradicts"):
        Predictor().rank(EXAMPLE, gpus=["a10g"], precision="TF32", tf32="off")


def test_a_cast_writes_the_type_it_names_whatever_a_value_info_says(tmp_path: Path) -> None:
    """onnxconverter-common's ``keep_io_types`` leaves the output Cast's value info at FP16 while it casts to FP32 (the
    graph output FLOAT; onnxruntime returns float32): the cast read as one to its own type, a view launching nothing,
    and the graph's output as FP16."""
    nodes = [onnx.helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             onnx.helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT, name="output_cast")]
    model = make_model(nodes, [tensor("x", [64, 1024], TensorProto.FLOAT16)], [tensor("y", [64, 1024])],
                       [weight("w", [1024, 1024], dtype="float16")])
    model.graph.value_info.append(tensor("y", [64, 1024], TensorProto.FLOAT16))  # the converter's stale one
    graph = build_graph(model)
    assert graph.outputs[0].dtype == "float32" and graph.dag.nodes["output_cast"]["bytes_written"] == 4 * 64 * 1024
    path = tmp_path / "fp16io.onnx"
    onnx.save(model, path)
    prediction = Predictor().predict(path, gpu="t4")
    assert [k.nodes for k in prediction.kernels] == [("mm",), ("output_cast",)]


def test_the_casts_an_onnxruntime_cpu_session_inserted_are_said() -> None:
    """A file an onnxruntime CPU session saved from an FP16 model computes the FP16 ops its CPU kernels lack in FP32,
    between casts named ``InsertedPrecisionFreeCast_*`` (BERT-base: 215, 45.3 ms on a T4 against 7.9 for the FP16 file
    it read): priced as saved, which nothing said."""
    nodes = [onnx.helper.make_node("Cast", ["x"], ["x32"], to=TensorProto.FLOAT, name="InsertedPrecisionFreeCast_x"),
             onnx.helper.make_node("MatMul", ["x32", "w"], ["y32"], name="mm"),
             onnx.helper.make_node("Cast", ["y32"], ["y"], to=TensorProto.FLOAT16, name="InsertedPrecisionFreeCast_y")]
    model = make_model(nodes, [tensor("x", [64, 1024], TensorProto.FLOAT16)], [tensor("y", [64, 1024], TensorProto.FLOAT16)],
                       [weight("w", [1024, 1024])])
    warnings = build_graph(model).warnings
    assert any(w.startswith("2 Cast(s) named InsertedPrecisionFreeCast_*: an onnxruntime CPU session saved this model")
               for w in warnings)


def test_the_cli_takes_a_precision_in_capitals_as_the_api_does(capsys) -> None:
    """`--precision FP16` was refused by the CLI's choices where the API and the service take it."""
    assert main(["infer", str(EXAMPLE), "--gpu", "t4", "--precision", "FP16", "--tf32", "OFF", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["precision"] == "fp16"


def test_a_bf16_or_int4_convolution_is_priced_as_the_fp16_one(zoo_onnx) -> None:
    """FP16 and BF16 run at one tensor-core rate, and no source measured a BF16 convolution: the BF16 unit (learned on
    GEMMs) priced ResNet-50's convolutions 21 % under FP16 on an A100 (1.309 against 1.666 ms; 3.44 against 3.79 ms
    end to end). A BF16 convolution is priced as the FP16 one, still said to be unmeasured; INT4 (weight-only W4A16)
    convolutions, which no runtime runs, as FP16 ones too. GEMMs keep their own unit."""
    from lilou.latency.kernel_model.precision import kernel_unit

    predictor = Predictor(launch_gap_ms=0.0)
    path = zoo_onnx("resnet50", batch=32)
    for gpu in ("a100-sxm4-80gb", "a10g"):
        device = resolve_device(gpu)
        conv_ms = {}
        for precision in ("fp16", "bf16", "int4"):
            result = predictor.predict(path, gpu=gpu, precision=precision)
            conv_ms[precision] = sum(k.latency_ms for k in result.kernels if k.type.startswith("conv"))
            assert kernel_unit("conv", precision_path(precision, device), device) == "fp16_tensor"
            if precision == "bf16":
                assert any(w.startswith("BF16 convolutions on ") and "no measured neighbour" in w
                           for w in result.warnings)
        assert conv_ms["bf16"] == pytest.approx(conv_ms["fp16"], rel=1e-6), gpu
        assert conv_ms["int4"] == pytest.approx(conv_ms["fp16"], rel=1e-6), gpu
        assert kernel_unit("gemm", precision_path("bf16", device), device) == "bf16_tensor"
        assert kernel_unit("gemm", precision_path("int4", device), device) == "bf16_tensor"
    t4 = resolve_device("t4")  # no BF16 tensor cores: BF16 convolutions stay on the FP32 CUDA cores there
    assert kernel_unit("conv", precision_path("bf16", t4), t4) == "fp32"


def test_precision_tf32_is_fp32_with_tf32_on_interval_and_warnings_included(zoo_onnx) -> None:
    """TF32 runs matmuls and convolutions only: ``--precision tf32`` looked its elementwise, softmax and norm kernels up
    as unmeasured "tf32" ones (ResNet-50 batch 32 on an A100: interval [1.66, 34.55] ms, extrapolated share 1.0,
    against [4.62, 11.00] and 0.657 for ``--precision fp32 --tf32 on`` at the same 7.35 ms), and said on a T4 both
    that the model was "priced as run in TF32" and that the T4 has no TF32 (strict FP32). Both spellings now agree."""
    predictor = Predictor(launch_gap_ms=0.0)
    path = zoo_onnx("resnet50", batch=32)
    for gpu in ("a100-sxm4-80gb", "t4"):
        tf32 = predictor.predict(path, gpu=gpu, precision="tf32").to_json()
        fp32 = predictor.predict(path, gpu=gpu, precision="fp32", tf32="on").to_json()
        assert {k: v for k, v in tf32.items() if k != "precision"} == {k: v for k, v in fp32.items() if k != "precision"}
        assert tf32["precision"] == ("tf32" if gpu != "t4" else "fp32")
        assert not any("priced as run in TF32" in w for w in tf32["warnings"])
    assert fp32["tf32"] == "off" and any(w.startswith("t4: no TF32 tensor cores") for w in tf32["warnings"])
    a100 = predictor.predict(path, gpu="a100-sxm4-80gb", precision="tf32")
    assert a100.extrapolated_share < 0.9 and a100.interval_ms[1] < 2 * a100.latency_ms


def test_the_tvm_backend_runs_strict_fp32_unless_tf32_is_asked_for() -> None:
    """TVM's generated kernels do not read PyTorch's TF32 flags: ``--backend tvm`` took eager's default (TF32
    convolutions from compute capability 8.0; ResNet-50 b32 on an A100 4.93 ms against 15.32 strict, reported
    "conv"). Its default is strict FP32 now, and TF32 asked of it is said to be an assumption about TVM's schedules."""
    tvm, eager = Predictor(backend="tvm"), Predictor()
    default = tvm.predict(EXAMPLE, gpu="a100-sxm4-80gb")
    strict = tvm.predict(EXAMPLE, gpu="a100-sxm4-80gb", tf32="off")
    assert default.tf32 == "off" and default.latency_ms == strict.latency_ms and default.warnings == strict.warnings
    assert not any("TVM's schedules" in w for w in default.warnings)
    for mode in ("conv", "on"):
        asked = tvm.predict(EXAMPLE, gpu="a100-sxm4-80gb", tf32=mode)
        assert asked.tf32 == mode and asked.latency_ms < strict.latency_ms
        assert any(w.startswith("--backend tvm with TF32: priced assuming TVM's schedules") for w in asked.warnings)
    assert eager.predict(EXAMPLE, gpu="a100-sxm4-80gb").tf32 == "conv"  # PyTorch eager's default is kept
    assert [e.tf32 for e in tvm.rank(EXAMPLE, gpus=["a100-sxm4-80gb"]).entries] == ["off"]


def test_the_tvm_backend_says_when_tvm_cannot_import_the_graph(tmp_path: Path) -> None:
    """TVM's importer refuses the ops docs/fusion.md lists (LSTM, GRU, RNN, Celu, SoftmaxCrossEntropyLoss); a
    --backend tvm prediction of such a file gave a TVM latency without a word. Read from the graph, TVM not imported."""
    celu = tmp_path / "celu.onnx"
    nodes = [onnx.helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             onnx.helper.make_node("Celu", ["h"], ["y"], name="node_celu")]
    onnx.save(make_model(nodes, [tensor("x", [64, 64])], [tensor("y", [64, 64])], [weight("w", [64, 64])]), celu)
    for model in (celu, EXAMPLE):
        tvm = Predictor(backend="tvm").predict(model, gpu="a100-sxm4-80gb").warnings
        eager = Predictor().predict(model, gpu="a100-sxm4-80gb").warnings
        said = [w for w in tvm if w.startswith("--backend tvm: TVM cannot compile this model as exported")]
        assert not any("TVM cannot compile" in w for w in eager)
        assert said == ([] if model == EXAMPLE else [
            "--backend tvm: TVM cannot compile this model as exported: its ONNX importer cannot import Celu (first: "
            "node 'node_celu'); the latency is that of kernels TVM would fuse, had it imported the file (`lilou fuse "
            "--backend tvm --oracle` checks)"])
