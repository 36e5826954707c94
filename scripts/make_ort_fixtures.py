"""Write the onnxruntime-optimized test graphs of ``tests/data/ort/`` (weight-free), beside the exports they came from.

Users hand Lilou files that onnxruntime's transformer optimizer (or Hugging Face Optimum's ORTOptimizer, which runs
it) has rewritten with its contrib ops (``lilou/graph/contrib_ops.py``). The tests need real ones, and onnxruntime is
not a dependency of Lilou, so they are made once here and committed (a few tens of KB: every initializer above 1 KiB
is stripped, as the zoo strips its exports)::

    pip install onnxruntime==1.20.0      # only for this script
    python scripts/make_ort_fixtures.py  # writes tests/data/ort/*.onnx

Each model is a small random-weight Hugging Face model (two layers, 256 wide), exported by the TorchScript exporter
(``dynamo=False``, what the optimizer's patterns match) at the opset named, then optimized with
``optimize_model(model_type=..., opt_level=0, use_gpu=True)``. Which contrib ops each holds is printed.
"""
from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

import onnx
import torch

from lilou.zoo.export import strip_weights

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "ort"


class _Hidden(torch.nn.Module):
    """The model's last hidden state from its token ids (and attention mask when given)."""

    def __init__(self, model: torch.nn.Module, with_mask: bool) -> None:
        super().__init__()
        self.model, self.with_mask = model, with_mask

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.with_mask:
            return self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        return self.model(input_ids=ids).last_hidden_state


def _models():
    import transformers as hf

    torch.manual_seed(0)
    bert = hf.BertModel(hf.BertConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=1024, attn_implementation="eager")).eval()
    gpt2 = hf.GPT2Model(hf.GPT2Config(n_embd=256, n_layer=2, n_head=4, attn_implementation="eager")).eval()
    t5 = hf.T5EncoderModel(hf.T5Config(d_model=256, num_layers=2, num_heads=4, d_ff=1024, d_kv=64)).eval()
    # name, module, with a mask, optimizer model type, opset, fp16 copy
    return [("bert", bert, True, "bert", 17, True), ("bert-opset14", bert, True, "bert", 14, False),
            ("gpt2", gpt2, False, "gpt2", 17, False), ("t5", t5, False, "bert", 17, False)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    from onnxruntime.transformers import optimizer

    args.out.mkdir(parents=True, exist_ok=True)
    ids, mask = torch.randint(0, 1000, (2, 64)), torch.ones(2, 64, dtype=torch.long)
    for name, model, with_mask, model_type, opset, fp16 in _models():
        exported = args.out / f"{name}.onnx"
        inputs = (ids, mask) if with_mask else (ids,)
        torch.onnx.export(_Hidden(model, with_mask), inputs, exported, dynamo=False, opset_version=opset,
                          input_names=["input_ids", "attention_mask"][:len(inputs)])
        optimized = optimizer.optimize_model(str(exported), model_type=model_type, num_heads=4, hidden_size=256,
                                             opt_level=0, use_gpu=True)
        _save(onnx.load(exported), exported)
        _save(_as_saved(optimized), args.out / f"{name}-ort.onnx")
        if fp16:
            optimized.convert_float_to_float16(keep_io_types=True)
            _save(_as_saved(optimized), args.out / f"{name}-ort-fp16.onnx")


def _as_saved(optimized) -> onnx.ModelProto:
    """The optimized model as ``save_model_to_file`` writes it (it adds the com.microsoft opset import)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.onnx"
        optimized.save_model_to_file(str(path))
        return onnx.load(path)


def _save(proto: onnx.ModelProto, path: Path) -> None:
    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    contrib = Counter(n.op_type for n in proto.graph.node if n.domain not in ("", "ai.onnx")
                      or n.op_type == "SimplifiedLayerNormalization"
                      or (n.op_type == "LayerNormalization" and opset < 17))
    onnx.save(strip_weights(proto, location=f"{path.stem}.weights"), path)
    print(f"{path.name}: {path.stat().st_size // 1024} KB, contrib ops {dict(contrib)}")

if __name__ == "__main__":
    main()
