"""What PyTorch's TF32 default changes in Lilou's predictions: zoo CNNs and a ViT in FP32 at several batches on
Ampere and newer GPUs and MIG slices, strict FP32 (``--tf32 off``) against the default (``conv``).

No source of the kernel table measured TF32: these are predictions, not measurements (docs/kernel_model.md).
Usage: python scripts/tf32_effect.py [--models resnet50,vit-b16] [--batches 1,16,32] [--out outputs/bench/tf32.md]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from lilou.api import Predictor
from lilou.hardware import resolve_device
from lilou.zoo import export_onnx

DEVICES = ("a100-sxm4-80gb", "a100-sxm4-80gb/1g.10gb", "a100-sxm4-80gb/3g.40gb", "a10g", "l4", "h100-sxm")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,vit-b16")
    parser.add_argument("--batches", default="1,16,32")
    parser.add_argument("--out", default="outputs/bench/tf32.md")
    args = parser.parse_args()
    predictor = Predictor()
    devices = [resolve_device(*name.split("/")) for name in DEVICES]
    lines = ["| model | batch | device | strict FP32 ms | TF32 convolutions ms | ratio | extrapolated share |",
             "|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            for batch in (int(b) for b in args.batches.split(",")):
                path = Path(folder) / f"{name}-{batch}.onnx"
                export_onnx(name, path, batch=batch, strip_weights=True)
                prepared = predictor.prepare(path)
                strict = predictor.predict_many(prepared, devices, tf32="off")
                default = predictor.predict_many(prepared, devices)
                for device, s, t in zip(DEVICES, strict, default):
                    lines.append(f"| {name} | {batch} | {device} | {s.latency_ms:.2f} | {t.latency_ms:.2f} | "
                                 f"{s.latency_ms / t.latency_ms:.2f} | {t.extrapolated_share:.2f} |")
    table = "\n".join(lines) + "\n"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table)
    print(table, end="")


if __name__ == "__main__":
    main()
