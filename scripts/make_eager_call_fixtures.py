"""Write ``tests/data/eager_calls/``: three eager calls that launch more than the kernel their ONNX nodes suggest.

* ``style-{ts,dynamo}.onnx``: a style-transfer block (Johnson et al.): a convolution, an affine ``InstanceNorm2d``
  (trained-looking weights), a strided convolution, an ``InstanceNorm2d`` without weights. ``aten.instance_norm``
  repeats an affine norm's weight and bias, then runs a training-mode batch norm (cuDNN's for an FP32 affine norm,
  three native kernels otherwise).
* ``nonzero-{ts,dynamo}.onnx``: ``torch.nonzero(x > 0)`` of a (8, 512) input, read by a sum: ``nonzero`` copies its
  count to the host and waits for the GPU.
* ``convnext-{ts,dynamo}.onnx``: ConvNeXt's block (7x7 depthwise convolution, ``permute(0, 2, 3, 1)``,
  ``nn.LayerNorm``, MLP, permute back, residual): ``layer_norm`` copies the permuted view to a contiguous one.

TorchScript (``dynamo=False``) and the dynamo exporter, one file each (the tests read both)::

    python scripts/make_eager_call_fixtures.py
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import onnx
import torch
from torch import nn

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "eager_calls"


class Style(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 9, padding=4)
        self.norm = nn.InstanceNorm2d(8, affine=True)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.plain = nn.InstanceNorm2d(16)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.plain(self.down(torch.relu(self.norm(self.conv(x))))))


class NonZero(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x > 0).sum()


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.dw(x).permute(0, 2, 3, 1))
        return x + self.fc2(nn.functional.gelu(self.fc1(y))).permute(0, 3, 1, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    warnings.filterwarnings("ignore")
    for name, model, shape in (("style", Style(), (1, 3, 64, 64)), ("nonzero", NonZero(), (8, 512)),
                               ("convnext", ConvNeXtBlock(), (1, 16, 14, 14))):
        for exporter, dynamo in (("ts", False), ("dynamo", True)):
            path = args.out / f"{name}-{exporter}.onnx"
            options = {"optimize": False} if dynamo else {"opset_version": 17}
            torch.onnx.export(model.eval(), (torch.randn(*shape),), path, dynamo=dynamo, input_names=["x"], **options)
            onnx.save(onnx.load(path), path)  # one file: the dynamo exporter keeps its constants beside it
            path.with_name(path.name + ".data").unlink(missing_ok=True)
            print(f"wrote {path} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
