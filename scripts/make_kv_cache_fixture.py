"""Write ``tests/data/kv_cache/llama-past.onnx`` and ``llama-merged.onnx``: a Llama decoder with its KV cache, weight-free.

A decoder exported for serving reads its KV cache as inputs (``past_key_values.<layer>.key`` / ``.value``) and names
its dynamic axes as Hugging Face Optimum does: ``batch_size``, ``sequence_length``, ``past_sequence_length`` and the
attention mask's ``past_sequence_length + sequence_length``. ``lilou infer`` binds them by name
(``--shape past_sequence_length=1023``); the tests need a real such file, so it is made once here and committed::

    python scripts/make_kv_cache_fixture.py

The model is a two-layer ``LlamaForCausalLM`` (256 wide, 4 heads, 2 KV heads, random weights) exported by the
TorchScript exporter at opset 17 with a ``DynamicCache`` filled from the inputs; every initializer above 1 KiB is
stripped, as the zoo strips its exports.

``llama-merged.onnx`` is the file Optimum's ``merge_decoders`` makes of the same model (the layout of every
``decoder_model_merged.onnx`` on the Hub): one ``If`` node reading the input ``use_cache_branch``, the decode step
with the cache as its then branch and the prompt pass without a cache (``decoder_model.onnx``) as its else branch,
the weights the two share stored once in the outer graph and the small integer constants kept in each branch.
Optimum itself does not run beside the installed onnx and transformers, so the merge is written here after its
``optimum/onnx/graph_transformations.py``.
"""
from __future__ import annotations

import argparse
import hashlib
import tempfile
from pathlib import Path

import onnx
import torch

from lilou.zoo.export import strip_weights

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "kv_cache" / "llama-past.onnx"
MERGED = OUT.with_name("llama-merged.onnx")
LAYERS, KV_HEADS, HEAD_DIM = 2, 2, 64


class _DecodeStep(torch.nn.Module):
    """Logits and the grown KV cache of one step, from the token ids, mask, positions and the cache as tensors."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids, *past):
        from transformers import DynamicCache

        cache = DynamicCache()
        for layer in range(LAYERS if past else 0):
            cache.update(past[2 * layer], past[2 * layer + 1], layer)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=cache, use_cache=True)
        present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
        return (out.logits, *present)


def _is_branch_constant(tensor: onnx.TensorProto) -> bool:
    """The initializers Optimum keeps inside each branch: scalars and 1-D int32/int64 tensors."""
    return len(tensor.dims) == 0 or (len(tensor.dims) == 1 and tensor.data_type in (onnx.TensorProto.INT32,
                                                                                    onnx.TensorProto.INT64))


def merge_decoders(no_past: onnx.ModelProto, with_past: onnx.ModelProto) -> onnx.ModelProto:
    """One model whose ``If`` on ``use_cache_branch`` runs ``with_past`` (then) or ``no_past`` (else)."""
    shared: dict[bytes, str] = {}
    outer: list[onnx.TensorProto] = []
    branches = []
    for model, name in ((with_past, "with_past"), (no_past, "no_past")):
        renamed: dict[str, str] = {}
        kept = []
        for tensor in model.graph.initializer:
            if _is_branch_constant(tensor):
                kept.append(tensor)
                continue
            key = hashlib.sha256(bytes([tensor.data_type]) + bytes(str(list(tensor.dims)), "ascii")
                                 + tensor.raw_data).digest()
            if key not in shared:
                shared[key] = f"{tensor.name}_merged_{len(shared)}"
                copy = onnx.TensorProto()
                copy.CopyFrom(tensor)
                copy.name = shared[key]
                outer.append(copy)
            renamed[tensor.name] = shared[key]
        for node in model.graph.node:
            for index, value in enumerate(node.input):
                node.input[index] = renamed.get(value, value)
        branches.append(onnx.helper.make_graph(list(model.graph.node), name, inputs=[],
                                               outputs=list(model.graph.output), initializer=kept))
    inputs = list(with_past.graph.input) + [onnx.helper.make_tensor_value_info("use_cache_branch",
                                                                               onnx.TensorProto.BOOL, [1])]
    choice = onnx.helper.make_node("If", ["use_cache_branch"], [v.name for v in with_past.graph.output],
                                   name="optimum::if", then_branch=branches[0], else_branch=branches[1])
    graph = onnx.helper.make_graph([choice], "merged", inputs, list(with_past.graph.output), initializer=outer)
    return onnx.helper.make_model(graph, opset_imports=list(with_past.opset_import), producer_name="optimum-onnx",
                                  ir_version=with_past.ir_version)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--merged", type=Path, default=MERGED)
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
    prompt = (torch.randint(0, 1000, (batch, 8)), torch.ones(batch, 8, dtype=torch.long),
              torch.arange(8).repeat(batch, 1))
    cache = [f"past_key_values.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    axes = {"input_ids": {0: "batch_size", 1: "sequence_length"},
            "attention_mask": {0: "batch_size", 1: "past_sequence_length + sequence_length"},
            "position_ids": {0: "batch_size", 1: "sequence_length"},
            **{name: {0: "batch_size", 2: "past_sequence_length"} for name in cache}}
    present = [n.replace("past_key_values", "present") for n in cache]
    prompt_axes = {**{name: axes[name] for name in ("input_ids", "position_ids")},
                   "attention_mask": {0: "batch_size", 1: "sequence_length"},
                   "logits": {0: "batch_size", 1: "sequence_length"},
                   **{name: {0: "batch_size", 2: "sequence_length"} for name in present}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        exported, first = Path(folder) / "model.onnx", Path(folder) / "prompt.onnx"
        torch.onnx.export(_DecodeStep(model), inputs, exported, dynamo=False, opset_version=17,
                          input_names=["input_ids", "attention_mask", "position_ids", *cache],
                          output_names=["logits", *present], dynamic_axes=axes)
        torch.onnx.export(_DecodeStep(model), prompt, first, dynamo=False, opset_version=17,
                          input_names=["input_ids", "attention_mask", "position_ids"],
                          output_names=["logits", *present], dynamic_axes=prompt_axes)
        merged = merge_decoders(onnx.load(first), onnx.load(exported))
        onnx.checker.check_model(merged)
        onnx.save(strip_weights(onnx.load(exported), location=f"{args.out.stem}.weights"), args.out)
        onnx.save(strip_weights(merged, location=f"{args.merged.stem}.weights"), args.merged)
    for path in (args.out, args.merged):
        print(f"{path}: {path.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
