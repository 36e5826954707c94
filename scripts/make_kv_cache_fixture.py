"""Write ``tests/data/kv_cache/llama-past.onnx``: one decode step of a Llama with its KV cache, weight-free.

A decoder exported for serving reads its KV cache as inputs (``past_key_values.<layer>.key`` / ``.value``) and names
its dynamic axes as Hugging Face Optimum does: ``batch_size``, ``sequence_length``, ``past_sequence_length`` and the
attention mask's ``past_sequence_length + sequence_length``. ``lilou infer`` binds them by name
(``--shape past_sequence_length=1023``); the tests need a real such file, so it is made once here and committed::

    python scripts/make_kv_cache_fixture.py

The model is a two-layer ``LlamaForCausalLM`` (256 wide, 4 heads, 2 KV heads, random weights) exported by the
TorchScript exporter at opset 17 with a ``DynamicCache`` filled from the inputs; every initializer above 1 KiB is
stripped, as the zoo strips its exports.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import onnx
import torch

from lilou.zoo.export import strip_weights

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "kv_cache" / "llama-past.onnx"
LAYERS, KV_HEADS, HEAD_DIM = 2, 2, 64


class _DecodeStep(torch.nn.Module):
    """Logits and the grown KV cache of one step, from the token ids, mask, positions and the cache as tensors."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids, *past):
        from transformers import DynamicCache

        cache = DynamicCache()
        for layer in range(LAYERS):
            cache.update(past[2 * layer], past[2 * layer + 1], layer)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=cache, use_cache=True)
        present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
        return (out.logits, *present)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    import transformers as hf

    torch.manual_seed(0)
    model = hf.LlamaForCausalLM(hf.LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=LAYERS,
                                               num_attention_heads=4, num_key_value_heads=KV_HEADS, vocab_size=1000,
                                               max_position_embeddings=2048)).eval()
    batch, past_length = 2, 16
    inputs = (torch.randint(0, 1000, (batch, 1)), torch.ones(batch, past_length + 1, dtype=torch.long),
              torch.full((batch, 1), past_length),
              *(torch.randn(batch, KV_HEADS, past_length, HEAD_DIM) for _ in range(2 * LAYERS)))
    cache = [f"past_key_values.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    axes = {"input_ids": {0: "batch_size", 1: "sequence_length"},
            "attention_mask": {0: "batch_size", 1: "past_sequence_length + sequence_length"},
            "position_ids": {0: "batch_size", 1: "sequence_length"},
            **{name: {0: "batch_size", 2: "past_sequence_length"} for name in cache}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        exported = Path(folder) / "model.onnx"
        torch.onnx.export(_DecodeStep(model), inputs, exported, dynamo=False, opset_version=17,
                          input_names=["input_ids", "attention_mask", "position_ids", *cache],
                          output_names=["logits", *(n.replace("past_key_values", "present") for n in cache)],
                          dynamic_axes=axes)
        onnx.save(strip_weights(onnx.load(exported), location=f"{args.out.stem}.weights"), args.out)
    print(f"{args.out}: {args.out.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
