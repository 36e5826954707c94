"""Precision from ONNX tensor types, PyTorch's TF32 defaults by compute capability, and what is said about them."""
from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto

from lilou.api import Predictor
from lilou.cli import main
from lilou.errors import LilouInputError
from lilou.graph.dag import build_graph
from lilou.graph.precision import model_precision
from lilou.hardware import resolve_device
from lilou.latency.precision import default_tf32, precision_path
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
    assert (result["precision"], result["tf32"]) == ("bf16", "conv")
    assert any("computes in BF16" in w and "FP32 measurements only" in w for w in result["warnings"])


def test_fp32_on_ampere_warns_of_tf32_convolutions_unless_turned_off(capsys) -> None:
    predictor = Predictor()
    default = predictor.predict(EXAMPLE, gpu="a10g")
    assert (default.precision, default.tf32) == ("fp32", "conv")
    assert any("TF32" in w for w in default.warnings)
    strict = predictor.predict(EXAMPLE, gpu="a10g", tf32="off")
    assert strict.tf32 == "off" and not any("TF32" in w for w in strict.warnings)
    assert strict.latency_ms == default.latency_ms  # the shipped model has no TF32 path: only the words differ
    turing = predictor.predict(EXAMPLE, gpu="t4")
    assert turing.tf32 == "off" and not any("TF32" in w or "precision" in w for w in turing.warnings)


def test_precision_override_and_rank(capsys) -> None:
    predictor = Predictor()
    forced = predictor.predict(EXAMPLE, gpu="a100-80gb", precision="fp16")
    assert forced.precision == "fp16"
    assert any("tensor sizes still follow the file's FP32 types" in w for w in forced.warnings)
    ranking = predictor.rank(EXAMPLE, gpus=["t4", "a10g"])
    assert {(e.gpu, e.tf32) for e in ranking} == {("t4", "off"), ("a10g", "conv")}
    assert all(set(entry) == {"gpu", "mig", "latency_ms", "precision", "tf32"} for entry in ranking.to_json())
    with pytest.raises(LilouInputError, match="unknown precision"):
        predictor.predict(EXAMPLE, gpu="t4", precision="fp64")
    with pytest.raises(LilouInputError, match="unknown --tf32"):
        predictor.rank(EXAMPLE, gpus=["t4"], tf32="maybe")
    assert main(["infer", str(EXAMPLE), "--gpu", "t4", "--precision", "fp64"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--precision" in err
