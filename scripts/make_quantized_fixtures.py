"""Write the quantized test graphs of ``tests/data/quantized/`` (weight-free), beside the float exports they came from.

Users hand Lilou INT8 models that onnxruntime's quantization tool wrote (``onnxruntime.quantization``, which
Hugging Face Optimum's ORTQuantizer and NVIDIA's TensorRT workflows also produce) in its three forms:
QDQ (``QuantizeLinear``/``DequantizeLinear`` pairs around float ops: what TensorRT builds INT8 engines from),
QOperator (``QLinearConv``, ``QLinearMatMul`` and onnxruntime's ``QGemm``, ``QLinearAdd`` ...) and dynamic
(``DynamicQuantizeLinear`` + ``ConvInteger``/``MatMulInteger``). The tests need real ones, and onnxruntime is not a
dependency of Lilou, so they are made once here and committed (every initializer above 1 KiB is stripped, as the
zoo strips its exports)::

    pip install onnxruntime==1.20.0            # only for this script
    python scripts/make_quantized_fixtures.py  # writes tests/data/quantized/*.onnx

Models (random weights, calibrated on random inputs: the values do not matter to a latency prediction, the graph
does): ``resnet``, Hugging Face's ``ResNetModel`` (ResNet-18 layout at 64 wide, 64x64 images, batch 1), and
``bert``, a two-layer ``BertModel`` 256 wide (64 tokens, batch 2), each exported by the TorchScript exporter at
opset 17, pre-processed (``quant_pre_process``, as onnxruntime's documentation asks) and quantized as QDQ (signed
INT8 activations and weights, per channel), QOperator and dynamic; ``resnet-qdq-partial`` is the QDQ form with the
first convolution left in float (``nodes_to_exclude``), as deployments keep layers that lose accuracy in INT8.
"""
from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import torch

from lilou.zoo.export import strip_weights

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "quantized"
STEM = "/model/embedder/embedder/convolution/Conv"  # the ResNet's first convolution


class _Hidden(torch.nn.Module):
    """The model's last hidden state."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.model(*inputs).last_hidden_state


def _models() -> list[tuple[str, torch.nn.Module, dict[str, torch.Tensor]]]:
    import transformers as hf

    torch.manual_seed(0)
    resnet = hf.ResNetModel(hf.ResNetConfig(embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[2, 2, 2, 2],
                                            layer_type="basic")).eval()
    bert = hf.BertModel(hf.BertConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=1024, attn_implementation="eager")).eval()
    return [("resnet", resnet, {"pixel_values": torch.randn(1, 3, 64, 64)}),
            ("bert", bert, {"input_ids": torch.randint(0, 1000, (2, 64)),
                            "attention_mask": torch.ones(2, 64, dtype=torch.long)})]


def _reader(inputs: dict[str, torch.Tensor]):
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.batches = iter([{name: (rng.standard_normal(t.shape).astype(np.float32) if t.is_floating_point()
                                         else t.numpy()) for name, t in inputs.items()} for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    return Reader()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    from onnxruntime.quantization import quant_pre_process

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        for name, model, inputs in _models():
            exported = Path(folder) / f"{name}.onnx"
            torch.onnx.export(_Hidden(model), tuple(inputs.values()), exported, dynamo=False, opset_version=17,
                              input_names=list(inputs))
            prepared = Path(folder) / f"{name}-prepared.onnx"
            quant_pre_process(str(exported), str(prepared))  # the documented first step: folds, infers shapes
            variants = ("qdq", "qoperator", "dynamic") + (("qdq-partial",) if name == "resnet" else ())
            for variant in variants:
                target = Path(folder) / f"{name}-{variant}.onnx"
                _quantize(variant, prepared, target, inputs)
                _save(onnx.load(target), args.out / target.name)
            _save(onnx.load(exported), args.out / exported.name)


def _quantize(variant: str, source: Path, target: Path, inputs: dict[str, torch.Tensor]) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    if variant.startswith("qdq"):
        # "qdq-partial" keeps the stem convolution in float, as deployments keep sensitive layers
        excluded = [STEM] if variant == "qdq-partial" else []
        quantize_static(str(source), str(target), _reader(inputs), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True,
                        nodes_to_exclude=excluded)
    elif variant == "qoperator":
        quantize_static(str(source), str(target), _reader(inputs), quant_format=QuantFormat.QOperator)
    else:
        quantize_dynamic(str(source), str(target))


def _save(proto: onnx.ModelProto, path: Path) -> None:
    ops = Counter(n.op_type for n in proto.graph.node if "uant" in n.op_type or n.op_type.startswith("Q")
                  or n.op_type.endswith("Integer"))
    onnx.save(strip_weights(proto, location=f"{path.stem}.weights"), path)
    print(f"{path.name}: {path.stat().st_size // 1024} KB, quantized ops {dict(ops)}")


if __name__ == "__main__":
    main()
