"""precision_path: what runs a prediction's precision on each device (native, weight_only, emulated, no_runtime), in
infer's, rank's and plan's JSON and tables; a plan counts no device where no runtime runs the precision (audit ua44b,
finding 1: `plan --precision fp8` said "6 of 6 devices meet the SLO" and ranked V100 and T4 among the cheapest)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lilou.cli import main
from lilou.hardware import resolve_device
from lilou.latency.kernel_model.precision import PRECISION_PATHS, precision_path, precision_support

DATA = Path(__file__).parent / "data"
BERT = str(DATA / "quantized" / "bert.onnx")           # FP32 BERT: GEMMs, no convolution
RESNET_QDQ = str(DATA / "quantized" / "resnet-qdq.onnx")  # INT8 QDQ ResNet: convolutions
FP8_GPUS = "t4,v100-sxm2-32gb,a100-sxm4-80gb,h100-sxm"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def verdict(gpu: str, precision: str, families=("gemm",)) -> str:
    device = resolve_device(gpu)
    return precision_support(device, [(precision_path("fp32", device, precision), families)]).path


@pytest.mark.parametrize(("gpu", "precision", "families", "expected"), [
    ("h100-sxm", "fp8", ("gemm",), "native"),
    ("l4", "fp8", ("gemm", "conv"), "native"),
    ("a100-sxm4-80gb", "fp8", ("gemm",), "weight_only"),      # vLLM's FP8 Marlin: W8A16
    ("a100-sxm4-80gb", "fp8", ("gemm", "conv"), "no_runtime"),  # no runtime runs weight-only convolutions
    ("t4", "fp8", ("gemm",), "no_runtime"),                    # Marlin needs 8.0
    ("v100-sxm2-32gb", "fp8", ("gemm",), "no_runtime"),
    ("p100-pcie-16gb", "fp8", ("gemm",), "no_runtime"),        # no tensor cores at all
    ("h100-sxm", "fp4", ("gemm",), "weight_only"),
    ("p100-pcie-16gb", "int8", ("conv",), "no_runtime"),       # no INT8 tensor cores, no DP4A
    ("m40-24gb", "int8", ("gemm",), "no_runtime"),
    ("v100-sxm2-32gb", "int8", ("conv",), "native"),           # DP4A, as TensorRT runs it
    ("p4", "int8", ("conv",), "native"),
    ("t4", "int8", ("gemm", "conv"), "native"),
    ("p100-pcie-16gb", "fp16", ("gemm",), "emulated"),         # PyTorch: FP32 math on 16-bit tensors
    ("v100-sxm2-32gb", "bf16", ("gemm",), "emulated"),
    ("v100-sxm2-32gb", "fp16", ("gemm",), "native"),
    ("a100-sxm4-80gb", "int4", ("gemm",), "weight_only"),      # W4A16
    ("v100-sxm2-32gb", "tf32", ("gemm",), "native"),           # strict FP32 there, what runs (its row says fp32)
    ("p100-pcie-16gb", "fp8", (), "native"),                   # no GEMM nor convolution: nothing to run in FP8
])
def test_verdict_per_device_comes_from_the_gpu_database(gpu, precision, families, expected):
    assert verdict(gpu, precision, families) == expected
    assert expected in PRECISION_PATHS


def test_rank_json_rows_carry_the_path_its_reason_and_infers_precision_warnings(capsys):
    code, out, err = run(capsys, "rank", RESNET_QDQ, "--gpus", "p100-pcie-16gb,m40,v100-sxm2-32gb,t4", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert isinstance(rows, list)  # the JSON contract: still a bare list, the new facts in its rows
    paths = {r["gpu"]: r["precision_path"] for r in rows}
    assert paths == {"p100-pcie-16gb": "no_runtime", "m40-24gb": "no_runtime", "v100-sxm2-32gb": "native",
                     "t4": "native"}
    p100 = next(r for r in rows if r["gpu"] == "p100-pcie-16gb")
    assert p100["precision_note"] == ("no INT8 path on p100-pcie-16gb (no INT8 tensor cores, no DP4A): a lower bound")
    assert next(r for r in rows if r["gpu"] == "t4")["precision_note"] == ""
    # each row's precision warnings are those infer gives on that device
    code, out, err = run(capsys, "infer", RESNET_QDQ, "--gpu", "p100-pcie-16gb", "--format", "json")
    assert code == 0, err
    infer = json.loads(out)
    assert (infer["precision_path"], infer["precision_note"]) == ("no_runtime", p100["precision_note"])
    assert len(p100["precision_warnings"]) == 1 and p100["precision_warnings"][0].startswith(
        "p100-pcie-16gb: no INT8 path (no INT8 tensor cores, and no DP4A before compute capability 6.1")
    assert set(p100["precision_warnings"]) <= set(infer["warnings"])
    v100 = next(r for r in rows if r["gpu"] == "v100-sxm2-32gb")
    assert any(w.startswith("v100-sxm2-32gb: no INT8 tensor cores, so the INT8 convolutions are priced on the CUDA "
                            "cores' DP4A") for w in v100["precision_warnings"])


def test_rank_fp8_json_tells_native_weight_only_and_no_runtime_apart(capsys):
    code, out, err = run(capsys, "rank", BERT, "--precision", "fp8", "--gpus", FP8_GPUS + ",p100-pcie-16gb",
                         "--format", "json")
    assert code == 0, err
    rows = {r["gpu"]: r for r in json.loads(out)}
    assert {gpu: r["precision_path"] for gpu, r in rows.items()} == {
        "h100-sxm": "native", "a100-sxm4-80gb": "weight_only", "t4": "no_runtime", "v100-sxm2-32gb": "no_runtime",
        "p100-pcie-16gb": "no_runtime"}
    assert rows["t4"]["precision_note"] == ("no known runtime runs FP8 GEMMs on t4 (FP8 needs compute capability 8.9, "
                                            "weight-only kernels 8.0): a lower bound")
    assert rows["a100-sxm4-80gb"]["precision_note"] == (
        "FP8 GEMMs run weight-only on a100-sxm4-80gb: FP8 weights, FP16 activations on the FP16 tensor cores (no FP8 "
        "tensor cores)")
    assert all(r["precision"] == "fp8" for r in rows.values())


def test_rank_table_marks_rows_not_run_natively(capsys):
    code, out, err = run(capsys, "rank", BERT, "--precision", "fp8", "--gpus", FP8_GPUS)
    assert code == 0, err
    lines = out.splitlines()
    assert any("t4" in line and "fp8 no runtime!" in line for line in lines)
    assert any("v100-sxm2-32gb" in line and "fp8 no runtime!" in line for line in lines)
    assert any("a100-sxm4-80gb" in line and "fp8 weight-only" in line for line in lines)
    assert not any("h100-sxm" in line and ("runtime!" in line or "weight-only" in line) for line in lines)
    assert any(line.startswith("no runtime!: no known runtime runs the format on that device") for line in lines)
    # a ranking run natively everywhere keeps its old columns
    code, out, err = run(capsys, "rank", BERT, "--gpus", FP8_GPUS)
    assert code == 0 and not any("┃ #" in line and "precision" in line for line in out.splitlines())
    assert "no runtime!" not in out


def test_plan_does_not_count_a_device_no_runtime_runs_the_precision_on(capsys):
    code, out, err = run(capsys, "plan", BERT, "--slo-ms", "2000", "--precision", "fp8", "--gpus", FP8_GPUS,
                         "--batches", "1", "--format", "json")
    assert code == 0, err
    plan = json.loads(out)
    paths = {e["device"]: e for e in plan["plan"]}  # (the order is the plan's throughput's, a near tie at batch 1)
    assert {device: e["precision_path"] for device, e in paths.items()} == {"h100-sxm": "native",
                                                                           "a100-sxm4-80gb": "weight_only"}
    assert plan["unmet"] == [
        {"device": "t4", "precision_path": "no_runtime",
         "reason": "precision: no known runtime runs FP8 GEMMs on t4 (FP8 needs compute capability 8.9, weight-only "
                   "kernels 8.0): a lower bound"},
        {"device": "v100-sxm2-32gb", "precision_path": "no_runtime",
         "reason": "precision: no known runtime runs FP8 GEMMs on v100-sxm2-32gb (FP8 needs compute capability 8.9, "
                   "weight-only kernels 8.0): a lower bound"}]
    assert paths["a100-sxm4-80gb"]["precision_note"].startswith("FP8 GEMMs run weight-only on a100-sxm4-80gb")
    code, out, err = run(capsys, "plan", BERT, "--slo-ms", "2000", "--precision", "fp8", "--gpus", FP8_GPUS,
                         "--batches", "1")
    assert code == 0, err
    assert "2 of 4 devices meet the SLO" in out
    assert "2 of 4 devices left out: 2 for the precision (no runtime runs it there) (t4, v100-sxm2-32gb)" in out
    assert any("a100-sxm4-80gb" in line and "fp8 weight-only" in line for line in out.splitlines())


def test_plan_of_devices_none_runs_the_precision_on_is_empty_and_says_why(capsys):
    code, out, err = run(capsys, "plan", RESNET_QDQ, "--slo-ms", "1000", "--gpus", "p100-pcie-16gb,m40",
                         "--batches", "1", "--format", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["plan"] == []
    assert [u["precision_path"] for u in plan["unmet"]] == ["no_runtime", "no_runtime"]
    assert plan["message"] == ("no device meets the SLO of 1000 ms: no known runtime runs the precision on any of the "
                               "2 device(s) (first: no INT8 path on p100-pcie-16gb (no INT8 tensor cores, no DP4A): a "
                               "lower bound)")


def test_infer_table_says_the_path_where_not_native(capsys):
    code, out, err = run(capsys, "infer", BERT, "--gpu", "a100-sxm4-80gb", "--precision", "fp8", "--top", "0")
    assert code == 0, err
    assert ("precision path: weight only: FP8 GEMMs run weight-only on a100-sxm4-80gb: FP8 weights, FP16 activations "
            "on the FP16 tensor cores (no FP8 tensor cores)") in out
    code, out, err = run(capsys, "infer", BERT, "--gpu", "h100-sxm", "--precision", "fp8", "--top", "0")
    assert code == 0 and "precision path" not in out


def test_a_mixed_files_other_precision_counts_in_its_verdict():
    """bert-fp16-half32 reads FP32 (its dominant precision) but runs half its GEMMs in FP16: on a P100, which has no
    FP16 tensor cores, those run with FP32 math, so the prediction is emulated, not native."""
    from lilou.api import Predictor

    predictor = Predictor()
    mixed = str(DATA / "typed" / "bert-fp16-half32.onnx")
    p100, v100 = predictor.predict_many(mixed, ["p100-pcie-16gb", "v100-sxm2-32gb"])
    assert (p100.precision, p100.precision_path) == ("fp32", "emulated")
    assert p100.precision_note == ("FP16 GEMMs run with FP32 math on p100-pcie-16gb's CUDA cores (no FP16 tensor "
                                   "cores)")
    assert (v100.precision_path, v100.precision_note) == ("native", "")


def test_a_file_stored_in_fp8_has_no_runtime_where_only_weight_only_kernels_would_run_it(capsys):
    """ModelOpt's FP8 BERT is TensorRT's file: on an A100 (no FP8 tensor cores) it read ``weight_only``, and plan
    recommended A100s, A30s and RTX 30xx for it, while its own warning said TensorRT cannot run it there (audit ua44d,
    finding 4). ``--precision fp8`` on the float file stays weight-only there: what vLLM's Marlin runs."""
    code, out, err = run(capsys, "rank", str(DATA / "quantized" / "bert-modelopt-fp8.onnx"), "--gpus",
                         "a100-sxm4-80gb,h100-sxm", "--format", "json")
    assert code == 0, err
    rows = {row["gpu"]: row for row in json.loads(out)}
    assert (rows["h100-sxm"]["precision_path"], rows["a100-sxm4-80gb"]["precision_path"]) == ("native", "no_runtime")
    assert rows["a100-sxm4-80gb"]["precision_note"].startswith(
        "no known runtime runs the file's FP8 GEMMs on a100-sxm4-80gb: TensorRT needs FP8 tensor cores (compute "
        "capability 8.9)")
    assert verdict("a100-sxm4-80gb", "fp8") == "weight_only"
