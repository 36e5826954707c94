"""Files onnxruntime's and onnxconverter-common's tools wrote from files they had rewritten already, or in their own
spellings, are priced as the model they describe, under every backend, or name what Lilou cannot read.

The graphs in tests/data/typed are real (scripts/make_typed_fixtures.py, onnxruntime 1.32.0 and onnxconverter-common
1.16.0, weights stripped): ``bert-ort-qdq`` and ``bert-ort-dynamic`` quantized ``ort/bert-classic-ort.onnx`` (the
transformer optimizer's EmbedLayerNormalization, Attention ...), ``resnet-qdq-contrib`` is ``quantized/resnet.onnx``
quantized with onnxruntime's own quantize ops (``UseQDQContribOps``), ``bert-opset14-fp16-norms32`` is
``ort/bert-opset14.onnx`` in FP16 with its norms' math kept in FP32.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from lilou.graph.dag import load_graph

DATA = Path(__file__).resolve().parent / "data"
TYPED, ORT = DATA / "typed", DATA / "ort"
#: What a prediction says when a graph's shapes stop at an op Lilou does not know.
BROKEN = ("unknown shape", "no cost formula", "unsupported op")


@pytest.fixture(scope="module")
def predictor():
    from lilou.api import Predictor

    return Predictor()


def _totals(prediction) -> tuple[int, int, int]:
    return len(prediction.kernels), sum(k.flops for k in prediction.kernels), sum(k.bytes for k in prediction.kernels)


def test_a_model_quantized_after_the_optimizer_is_priced_as_the_optimized_model(predictor) -> None:
    """The embedding tables of EmbedLayerNormalization came out of DequantizeLinear nodes, and its write-back wanted
    initializers: it stayed, every shape after it was unknown, and the model was priced at 0 FLOPs (1.26 ms, 76
    kernels on a T4; 2.2 ms for a 4-layer BERT whose export takes 101). The quantizer left the activations the contrib
    ops write in float, so the matmuls run in float on their INT8 weights, and the prediction says so."""
    quantized = predictor.predict(TYPED / "bert-ort-qdq.onnx", gpu="t4")
    optimized = predictor.predict(ORT / "bert-classic-ort.onnx", gpu="t4")
    assert not any(part in w for w in quantized.warnings for part in BROKEN)
    assert any("1 EmbedLayerNormalization" in w and "2 Attention" in w for w in quantized.warnings)
    assert quantized.precision == "fp32"
    assert any(w.startswith("6 of the quantized graph's 16 matmuls and convolutions read quantized weights but float "
                            "activations") for w in quantized.warnings)
    # the same kernels and FLOPs; the weights the file stores in INT8 are read in INT8 (3 bytes fewer per element)
    assert _totals(quantized) == (45, 423_133_440, 16_758_824)
    assert _totals(optimized) == (45, 423_133_440, 20_944_424)
    assert Counter(k.type for k in quantized.kernels) == Counter(k.type for k in optimized.kernels)
    graph = load_graph(TYPED / "bert-ort-qdq.onnx")
    tables = [d["inputs"][0].dtype for n, d in graph.dag.nodes(data=True)
              if d["op"] == "Gather" and n.startswith("EmbedLayerNormalization_0/")]
    assert tables == ["int8", "int8", "int8"]  # words, positions, token types


def test_onnxruntimes_own_quantize_ops_are_read_as_onnxs(predictor) -> None:
    """``com.microsoft`` QuantizeLinear/DequantizeLinear mean what ONNX's do; they were unknown ops (0.09 MFLOPs,
    FP32, 89 kernels). The same model quantized with ONNX's ops is priced the same, to the byte."""
    contrib = predictor.predict(TYPED / "resnet-qdq-contrib.onnx", gpu="t4")
    standard = predictor.predict(DATA / "quantized" / "resnet-qdq.onnx", gpu="t4")
    assert contrib.precision == standard.precision == "int8"
    assert not any(part in w for w in contrib.warnings for part in BROKEN)
    assert _totals(contrib) == _totals(standard) == (30, 79_045_632, 3_197_920)
    assert Counter(k.type for k in contrib.kernels) == Counter(k.type for k in standard.kernels)
    assert contrib.latency_ms == standard.latency_ms


@pytest.mark.parametrize(("optimized", "export", "precision", "totals"), [
    ("bert-ort", "bert", "fp32", (36, 423_149_568, 17_890_920)),
    ("bert-ort-fp16", "bert", "fp16", (36, 423_149_568, 9_012_820)),
    ("cnn-ort-session", "cnn", "fp32", (8, 80_020_148, 2_041_560)),
])
def test_under_tvm_an_optimized_file_is_priced_as_its_export(optimized: str, export: str, precision: str,
                                                            totals: tuple[int, int, int]) -> None:
    """The contrib ops were written back for eager only: under TVM every shape after the first was unknown (BERT
    76 MFLOPs of 423; the CNN 0; the FP16 BERT read as FP32). TVM compiles the graph they replaced; its importer
    reads few of them, which the warning says."""
    from lilou.api import Predictor

    tvm = Predictor(backend="tvm")
    prediction = tvm.predict(ORT / f"{optimized}.onnx", gpu="t4")
    assert prediction.precision == precision
    assert not any(part in w for w in prediction.warnings for part in BROKEN)
    assert any("compiled and fused by TVM" in w and "give TVM the export before onnxruntime optimized it" in w
               for w in prediction.warnings)
    assert _totals(prediction) == totals
    if precision == "fp32":
        source = tvm.predict(ORT / f"{export}.onnx", gpu="t4")
        assert _totals(source) == totals and source.latency_ms == prediction.latency_ms


def test_norms_kept_in_fp32_are_one_norm_kernel_each_after_a_cast(predictor) -> None:
    """onnxconverter-common casts into and out of every op it keeps in FP32 (ReduceMean, Pow, Sqrt, Div): the
    casts broke the layer-norm and GELU patterns, and each norm was 9 op kernels and 7 cast kernels (129 kernels
    against 42 for the file converted whole, 3.07x its time). The casts inside a pattern go with its one kernel;
    the cast of its input (``x.float()``) is a kernel of its own: 5 norms and 2 GELUs, 7 more kernels."""
    mixed = predictor.predict(TYPED / "bert-opset14-fp16-norms32.onnx", gpu="t4")
    half = predictor.predict(TYPED / "bert-opset14-fp16.onnx", gpu="t4")
    assert len(half.kernels) == 42 and len(mixed.kernels) == 49
    assert Counter(k.type for k in mixed.kernels)["layernorm"] == Counter(k.type for k in half.kernels)["layernorm"] == 5
    def casts(prediction) -> Counter[str]:
        return Counter(k.nodes[0].rsplit("/", 1)[-1] for k in prediction.kernels if k.ops == ("Cast",))

    # both cast the mask and (keep_io_types) the output
    assert casts(half) == {"Cast": 1, "Add_1_cast_to_339": 1}
    assert casts(mixed) - casts(half) == {"ReduceMean_input_cast0": 5, "Div_input_cast0": 2}
    norm = next(k for k in mixed.kernels if k.type == "layernorm")
    assert Counter(norm.ops) == {"Cast": 6, "ReduceMean": 2, "Add": 2, "Sub": 1, "Pow": 1, "Sqrt": 1, "Div": 1, "Mul": 1}


def test_an_onnxruntime_op_no_rewrite_reads_is_named_with_the_share_it_leaves_unpriced(predictor) -> None:
    """``quantize_dynamic`` after the optimizer writes QAttention and QEmbedLayerNormalization, which Lilou does not
    write back: the prediction (0 FLOPs) named them only among unsupported ops and unknown shapes."""
    prediction = predictor.predict(TYPED / "bert-ort-dynamic.onnx", gpu="t4")
    assert sum(k.flops for k in prediction.kernels) == 0
    assert ("onnxruntime op(s) that Lilou does not write back as standard ops: 2 QAttention, 1 QEmbedLayerNormalization "
            "(com.microsoft); they and the 71 node(s) after them whose shapes they hide, 95 % of the model's 78 runtime "
            "nodes (6 of its 6 matmuls and convolutions), are priced without FLOPs") in "\n".join(prediction.warnings)
