"""``--precision`` prices the model as run in that precision: its floating-point tensors stored so (lilou.graph.retype)."""
from __future__ import annotations

from pathlib import Path

from lilou.graph.dag import load_graph
from lilou.graph.memory import memory_needed
from lilou.graph.retype import retyped

DATA = Path(__file__).resolve().parent / "data"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "resnet18.onnx"
GENAI_FP16 = DATA / "genai" / "llama-gqa-fp16.onnx"


def test_the_storage_follows_the_precision_weights_and_activations_apart():
    graph = load_graph(EXAMPLE)
    assert retyped(graph, "fp32") is graph and retyped(graph, "tf32") is graph  # stored as it is: nothing to do
    weights, largest = memory_needed(graph)
    for precision, weight_bytes, activation_bytes in (("fp16", 2, 2), ("bf16", 2, 2), ("fp8", 1, 1), ("int8", 1, 1)):
        stored = retyped(graph, precision)
        assert memory_needed(stored) == (weights * weight_bytes // 4, largest * activation_bytes // 4), precision
    # weight-only: 4-bit weights, FP16 activations; no runtime runs INT4 (W4A16) convolutions, so a convolution's
    # weights stay FP16 (before, ResNet-18's were 4-bit: 5,849,556 weight bytes against 22,599,924 now)
    int4 = retyped(graph, "int4")
    conv_bytes = sum(t.nbytes for t in {t.name: t for _, d in graph.dag.nodes(data=True) if d["op"] == "Conv"
                                        for t in d["inputs"][1:] if t is not None}.values())
    assert memory_needed(int4) == (22_599_924, largest // 2) and conv_bytes // 2 < 22_599_924  # FP16 conv weights
    conv = next(data for _, data in int4.dag.nodes(data=True) if data["op"] == "Conv")
    assert (conv["inputs"][0].dtype, conv["inputs"][1].dtype, conv["outputs"][0].dtype) == ("float16",) * 3
    gemm = next(data for _, data in int4.dag.nodes(data=True) if data["op"] == "Gemm")
    assert gemm["inputs"][1].dtype == "int4"
    assert conv["flops"] == next(d for _, d in graph.dag.nodes(data=True) if d["op"] == "Conv")["flops"]
    assert graph.dag.nodes[next(iter(graph.dag.nodes))]["inputs"][0].dtype == "float32"  # the original is untouched


def test_integer_tensors_keep_their_types():
    shapes = {"batch_size": (2,), "sequence_length": (1,), "past_sequence_length": (511,)}
    graph = load_graph(GENAI_FP16, shapes=shapes)
    widened = retyped(graph, "fp32")
    assert {t.name: t.dtype for t in widened.inputs}["input_ids"] == "int64"
    assert {t.name: t.dtype for t in widened.inputs}["past_key_values.0.key"] == "float32"
    assert memory_needed(widened)[0] > memory_needed(graph)[0]


def test_a_plan_in_another_precision_counts_its_memory_so():
    from lilou.api import Predictor
    from lilou.plan.planner import plan_model

    predictor = Predictor()
    plans = {p: plan_model(EXAMPLE, 1000.0, gpus=["t4"], batches=[1], predictor=predictor, precision=p)
             for p in (None, "fp16")}
    need = {p: next(iter(plan.curves.values()))[0].memory_gb for p, plan in plans.items()}
    assert abs(need["fp16"] * 2 - need[None]) < 1e-9


def test_the_override_is_said_once_with_the_files_own_precision():
    """The note names what the file stores, read before retyping (INT4's FP16 activations once read as the file's)."""
    from lilou.api import Predictor

    predictor = Predictor()
    for precision in ("int4", "fp16"):
        notes = [w for w in predictor.predict(EXAMPLE, gpu="a10g", precision=precision).warnings
                 if w.startswith("--precision")]
        assert notes == [f"--precision {precision}: the file's FP32 model is priced as run in {precision.upper()}, its "
                         "kernels on that path and its floating-point tensors stored so (integer tensors keep their "
                         "types)" + ("; its convolutions as FP16 ones, weights included (no runtime runs INT4 "
                                     "convolutions)" if precision == "int4" else "")]
    # --precision tf32 on an FP32 file is --tf32 on: nothing is retyped, and nothing said beyond what --tf32 on says
    for precision in ("fp32", "tf32"):
        assert not any(w.startswith("--precision") for w in predictor.predict(EXAMPLE, gpu="a10g",
                                                                              precision=precision).warnings)


def test_a_quantized_files_quantized_tensors_are_stored_as_the_precision_asked():
    """``--precision fp16`` (fp32) on an INT8 or FP8 file: its quantized activations, weights, INT32 biases and
    accumulators are floating-point values, stored in 2 (4) bytes. They kept 1 byte (a float convolution reading INT8
    bytes, which no runtime runs) while the note said the floating-point tensors were stored so."""
    from lilou.api import Predictor

    predictor = Predictor()
    quantized = DATA / "quantized"
    # ModelOpt's file keeps its batch norms, which an FP8 file folds as its runtimes do: the fold's bias too
    for name, bias in (("resnet-qdq.onnx", 32), ("resnet-qoperator.onnx", 32), ("resnet-modelopt-fp8.onnx", 32)):
        elements = 3 * 64 * 64 + 32 * 3 * 7 * 7 + bias + 32 * 32 * 32  # input, weights, the fold's bias, output
        for precision, size in (("fp16", 2), ("fp32", 4), ("int8", 1)):
            prediction = predictor.predict(quantized / name, gpu="t4", precision=precision)
            conv = next(k for k in prediction.kernels if k.category == "conv")  # the stem
            assert prediction.precision == precision
            if precision != "int8":
                assert any("stored so (its quantized tensors too" in w for w in prediction.warnings)
            # in INT8 the INT32 bias stays (an INT8 engine adds it so); ModelOpt's is the fold's floating-point shift
            int32_bias = precision == "int8" and name != "resnet-modelopt-fp8.onnx"
            assert conv.bytes == size * elements + (3 * bias if int32_bias else 0), (name, precision)
    graph = load_graph(quantized / "resnet-qdq.onnx")
    half = retyped(graph, "fp16")
    dtypes = {t.dtype for _, data in half.dag.nodes(data=True) if not data["constant"]
              for t in (*data["inputs"], *data["outputs"]) if t is not None}
    assert dtypes == {"float16"}
    assert memory_needed(retyped(graph, "fp32")) == tuple(2 * n for n in memory_needed(half))


def test_precision_on_a_mixed_file_is_the_whole_model_in_that_precision():
    """onnxconverter-common's FP16 conversions with FP32 islands (tests/data/typed): ``--precision P`` prices the
    model typed P throughout, as the file typed so. Before, when P was the file's dominant precision nothing was
    retyped and no note said so (the ResNet with its residual adds in FP32 asked in FP16: 2.779 ms, 92 kernels on a T4,
    against 1.996 ms, 66 for the FP16 file); otherwise the casts between the islands, now to their own type, stayed
    kernels and split the linear layers' matmuls from their bias adds (the BERT with half its matmuls in FP32 asked in
    FP16: 64 kernels against 41)."""
    from lilou.api import Predictor

    predictor = Predictor()
    typed, quantized = DATA / "typed", DATA / "quantized"
    for mixed, precision, whole in (("resnet-fp16-add32", "fp16", typed / "resnet-fp16.onnx"),
                                    ("resnet-fp16-add32", "fp32", quantized / "resnet.onnx"),
                                    ("bert-fp16-half32", "fp16", typed / "bert-fp16.onnx"),
                                    ("bert-fp16-half32", "fp32", quantized / "bert.onnx")):
        asked = predictor.predict(typed / f"{mixed}.onnx", gpu="t4", precision=precision)
        file = predictor.predict(whole, gpu="t4")
        assert (asked.precision, file.precision) == (precision, precision)
        assert [(k.type, k.flops, k.bytes) for k in asked.kernels] == [(k.type, k.flops, k.bytes) for k in file.kernels]
        assert asked.latency_ms == file.latency_ms, (mixed, precision)
        note = next(w for w in asked.warnings if w.startswith(f"--precision {precision}:"))
        assert "mixed FP" in note and "Cast(s) between its precisions cast to their own type" in note
    plain = predictor.predict(typed / "resnet-fp16-add32.onnx", gpu="t4")
    assert (plain.precision, len(plain.kernels)) == ("fp16", 92)  # its islands and casts, without the option
    # a file typed P throughout: nothing to retype, nothing said
    same = predictor.predict(typed / "resnet-fp16.onnx", gpu="t4", precision="fp16")
    assert not any(w.startswith("--precision") for w in same.warnings)


def test_precision_on_a_file_with_kept_io_types_drops_the_output_cast_too():
    """onnxconverter-common's ``keep_io_types`` casts the FP16 model's output to FP32 (tests/data/typed's two-layer BERT,
    opset 14). Asked in FP16 or FP32, that Cast is one to its own type, as the others the retyping makes, and launches
    nothing; it stayed a kernel (a Cast writing a graph output was kept): 42 kernels and 1.2694 ms on a T4 in either
    precision, where the FP32 export asked so has 41 kernels and 1.2461 ms (FP16), 1.254 ms (FP32)."""
    from lilou.api import Predictor

    predictor = Predictor()
    converted, export = DATA / "typed" / "bert-opset14-fp16.onnx", DATA / "ort" / "bert-opset14.onnx"
    plain = predictor.predict(converted, gpu="t4")  # as the file runs: its output cast is a kernel
    assert len(plain.kernels) == 42
    assert plain.kernels[-1].nodes == ("/model/encoder/layer.1/output/LayerNorm/Add_1_cast_to_339",)
    for precision, latency in (("fp16", 1.2461), ("fp32", 1.254)):
        asked = predictor.predict(converted, gpu="t4", precision=precision)
        typed = predictor.predict(export, gpu="t4", precision=precision)
        assert [(k.type, k.flops, k.bytes) for k in asked.kernels] == [(k.type, k.flops, k.bytes) for k in typed.kernels]
        assert len(asked.kernels) == 41 and asked.latency_ms == typed.latency_ms == latency, precision
        assert asked.interval_ms == typed.interval_ms and asked.extrapolated_share == typed.extrapolated_share
        note = next(w for w in asked.warnings if w.startswith(f"--precision {precision}:"))
        assert "the 1 Cast(s) between its precisions cast to their own type" in note
