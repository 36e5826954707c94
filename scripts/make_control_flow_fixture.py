"""Write ``tests/data/control_flow/scripted-if.onnx``: a scripted module whose branch follows from its input's shape.

``torch.jit.script`` keeps Python control flow, and the TorchScript exporter writes ``if x.size(0) > 1`` as
``Shape -> Gather -> Greater -> Cast -> If``: the condition is known once the batch is bound, not from the file alone.
Older exports of detection and audio models hold such conditions; the test needs a real one::

    python scripts/make_control_flow_fixture.py
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "control_flow" / "scripted-if.onnx"


class BatchDependent(torch.nn.Module):
    """A linear layer and ReLU for a batch of several rows, another linear layer and a sigmoid for one row."""

    def __init__(self) -> None:
        super().__init__()
        self.many, self.one = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.size(0) > 1:
            return self.many(x).relu()
        return self.one(x).sigmoid()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    torch.manual_seed(0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(torch.jit.script(BatchDependent()), (torch.randn(4, 16),), args.out, dynamo=False,
                      opset_version=17, input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    print(f"{args.out}: {args.out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
