"""A precision asked of (or read from a file on) a GPU that has no unit for it: what is priced there, and said.

The capabilities come from the GPU database (``int8`` is DP4A, ``int8_tensor``/``fp16_tensor``/``fp8_tensor`` the
tensor cores) and TensorRT's hardware-precision matrix (docs/kernel_model.md, "Precision x architecture"). The
quantized ResNet is the real onnxruntime QDQ fixture of tests/test_quantized.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto

from lilou.api import Predictor
from lilou.hardware import resolve_device
from lilou.latency.kernel_model.precision import kernel_unit, precision_path
from tests.test_precision import EXAMPLE, matmul_model

QDQ_RESNET = Path(__file__).resolve().parent / "data" / "quantized" / "resnet-qdq.onnx"


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor()


def test_int8_on_each_kind_of_gpu_without_int8_tensor_cores_says_what_it_prices(predictor) -> None:
    """V100 (DP4A at half its FP16 tensor cores' peak), P4 (DP4A, no fast FP16), P100 (no INT8 path at all): before,
    the V100 line promised DP4A "often no faster than FP16" while the whole-model INT8 gain came from 1-byte norms and
    softmax unsaid, and the P100 line read "no unit for INT8 GEMMs ... as measured FP32 kernels" with 1-byte tensors."""
    volta = predictor.predict(QDQ_RESNET, gpu="v100-sxm2-16gb").warnings
    assert ("v100-sxm2-16gb: no INT8 tensor cores, so the INT8 convolutions are priced on the CUDA cores' DP4A "
            "instructions, whose peak is 50% of the FP16 tensor cores': any INT8 gain over FP16 here comes from "
            "the other kernels' 1-byte tensors (norms, softmax, elementwise: INT8 as the file stores them), which "
            "TensorRT keeps only between layers it runs in INT8; it runs each layer on the faster of DP4A and the FP16 "
            "tensor cores, so the engine it builds is no slower than the faster of this prediction and --precision "
            "fp16's") in volta
    pascal = predictor.predict(QDQ_RESNET, gpu="p4").warnings
    assert ("p4: no INT8 tensor cores, so the INT8 convolutions run on the CUDA cores' DP4A instructions "
            "(four INT8 products per lane and instruction), priced at the database's INT8 CUDA-core peak (their FP16 "
            "units run at 1/64 of FP32's: no FP16 engine is faster)") in pascal
    gp100 = predictor.predict(QDQ_RESNET, gpu="p100-pcie-16gb").warnings
    assert ("p100-pcie-16gb: no INT8 path (no INT8 tensor cores, and no DP4A before compute capability 6.1: TensorRT "
            "runs no INT8 there, and onnxruntime's CUDA EP runs a QDQ file's float ops between its quantize and "
            "dequantize kernels): the INT8 convolutions are priced at FP32 CUDA-core rates, their tensors and "
            "the other kernels' in INT8 as the file stores them: a lower bound on the FP32 run, which --precision fp32 "
            "prices") in gp100
    assert not any("no unit for INT8" in w for w in gp100)
    # a GPU with INT8 tensor cores gets none of these lines
    assert not any("INT8 tensor cores" in w or "INT8 path" in w for w in predictor.predict(QDQ_RESNET, gpu="t4").warnings)


def test_int8_asked_by_option_names_the_option_and_the_math_families_present(predictor, tmp_path: Path) -> None:
    path = tmp_path / "fp32.onnx"
    onnx.save(matmul_model(TensorProto.FLOAT), path)
    lines = predictor.predict(path, gpu="p100-pcie-16gb", precision="int8").warnings
    assert any(w.startswith("p100-pcie-16gb: no INT8 path") and "the INT8 GEMMs are priced at FP32 CUDA-core rates, "
               "their tensors and the other kernels' in INT8 as --precision int8 stores them" in w for w in lines)


def test_a_rank_pools_the_int8_lines_by_kind_of_gpu(predictor) -> None:
    ranking = predictor.rank(QDQ_RESNET, gpus=["v100-sxm2-16gb", "v100-pcie-32gb", "p100-pcie-16gb", "gtx-1080-ti",
                                               "t4"])
    heads = [w.split(":")[0] for w in ranking.warnings if "INT8 tensor cores" in w or "INT8 path" in w]
    assert heads == ["v100-pcie-32gb, v100-sxm2-16gb", "gtx-1080-ti", "p100-pcie-16gb"]


def test_the_tf32_label_describes_fp32_work_only(predictor) -> None:
    """``--precision int8`` (fp16, bf16, fp8) prices no FP32 matmul or convolution: ``tf32`` was "conv" on Ampere and
    newer, as if some ran in TF32. A file's own precision keeps PyTorch's default: its FP32 islands run so."""
    a100 = resolve_device("a100-sxm4-80gb")
    assert [precision_path("fp32", a100, precision=p).tf32 for p in ("int8", "fp16", "bf16", "fp8", "fp32", "tf32")] \
        == ["off", "off", "off", "off", "conv", "on"]
    assert precision_path("int8", a100).tf32 == "conv"  # a quantized file's FP32 layers run PyTorch's default
    assert predictor.predict(EXAMPLE, gpu="a100-sxm4-80gb", precision="int8").tf32 == "off"
    assert [e.tf32 for e in predictor.rank(EXAMPLE, gpus=["a10g"], precision="fp16").entries] == ["off"]
    # the unit of an FP32 layer in a quantized file is unchanged: still TF32 on an A100
    assert kernel_unit("conv", precision_path("fp32", a100), a100) == "tf32_tensor"


def test_a_tf32_option_the_precision_makes_moot_is_said_once(predictor, capsys) -> None:
    """``--precision int8 --tf32 on`` read ``"tf32": "off"`` and no word of the option dropped (audit ua43d, finding 5);
    the default (no ``--tf32``), ``--tf32 off`` and ``--precision fp32`` say nothing."""
    from lilou.cli import main

    def moot(**options) -> list[str]:
        return [w for w in predictor.predict(EXAMPLE, gpu="a100-sxm4-80gb", **options).warnings if "--tf32" in w]

    assert moot(precision="int8", tf32="on") == ["--tf32 on changes nothing under --precision int8: no matmul or "
                                                 "convolution is priced in FP32 there, so none runs in TF32 (tf32: off)"]
    assert [len(moot(precision=p, tf32="conv")) for p in ("fp16", "bf16", "fp8")] == [1, 1, 1]
    assert moot(precision="int8") == moot(precision="fp16", tf32="off") == []
    assert not any(w.startswith("--tf32 on changes") for w in predictor.predict(EXAMPLE, gpu="a100-sxm4-80gb",
                                                                                precision="fp32", tf32="on").warnings)
    ranking = predictor.rank(EXAMPLE, gpus=["a100-sxm4-80gb", "h100-sxm", "t4"], precision="fp8", tf32="on")
    assert sum(w.startswith("--tf32 on changes nothing") for w in ranking.warnings) == 1
    assert main(["infer", str(EXAMPLE), "--gpu", "a10g", "--precision", "fp16", "--tf32", "on", "--format", "json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert sum(w.startswith("--tf32 on changes nothing under --precision fp16") for w in warnings) == 1


def test_a_file_without_fp32_math_runs_nothing_in_tf32_and_says_so_when_asked(predictor) -> None:
    """An FP16 file under ``--tf32 on`` read ``"tf32": "on"`` with no word, where ``--precision fp16 --tf32 on`` on the
    FP32 file read ``"off"`` and said the option changed nothing (audit ua44b, finding 7)."""
    typed = Path(__file__).parent / "data" / "typed"
    asked = predictor.predict(typed / "bert-fp16.onnx", gpu="a100-sxm4-80gb", tf32="on")
    assert asked.precision == "fp16" and asked.tf32 == "off"
    assert [w for w in asked.warnings if "--tf32" in w] == [
        "--tf32 on changes nothing for this FP16 file: no matmul or convolution is stored in FP32, so none runs in "
        "TF32 (tf32: off)"]
    default = predictor.predict(typed / "bert-fp16.onnx", gpu="a100-sxm4-80gb")
    assert default.tf32 == "off" and not any("--tf32" in w for w in default.warnings)
    assert default.latency_ms == asked.latency_ms
    # an FP32 file, and a quantized one's FP32 layers, still run TF32 as asked
    assert predictor.predict(EXAMPLE, gpu="a100-sxm4-80gb", tf32="on").tf32 == "on"


def test_fp8_on_a_gpu_without_tensor_cores_says_no_runtime_runs_it(predictor, tmp_path: Path) -> None:
    """Before: "p100-pcie-16gb: no unit for FP8 GEMMs; they are predicted at FP32 CUDA-core rates, as measured FP32
    kernels", as if a runtime ran them so."""
    path = tmp_path / "fp32.onnx"
    onnx.save(matmul_model(TensorProto.FLOAT), path)
    lines = predictor.predict(path, gpu="p100-pcie-16gb", precision="fp8").warnings
    assert ("p100-pcie-16gb: no known runtime runs FP8 GEMMs there (no tensor cores: FP8 needs compute capability 8.9, "
            "weight-only kernels 8.0); they are predicted at FP32 CUDA-core rates with the format's tensors, a lower "
            "bound on what a program that upcasts them would take") in lines
    assert not any("no unit for FP8" in w for w in lines)
