"""Write the Stable Diffusion UNet test graphs of ``tests/data/diffusion/`` (weight-free): exports and their
onnxruntime-optimized copies.

onnxruntime's optimizer for diffusion models (``optimize_model(model_type="unet")``, which onnxruntime's and Olive's
Stable Diffusion pipelines run) rewrites a UNet with channels-last contrib ops (``lilou/graph/contrib_diffusion.py``)
and packed attention (``lilou/graph/contrib_multihead.py``). Neither onnxruntime nor diffusers is a dependency of
Lilou, so the files are made once here and committed (every initializer above 1 KiB stripped, as the zoo strips its
exports)::

    pip install --target /tmp/sd-tools onnxruntime==1.32.0 diffusers==0.42.1 --no-deps
    PYTHONPATH=/tmp/sd-tools python scripts/make_diffusion_fixtures.py

The UNet is ``UNet2DConditionModel`` at a small size (two blocks of 64 and 128 channels, one layer each, 8 heads,
32 groups, a 16 x 16 latent, 8 context tokens of 64), random weights, exported by the TorchScript exporter at opset 17
(``dynamo=False``, what the optimizer's patterns match):

- ``unet-sdpa.onnx``: with diffusers' default attention (``AttnProcessor2_0``, ``F.scaled_dot_product_attention``);
  ``unet-sdpa-ort.onnx`` its optimized copy (onnxruntime 1.32 fuses its convolutions, norms and GEGLU, not its
  attention);
- ``unet.onnx``: with the classic attention (``set_default_attn_processor``: ``baddbmm``, softmax, ``bmm``), whose
  attention onnxruntime fuses; ``unet-ort.onnx`` its optimized copy (packed QKV and KV ``MultiHeadAttention``, the
  optimizer's default).
"""
from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

import onnx
import torch

from lilou.zoo.export import strip_weights

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "diffusion"


class _Denoiser(torch.nn.Module):
    """The UNet's noise prediction from the latent, the timestep and the text context."""

    def __init__(self, unet: torch.nn.Module) -> None:
        super().__init__()
        self.unet = unet

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        return self.unet(sample, timestep, encoder_hidden_states=context, return_dict=False)[0]


def _unet(classic_attention: bool) -> torch.nn.Module:
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(64, 128),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=64, attention_head_dim=8, norm_num_groups=32).eval()
    if classic_attention:
        unet.set_default_attn_processor()
    return _Denoiser(unet)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    from onnxruntime.transformers import optimizer

    args.out.mkdir(parents=True, exist_ok=True)
    inputs = (torch.randn(2, 4, 16, 16), torch.tensor([10, 10]), torch.randn(2, 8, 64))
    for name, classic in (("unet-sdpa", False), ("unet", True)):
        with tempfile.TemporaryDirectory() as folder:
            exported = Path(folder) / f"{name}.onnx"
            torch.onnx.export(_unet(classic), inputs, exported, dynamo=False, opset_version=17,
                              input_names=["sample", "timestep", "encoder_hidden_states"])
            optimized = optimizer.optimize_model(str(exported), model_type="unet", num_heads=0, hidden_size=0,
                                                 opt_level=0, use_gpu=True)
            _save(onnx.load(exported), args.out / f"{name}.onnx")
            saved = Path(folder) / f"{name}-ort.onnx"
            optimized.save_model_to_file(str(saved))
            _save(onnx.load(saved), args.out / f"{name}-ort.onnx")


def _save(proto: onnx.ModelProto, path: Path) -> None:
    contrib = Counter(n.op_type for n in proto.graph.node if n.domain not in ("", "ai.onnx"))
    _large_constants_as_initializers(proto.graph)
    onnx.save(strip_weights(proto, location=f"{path.stem}.weights"), path)
    print(f"{path.name}: {path.stat().st_size // 1024} KB, {len(proto.graph.node)} nodes, contrib ops {dict(contrib)}")



def _large_constants_as_initializers(graph: onnx.GraphProto) -> None:
    """``Constant`` nodes above 1 KiB (the classic attention's ``torch.empty`` operand of ``baddbmm``, traced as a
    4 MB constant) as initializers of the same name, so that stripping the weights strips them too."""
    kept = []
    for node in graph.node:
        value = next((a.t for a in node.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR),
                     None) if node.op_type == "Constant" else None
        if value is not None and value.ByteSize() > 1024:
            value.name = node.output[0]
            graph.initializer.append(value)
        else:
            kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)


if __name__ == "__main__":
    main()
