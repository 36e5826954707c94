"""Write ``tests/data/sdpa/``: ``F.scaled_dot_product_attention`` as both ONNX exporters write it below opset 23.

Three calls, one per mask form (a float mask, ``is_causal``, a boolean mask), each on its own Q and K (as in a
model, where every layer has its own): ``sdpa-calls-ts.onnx`` (TorchScript, ``dynamo=False``) and
``sdpa-calls-dynamo.onnx`` (the dynamo exporter, which names each call's last node
``scaled_dot_product_attention``). Eager runs each call as one attention kernel; the tests check that Lilou reads
both files so, and that the form it matches in a file without names is the call the dynamo exporter names::

    python scripts/make_sdpa_fixtures.py
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import onnx
import torch
import torch.nn.functional as F

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "sdpa"


class ThreeCalls(torch.nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        floats = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        causal = F.scaled_dot_product_attention(q + 1, k + 1, v, is_causal=True)
        boolean = F.scaled_dot_product_attention(q + 2, k + 2, v, attn_mask=mask > 0)
        return floats + causal + boolean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    mask = torch.randn(2, 1, 16, 16)
    warnings.filterwarnings("ignore")
    for name, dynamo in (("ts", False), ("dynamo", True)):
        path = args.out / f"sdpa-calls-{name}.onnx"
        torch.onnx.export(ThreeCalls(), (q, k, v, mask), path, dynamo=dynamo, opset_version=18,
                          input_names=["q", "k", "v", "mask"])
        onnx.save(onnx.load(path), path)  # one file: the dynamo exporter keeps its constants beside it
        path.with_name(path.name + ".data").unlink(missing_ok=True)
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
