"""Write ``tests/data/quantized/{resnet,bert}-modelopt-fp8.onnx``: the quantized fixtures' models in FP8 as NVIDIA's
ModelOpt exports them for TensorRT (weight-free).

ModelOpt (``modelopt.torch.quantization``, ``FP8_DEFAULT_CFG``: per-tensor FP8 E4M3 on every ``Linear`` and
``Conv``'s input and weight) followed by ``torch.onnx.export`` writes each quantizer as TensorRT's
``trt::TRT_FP8QuantizeLinear`` and ``trt::TRT_FP8DequantizeLinear`` (``lilou/graph/tensorrt_qdq.py``). ModelOpt is not
a dependency of Lilou, so the files are made once here and committed::

    pip install --target /tmp/modelopt --no-deps nvidia-modelopt==0.47.0 pulp
    PYTHONPATH=/tmp/modelopt python scripts/make_modelopt_fixtures.py

The models are ``scripts/make_quantized_fixtures.py``'s (a ResNet-18 layout at 64 wide and a two-layer BERT 256
wide, random weights), calibrated on their example inputs, exported by the TorchScript exporter at opset 17 (the
exporter ModelOpt's ONNX symbolics are written for).
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import onnx
import torch

from lilou.zoo.export import strip_weights

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "quantized"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    import modelopt.torch.quantization as mtq

    import make_quantized_fixtures as float_fixtures  # the same models, beside this script

    with tempfile.TemporaryDirectory() as folder:
        for name, model, inputs in float_fixtures._models():
            wrapped = float_fixtures._Hidden(model).eval()
            quantized = mtq.quantize(wrapped, mtq.FP8_DEFAULT_CFG, lambda m, feeds=inputs: m(*feeds.values()))
            exported = Path(folder) / f"{name}.onnx"
            torch.onnx.export(quantized, tuple(inputs.values()), exported, dynamo=False, opset_version=17,
                              input_names=list(inputs))
            target = args.out / f"{name}-modelopt-fp8.onnx"
            onnx.save(strip_weights(onnx.load(exported), location=f"{target.stem}.weights"), target)
            print(f"{target}: {target.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
