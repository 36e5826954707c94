"""The benchmark summary holds each figure against the target of the issue that set it."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _summary():
    spec = importlib.util.spec_from_file_location("_test_bench_summary", REPO / "scripts" / "bench_summary.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _status(rows: list[dict], start: str) -> tuple[object, str, str]:
    (row,) = [r for r in rows if r["metric"].startswith(start)]
    return row["value"], row["target"], row["status"]


def test_summary_flags_each_figure_against_its_issue_target(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "e2e.json").write_text(json.dumps({
        "mode": "leave-one-GPU-out", "fusion": "predicted", "overall": {"n": 37, "model_mape": 7.2, "roofline_mape": 13.8},
        "per_gpu": [{"gpu": "t4", "n": 5, "model_mape": 7.6, "roofline_mape": 32.5}]}))
    (bench / "speed.json").write_text(json.dumps({"cases": [], "ratios": {
        "infer BERT-large / onnx load + infer_shapes (target <= 1.5)": 4.7,
        "rank ResNet-50 all devices / infer ResNet-50 (target <= 1.2)": 1.13}}))
    (bench / "intervals.json").write_text(json.dumps({
        "kernel_summary": [{"family": "softmax", "dtype": "fp32", "groups": 5, "rows": 8750, "coverage": 0.848,
                            "median_width": 1.27},
                           {"family": "layernorm", "dtype": "fp32", "groups": 5, "rows": 7000, "coverage": 0.974,
                            "median_width": 0.86},
                           {"family": "gemm", "dtype": "bf16", "groups": 8, "rows": 48000, "coverage": 0.898,
                            "median_width": 0.92}],
        "e2e_summary": {"folds": 5, "labels": 37, "coverage": 0.933, "median_width": 0.38}}))
    (bench / "kernel_table.json").write_text(json.dumps({"leave_one_gpu_out": [
        {"source": "aiconfigurator", "dtype": "bf16", "family": "gemm", "gpus": 8, "rows": 48000, "model_mape": 17.7,
         "roofline_mape": 64.3, "neusight_mape": 238.4},
        {"source": "vidur", "dtype": "fp16", "family": "gemm", "gpus": 2, "rows": 12000, "model_mape": 9.2,
         "roofline_mape": 22.7, "neusight_mape": 20.6},
        {"source": "aiconfigurator", "dtype": "fp8", "family": "gemm", "gpus": 7, "rows": 42000, "model_mape": 27.0,
         "roofline_mape": 32.2, "neusight_mape": 76.6}]}))
    (bench / "fusion.json").write_text(json.dumps([
        {"split": "test", "backend": "eager", "method": "gnn", "graphs": "all", "n": 86, "edge_accuracy": 0.9977,
         "exact_partition": 0.802, "exact_kernels": 0.802},
        {"split": "test", "backend": "eager", "method": "gnn", "graphs": "dynamo", "n": 86, "edge_accuracy": 0.9977,
         "exact_partition": 0.802, "exact_kernels": 0.802},
        {"split": "test-op", "backend": "tvm", "method": "replay", "graphs": "all", "n": 67, "edge_accuracy": 0.98,
         "exact_partition": 0.925}]))
    rows, missing = _summary().summary(bench)
    assert _status(rows, "edge accuracy eager gnn, leave-family-out") == (pytest.approx(99.77), ">= 99.5 %", "ok")
    assert _status(rows, "exact partition eager gnn, leave-family-out") == (pytest.approx(80.2), ">= 90 %", "MISS")
    assert _status(rows, "exact partition tvm replay, leave-op-out") == (pytest.approx(92.5), "", "")  # a baseline: no target
    assert len([r for r in rows if r["bench"] == "fusion"]) == 5  # one group per split, no names-hidden rows
    assert _status(rows, "MAPE overall") == (7.2, "<= 6 %", "MISS")  # issue 15, not issue 5's 8 %
    assert _status(rows, "MAPE t4") == (7.6, "<= 12 %", "ok")
    assert _status(rows, "infer BERT-large / onnx") == (4.7, "<= 1.5x", "MISS")
    assert _status(rows, "rank ResNet-50 all devices") == (1.13, "<= 1.2x", "ok")
    assert _status(rows, "coverage softmax fp32")[1:] == ("86-94 %", "MISS")
    assert _status(rows, "coverage layernorm fp32")[1:] == ("86-94 %", "MISS")  # over-covered misses too
    assert _status(rows, "coverage gemm bf16")[1:] == ("86-94 %", "ok")
    assert _status(rows, "coverage end to end")[1:] == ("86-94 %", "ok")
    assert _status(rows, "LOGO MAPE aiconfigurator bf16 gemm") == (17.7, "<= 10 %", "MISS")
    assert _status(rows, "LOGO MAPE vidur fp16 gemm") == (9.2, "<= 10 %", "ok")
    assert _status(rows, "LOGO MAPE aiconfigurator fp8 gemm") == (27.0, "", "")  # no target for FP8
    assert set(missing) == {"data", "graph", "kernels", "plan_speed", "llm"}
