"""Where the time goes: NeuSight's per-node end-to-end measurements by category, and the predicted split."""
from __future__ import annotations

import csv

import pytest

from lilou.data.neusight import load_e2e
from lilou.fusion.predict import predict_partition
from lilou.graph.dag import load_graph
from lilou.latency.composition.breakdown import (CATEGORIES, kernel_category, measured_breakdown, node_category,
                                                predicted_breakdown)
from lilou.latency.evaluation.e2e_results import EvalResult, EvalRow
from lilou.latency.composition.end_to_end import describe_kernels
from tests.conftest import REPO


def _label(datasets_dir, gpu: str, model: str, batch: int):
    return next(lb for lb in load_e2e(datasets_dir)
                if (lb.gpu, lb.model, lb.batch, lb.fusion) == (gpu, model, batch, False))


@pytest.mark.parametrize(("op", "target", "category"), [
    ("call_module", "bert.encoder.layer.0.output.dense", "gemm"),
    ("call_module", "bert.encoder.layer.0.output.LayerNorm", "layernorm"),
    ("call_module", "bert.embeddings.word_embeddings", "other"),
    ("call_module", "bert.pooler.activation", "elementwise"),
    ("call_module", "bert.encoder.layer.0.attention.self.dropout", "other"),
    ("call_module", "transformer.h.0.ln_1", "layernorm"),
    ("call_module", "transformer.ln_f", "layernorm"),
    ("call_module", "transformer.wte", "other"),
    ("call_module", "lm_head", "gemm"),
    ("call_module", "model.decoder.layers.0.self_attn_layer_norm", "layernorm"),
    ("call_module", "model.decoder.layers.0.activation_fn", "elementwise"),
    ("call_function", "<built-in method addmm of type object at 0x7f>", "gemm"),
    ("call_function", "<built-in method matmul of type object at 0x7f>", "gemm"),
    ("call_function", "<function softmax at 0x7fd60c0d1160>", "softmax"),
    ("call_function", "<built-in function truediv>", "elementwise"),
    ("call_function", "<built-in method where of type object at 0x7f>", "elementwise"),
    ("call_function", "<built-in method max of type object at 0x7f>", "elementwise"),
    ("call_method", "masked_fill_", "elementwise"),
    ("call_function", "<built-in function lt>", "elementwise"),
    ("call_method", "bool", "other"),
    ("call_function", "<built-in function getitem>", "other"),
    ("call_method", "contiguous", "other"),
    ("placeholder", "input_ids", None),
    ("get_attr", "transformer.h.0.attn.bias", None),
])
def test_node_categories(op, target, category):
    assert node_category(op, target) == category


def test_every_node_of_the_real_csvs_gets_a_category(datasets_dir):
    seen = set()
    for label in load_e2e(datasets_dir):
        if label.node_csv is None:
            continue
        with open(label.node_csv, newline="") as handle:
            for row in csv.DictReader(handle):
                seen.add(node_category(row["op"], row["target"]))
    assert seen == {None, *CATEGORIES} - {"conv"}


def test_p4_bert_large_batch_16_rebuilds_its_label(datasets_dir):
    label = _label(datasets_dir, "p4", "bert_large", 16)
    assert label.layers == 24
    ms = measured_breakdown(label.node_csv, label.layers)
    total = sum(ms.values())
    # The first layer's nodes counted 24 times: within 3 % of the 3,120 ms label.
    assert total == pytest.approx(3046.8, abs=0.1) and total / label.latency_ms == pytest.approx(0.976, abs=1e-3)
    # One layer's FFN output GEMM alone took 46.4 ms on the P4, so 24 of them are in the GEMM total.
    with open(label.node_csv, newline="") as handle:
        dense = next(float(r["latency"]) for r in csv.DictReader(handle)
                     if r["target"] == "bert.encoder.layer.0.output.dense")
    assert dense == pytest.approx(46.415, abs=1e-3)
    assert ms["gemm"] > 24 * dense
    assert ms["gemm"] / total == pytest.approx(0.869, abs=1e-3)
    assert 0 < ms["layernorm"] < ms["softmax"] < ms["elementwise"] < ms["gemm"]


def test_predicted_breakdown_sums_the_kernel_shares_and_counts_fallbacks_as_other():
    graph = load_graph(REPO / "examples" / "resnet18.onnx")
    kernels = describe_kernels(graph, predict_partition(graph, "eager"))
    shares = [float(i + 1) for i in range(len(kernels))]
    split = predicted_breakdown(kernels.specs, kernels.fallback, shares)
    assert sum(split.values()) == pytest.approx(sum(shares))
    fallback_ms = sum(s for s, f in zip(shares, kernels.fallback) if f)
    assert fallback_ms > 0 and split["other"] == pytest.approx(fallback_ms)
    assert split["conv"] > 0 and split["gemm"] > 0  # ResNet-18's convolutions and its final Gemm
    assert {kernel_category(spec, False) for spec in kernels.specs} <= set(CATEGORIES)


def test_breakdown_summary_shares_and_errors():
    def row(gpu: str, split: dict[str, tuple[float, float]]) -> EvalRow:
        return EvalRow(gpu=gpu, model="m", seq=8, batch=1, measured_ms=100, fold=gpu, kernels=3,
                       predicted_ms={"model": 100, "roofline": 100},
                       breakdown={c: split.get(c, (0.0, 0.0)) for c in CATEGORIES})

    rows = [row("a", {"gemm": (80, 60), "softmax": (20, 40)}), row("b", {"gemm": (50, 50), "softmax": (50, 50)})]
    summary = EvalResult(mode="in-sample", fusion="predicted", rows=rows, folds={}).breakdown_summary()
    cell = {(s["gpu"], s["category"]): s for s in summary}
    assert cell[("a", "gemm")]["measured_share"] == 80 and cell[("a", "gemm")]["model_share"] == 60
    assert cell[("a", "softmax")]["model_mape"] == 100
    assert cell[("all", "gemm")]["labels"] == 2 and cell[("all", "gemm")]["model_mape"] == pytest.approx(12.5)
    assert cell[("all", "gemm")]["measured_share"] == pytest.approx(65)
    assert cell[("all", "layernorm")]["model_mape"] is None  # never measured: no error to report
