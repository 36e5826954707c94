"""Write ``tests/data/control_flow/``: scripted modules whose control flow follows from their input's shape.

``torch.jit.script`` keeps Python control flow, and the TorchScript exporter writes ``if x.size(0) > 1`` as
``Shape -> Gather -> Greater -> Cast -> If`` and ``for _ in range(x.size(0))`` as a ``Loop`` whose trip count is
``Shape -> Gather``: known once the batch is bound, not from the file alone (a loop over ``range(3)`` it unrolls
itself). Older exports of detection, audio and recurrent models hold such control flow; the tests need real ones:
``scripted-if.onnx``, ``scripted-loop.onnx``, ``scripted-loop-3.onnx`` (the same loop over a constant range) and
``scripted-while.onnx`` (a ``while`` loop its data stops: ``Loop(M=INT64_MAX, cond)``, its iterations unknown to
any file)::

    python scripts/make_control_flow_fixture.py [--only scripted-while]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "control_flow"


class BatchDependent(torch.nn.Module):
    """A linear layer and ReLU for a batch of several rows, another linear layer and a sigmoid for one row."""

    def __init__(self) -> None:
        super().__init__()
        self.many, self.one = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.size(0) > 1:
            return self.many(x).relu()
        return self.one(x).sigmoid()


class RowLoop(torch.nn.Module):
    """One linear layer and tanh applied again and again: once per row of the batch, or ``trips`` times."""

    def __init__(self, trips: int = 0) -> None:
        super().__init__()
        self.cell, self.trips = torch.nn.Linear(16, 16), trips

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for _ in range(x.size(0) if self.trips == 0 else self.trips):
            h = self.cell(h).tanh()
        return h


class WhileLoop(torch.nn.Module):
    """A linear layer and tanh applied until the state's mean magnitude falls under a threshold: a decoding loop
    with an early stop, whose iterations only the data decides (here one, as the export runs it)."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        while bool(h.abs().mean() > 0.1):
            h = self.cell(h).tanh() * 0.05  # under the threshold after one step: the export runs the module
        return h


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", default=None, help="write this fixture alone (e.g. scripted-while)")
    args = parser.parse_args()
    torch.manual_seed(0)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, module in (("scripted-if", BatchDependent()), ("scripted-loop", RowLoop()),
                         ("scripted-loop-3", RowLoop(trips=3)), ("scripted-while", WhileLoop())):
        if args.only and name != args.only:
            continue
        path = args.out / f"{name}.onnx"
        torch.onnx.export(torch.jit.script(module), (torch.randn(4, 16),), path, dynamo=False, opset_version=17,
                          input_names=["x"], dynamic_axes={"x": {0: "batch"}})
        print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
