"""Write the typed test graphs of ``tests/data/typed/`` (weight-free): files other tools wrote from the fixtures of
``tests/data/quantized/`` (``scripts/make_quantized_fixtures.py``: a ResNet-18 layout at 64 wide, 64x64 images, and a
two-layer BERT 256 wide, 2x64 tokens, TorchScript exports at opset 17) and of ``tests/data/ort/``
(``scripts/make_ort_fixtures.py``: its opset-14 BERT export and its classic BERT as onnxruntime's optimizer wrote it).

onnxruntime and onnxconverter-common are not dependencies of Lilou, so the files are made once here and committed::

    pip install --target /tmp/typed onnxruntime==1.32.0 onnxconverter-common==1.16.0
    PYTHONPATH=/tmp/typed:. python scripts/make_typed_fixtures.py

The fixtures' weights are stripped; they are filled with random values (the values do not matter to a latency
prediction, the graph does) before a tool reads them, and stripped again after.
"""
from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from lilou.zoo.export import strip_weights

ROOT = Path(__file__).resolve().parents[1] / "tests" / "data"
OUT = ROOT / "typed"


def _filled(path: Path) -> onnx.ModelProto:
    """A stripped fixture with random weights in place of the bytes it does not carry."""
    model = onnx.load(path, load_external_data=False)
    rng = np.random.default_rng(0)
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
        shape = tuple(tensor.dims)
        values = (rng.integers(-8, 8, size=shape) if np.issubdtype(dtype, np.integer)
                  else rng.standard_normal(shape) * 0.02).astype(dtype)
        tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
    return model


def _session_saved(model: onnx.ModelProto, folder: Path, level: str = "extended") -> onnx.ModelProto:
    """``model`` as an onnxruntime CPU session saves it (``optimized_model_filepath``)."""
    import onnxruntime as ort

    source, target = folder / "source.onnx", folder / "saved.onnx"
    onnx.save(model, source)
    options = ort.SessionOptions()
    options.graph_optimization_level = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED}[level]
    options.optimized_model_filepath = str(target)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    return onnx.load(target)


def bert_dynamic_session(folder: Path) -> onnx.ModelProto:
    """``quantized/bert-dynamic.onnx`` (``quantize_dynamic``) as a session saves it: ``MatMulIntegerToFloat`` and
    ``DynamicQuantizeMatMul`` in place of its MatMulInteger, casts and scale multiplications."""
    return _session_saved(_filled(ROOT / "quantized" / "bert-dynamic.onnx"), folder)


def _fp16(name: str, **options) -> onnx.ModelProto:
    """``quantized/<name>.onnx`` converted to FP16 by onnxconverter-common (``options``: what it keeps in FP32)."""
    from onnxconverter_common import float16

    return float16.convert_float_to_float16(_filled(ROOT / "quantized" / f"{name}.onnx"), **options)


def _fp16_whole(path: Path) -> onnx.ModelProto:
    from onnxconverter_common import float16

    return float16.convert_float_to_float16(_filled(path), keep_io_types=True)


def _int8_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """INT8 Q/DQ inserted into an FP16 model as NVIDIA ModelOpt's ONNX PTQ writes it for a half-precision model: every
    MatMul, Conv and Gemm with a constant FP16 weight reads DequantizeLinear(INT8 weight, FP16 per-channel scale) and
    DequantizeLinear(QuantizeLinear(activation)) with an FP16 scalar scale; opset 19 (DequantizeLinear-19 takes FP16
    scales)."""
    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    nodes, added = [], []
    for node in graph.node:
        weight = weights.get(node.input[1]) if node.op_type in ("MatMul", "Conv", "Gemm") else None
        if weight is not None and weight.data_type == onnx.TensorProto.FLOAT16:
            values = numpy_helper.to_array(weight).astype(np.float32)
            axis = 1 if node.op_type == "MatMul" else 0  # MatMul [K, N]; Conv [O, I, kh, kw]; Gemm (transB) [N, K]
            reduced = tuple(i for i in range(values.ndim) if i != axis)
            scale = (np.abs(values).max(axis=reduced) / 127 + 1e-8).astype(np.float16)
            shape = [1] * values.ndim
            shape[axis] = -1
            quantized = np.clip(np.round(values / scale.astype(np.float32).reshape(shape)), -127, 127).astype(np.int8)
            p = f"{node.name}/q_"
            added += [numpy_helper.from_array(quantized, p + "w"), numpy_helper.from_array(scale, p + "ws"),
                      numpy_helper.from_array(np.zeros(scale.shape, np.int8), p + "wz"),
                      numpy_helper.from_array(np.float16(0.05), p + "as"), numpy_helper.from_array(np.int8(0), p + "az")]
            nodes += [helper.make_node("QuantizeLinear", [node.input[0], p + "as", p + "az"], [p + "aq"], name=p + "qa"),
                      helper.make_node("DequantizeLinear", [p + "aq", p + "as", p + "az"], [p + "ad"], name=p + "dqa"),
                      helper.make_node("DequantizeLinear", [p + "w", p + "ws", p + "wz"], [p + "wd"], name=p + "dqw",
                                       axis=axis)]
            node.input[0], node.input[1] = p + "ad", p + "wd"
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(added)
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = max(opset.version, 19)
    onnx.checker.check_model(model)
    return model


def _fp16_norms32(folder: Path) -> onnx.ModelProto:
    """``ort/bert-opset14.onnx`` (its layer norms written op by op, opset 14) in FP16 with the norms' reductions, powers,
    square roots and divisions kept in FP32 (onnxconverter-common's ``op_block_list``): casts inside every norm."""
    from onnxconverter_common import float16

    return float16.convert_float_to_float16(_filled(ROOT / "ort" / "bert-opset14.onnx"), keep_io_types=True,
                                            op_block_list=float16.DEFAULT_OP_BLOCK_LIST + NORM_OPS)


#: The ops of a layer norm written op by op that ``bert-opset14-fp16-norms32`` keeps in FP32.
NORM_OPS = ["ReduceMean", "Pow", "Sqrt", "Div"]


def _calibration(model: onnx.ModelProto, batches: int = 2):
    """A calibration reader of random inputs at the model's own (fixed) input shapes: token ids 0..99, masks of ones."""
    from onnxruntime.quantization import CalibrationDataReader

    rng = np.random.default_rng(0)
    feeds = []
    for _ in range(batches):
        feed = {}
        for value in model.graph.input:
            kind = value.type.tensor_type.elem_type
            shape = tuple(d.dim_value for d in value.type.tensor_type.shape.dim)
            if kind == onnx.TensorProto.FLOAT:
                feed[value.name] = rng.standard_normal(shape).astype(np.float32)
            elif value.name == "attention_mask":
                feed[value.name] = np.ones(shape, np.int64)
            elif value.name == "token_type_ids":
                feed[value.name] = np.zeros(shape, np.int64)
            else:
                feed[value.name] = rng.integers(0, 100, size=shape).astype(np.int64)
        feeds.append(feed)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter(feeds)

        def get_next(self):
            return next(self.feeds, None)

    return Reader()


def _static_qdq(source: onnx.ModelProto, folder: Path, **extra) -> onnx.ModelProto:
    """``quantize_static`` in the QDQ format, signed INT8 activations and weights (``extra``: its extra_options)."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    model, target = folder / "float.onnx", folder / "quantized.onnx"
    onnx.save(source, model)
    quantize_static(str(model), str(target), _calibration(source), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True,
                    extra_options=extra)
    return onnx.load(target)


def _dynamic(source: onnx.ModelProto, folder: Path) -> onnx.ModelProto:
    """``quantize_dynamic`` (INT8 weights; float where its type inference cannot see past a contrib op)."""
    from onnxruntime.quantization import quantize_dynamic

    model, target = folder / "float.onnx", folder / "quantized.onnx"
    onnx.save(source, model)
    quantize_dynamic(str(model), str(target), extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return onnx.load(target)


def _first_matmuls(name: str, share: float) -> list[str]:
    model = onnx.load(ROOT / "quantized" / f"{name}.onnx", load_external_data=False)
    matmuls = [n.name for n in model.graph.node if n.op_type == "MatMul"]
    return matmuls[:int(len(matmuls) * share)]


FIXTURES = {
    "bert-dynamic-session": bert_dynamic_session,
    # FP16 conversions, whole and with FP32 islands (op_block_list / node_block_list)
    "resnet-fp16": lambda folder: _fp16("resnet"),
    "resnet-fp16-add32": lambda folder: _fp16("resnet", keep_io_types=True, op_block_list=["Add"]),
    "bert-fp16": lambda folder: _fp16("bert"),
    "bert-fp16-half32": lambda folder: _fp16("bert", node_block_list=_first_matmuls("bert", 0.5)),
    # an FP16 model with INT8 Q/DQ, as ModelOpt writes it
    "resnet-fp16-int8qdq": lambda folder: _int8_qdq(_fp16("resnet")),
    # a BERT whose layer norms are written op by op, in FP16 whole and with the norms' math kept in FP32
    "bert-opset14-fp16": lambda folder: _fp16_whole(ROOT / "ort" / "bert-opset14.onnx"),
    "bert-opset14-fp16-norms32": _fp16_norms32,
    # onnxruntime's own quantize and dequantize ops (com.microsoft: UseQDQContribOps)
    "resnet-qdq-contrib": lambda folder: _static_qdq(_filled(ROOT / "quantized" / "resnet.onnx"), folder,
                                                     UseQDQContribOps=True),
    # a model quantized after onnxruntime's transformer optimizer fused it (EmbedLayerNormalization, Attention ...)
    "bert-ort-qdq": lambda folder: _static_qdq(_filled(ROOT / "ort" / "bert-classic-ort.onnx"), folder),
    # ... and dynamically quantized after it (QAttention: an op Lilou does not write back)
    "bert-ort-dynamic": lambda folder: _dynamic(_filled(ROOT / "ort" / "bert-classic-ort.onnx"), folder),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("names", nargs="*", help=f"fixtures to write (default: all of {', '.join(FIXTURES)})")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.names or FIXTURES:
        with tempfile.TemporaryDirectory() as folder:
            model = FIXTURES[name](Path(folder))
        path = args.out / f"{name}.onnx"
        onnx.save(strip_weights(model, location=f"{name}.weights"), path)
        ops = Counter((n.domain + "::" if n.domain else "") + n.op_type for n in model.graph.node)
        print(f"{path.name}: {path.stat().st_size // 1024} KB, {dict(ops.most_common(8))}")


if __name__ == "__main__":
    main()
