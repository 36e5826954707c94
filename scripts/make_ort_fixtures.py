"""Write the onnxruntime-optimized test graphs of ``tests/data/ort/`` (weight-free), beside the exports they came from.

Users hand Lilou files that onnxruntime's transformer optimizer (or Hugging Face Optimum's ORTOptimizer, which runs
it) has rewritten with its contrib ops (``lilou/graph/contrib_ops.py``). The tests need real ones, and onnxruntime is
not a dependency of Lilou, so they are made once here and committed (a few tens of KB: every initializer above 1 KiB
is stripped, as the zoo strips its exports)::

    pip install onnxruntime==1.20.0      # only for this script
    python scripts/make_ort_fixtures.py  # writes tests/data/ort/*.onnx

Each model is a small random-weight Hugging Face model (two layers, 256 wide; ``bert-classic``: BERT as transformers
4.x wrote it, whose attention onnxruntime fuses), exported by the TorchScript exporter
(``dynamo=False``, what the optimizer's patterns match) at the opset named, then optimized with
``optimize_model(model_type=..., opt_level=0, use_gpu=True)``. Which contrib ops each holds is printed.

``--attention`` writes only the attention forms of a later onnxruntime (made with 1.32.0, whose BERT fusion also
matches today's transformers export), from the ``bert`` and ``bert-classic`` exports already in the folder:
``bert-attention`` (``Attention`` reading the mask index onnxruntime computes with ``ReduceSum``), ``bert-mha``,
``bert-classic-mha`` (``MultiHeadAttention``: ``FusionOptions.use_multi_head_attention``, with that mask index and
with EmbedLayerNormalization's) and ``bert-classic-mha-raw-mask`` (the raw 2-D mask: ``use_raw_attention_mask``)::

    pip install --target /tmp/ort onnxruntime==1.32.0 && PYTHONPATH=/tmp/ort python scripts/make_ort_fixtures.py --attention

``--session`` writes only models as an onnxruntime session saves them after optimizing
(``SessionOptions.optimized_model_filepath``, CPU execution provider, onnxruntime 1.32.0): ``bert-ort-session``
(``ORT_ENABLE_EXTENDED``: FusedMatMul, Gelu, SkipLayerNormalization) from the committed ``bert`` export, and a small
residual CNN (``cnn``: conv, batch norm, ReLU6, two residual blocks, a sigmoid gate, a linear head) with
``cnn-ort-session`` (``ORT_ENABLE_EXTENDED``: FusedConv, FusedGemm) and ``cnn-ort-session-cpu`` (``ORT_ENABLE_ALL``:
the CPU-only NCHWc layout ops, which Lilou names and cannot price).
"""
from __future__ import annotations

import argparse
import math
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


class _ClassicBert(torch.nn.Module):
    """BERT as transformers 4.x wrote it (``BertSelfAttention`` with the additive extended mask, eager): the pattern
    onnxruntime's Attention and EmbedLayerNormalization fusions match. Today's transformers builds its masks and
    attention otherwise, and no fusion of onnxruntime 1.20 matches their exports."""

    def __init__(self, vocab: int = 1000, hidden: int = 256, heads: int = 4, inner: int = 1024, layers: int = 2) -> None:
        super().__init__()
        nn = torch.nn
        self.heads, self.head_size = heads, hidden // heads
        self.words, self.positions, self.token_types = nn.Embedding(vocab, hidden), nn.Embedding(512, hidden), \
            nn.Embedding(2, hidden)
        self.register_buffer("position_ids", torch.arange(512).unsqueeze(0))
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "query": nn.Linear(hidden, hidden), "key": nn.Linear(hidden, hidden), "value": nn.Linear(hidden, hidden),
            "dense": nn.Linear(hidden, hidden), "norm1": nn.LayerNorm(hidden, eps=1e-12),
            "inner": nn.Linear(hidden, inner), "outer": nn.Linear(inner, hidden),
            "norm2": nn.LayerNorm(hidden, eps=1e-12)}) for _ in range(layers))

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.size(0), x.size(1), self.heads, self.head_size).permute(0, 2, 1, 3)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, token_types: torch.Tensor) -> torch.Tensor:
        positions = self.position_ids[:, :ids.size(1)]
        x = self.norm(self.words(ids) + self.positions(positions) + self.token_types(token_types))
        extended = (1.0 - mask[:, None, None, :].float()) * -10000.0
        for block in self.blocks:
            q, k, v = (self._heads(block[name](x)) for name in ("query", "key", "value"))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_size)
            context = torch.matmul(torch.softmax(scores + extended, dim=-1), v).permute(0, 2, 1, 3).contiguous()
            x = block["norm1"](block["dense"](context.view(x.shape)) + x)
            x = block["norm2"](block["outer"](torch.nn.functional.gelu(block["inner"](x))) + x)
        return x


def _classic_bert(out: Path, optimizer) -> None:
    torch.manual_seed(0)
    ids, mask = torch.randint(0, 1000, (2, 64)), torch.ones(2, 64, dtype=torch.long)
    exported = out / "bert-classic.onnx"
    torch.onnx.export(_ClassicBert().eval(), (ids, mask, torch.zeros_like(ids)), exported, dynamo=False,
                      opset_version=17, input_names=["input_ids", "attention_mask", "token_type_ids"])
    optimized = optimizer.optimize_model(str(exported), model_type="bert", num_heads=4, hidden_size=256,
                                         opt_level=0, use_gpu=True)
    _save(onnx.load(exported), exported)
    _save(_as_saved(optimized), out / "bert-classic-ort.onnx")


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
    parser.add_argument("--attention", action="store_true", help="write only the attention forms (see above)")
    parser.add_argument("--session", action="store_true", help="write only the saved-session forms (see above)")
    args = parser.parse_args()
    from onnxruntime.transformers import optimizer

    if args.attention:
        _attention_forms(args.out, optimizer)
        return
    if args.session:
        _session_forms(args.out)
        return

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
    _classic_bert(args.out, optimizer)


def _attention_forms(out: Path, optimizer) -> None:
    """onnxruntime's encoder attention ops on the committed exports (their weights are stripped: random ones are
    put back for the optimizer, which reads the biases it concatenates)."""
    from onnxruntime.transformers.fusion_options import FusionOptions

    forms = [("bert", "bert-attention", {}), ("bert", "bert-mha", {"use_multi_head_attention": True}),
             ("bert-classic", "bert-classic-mha", {"use_multi_head_attention": True}),
             ("bert-classic", "bert-classic-mha-raw-mask", {"use_multi_head_attention": True, "raw_mask": True})]
    with tempfile.TemporaryDirectory() as folder:
        for source, name, options in forms:
            exported = Path(folder) / f"{source}.onnx"
            onnx.save(_with_random_weights(onnx.load(out / f"{source}.onnx", load_external_data=False)), exported)
            fusion = FusionOptions("bert")
            fusion.use_multi_head_attention = options.get("use_multi_head_attention", False)
            if options.get("raw_mask"):
                fusion.use_raw_attention_mask(True)
            optimized = optimizer.optimize_model(str(exported), model_type="bert", num_heads=4, hidden_size=256,
                                                 opt_level=0, use_gpu=True, optimization_options=fusion)
            _save(_as_saved(optimized), out / f"{name}.onnx")


class _ResidualCnn(torch.nn.Module):
    """A small CNN with what onnxruntime's session fusions match: conv + ReLU6, conv + batch norm + ReLU (the norm
    folded by the exporter), a residual add before a ReLU, conv + sigmoid, Gemm + ReLU."""

    def __init__(self, channels: int = 32) -> None:
        super().__init__()
        nn = torch.nn
        self.stem, self.act = nn.Conv2d(3, channels, 3, stride=2, padding=1), nn.ReLU6()
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "c1": nn.Conv2d(channels, channels, 3, padding=1, bias=False), "b1": nn.BatchNorm2d(channels),
            "c2": nn.Conv2d(channels, channels, 3, padding=1, bias=False), "b2": nn.BatchNorm2d(channels)})
            for _ in range(2))
        self.gate, self.head = nn.Conv2d(channels, channels, 1), nn.Linear(channels, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.stem(x))
        for block in self.blocks:
            x = torch.relu(block["b2"](block["c2"](torch.relu(block["b1"](block["c1"](x))))) + x)
        x = x * torch.sigmoid(self.gate(x))
        return torch.relu(self.head(x.mean((2, 3))))


def _session_forms(out: Path) -> None:
    """Models as an onnxruntime session saves them after its graph optimizations (CPU execution provider)."""
    import onnxruntime as ort

    levels = {"ort-session": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
              "ort-session-cpu": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    with tempfile.TemporaryDirectory() as folder:
        torch.manual_seed(0)
        cnn = Path(folder) / "cnn.onnx"
        torch.onnx.export(_ResidualCnn().eval(), (torch.randn(1, 3, 64, 64),), cnn, dynamo=False, opset_version=17,
                          input_names=["x"])
        _save(onnx.load(cnn), out / "cnn.onnx")
        bert = Path(folder) / "bert.onnx"
        onnx.save(_with_random_weights(onnx.load(out / "bert.onnx", load_external_data=False)), bert)
        for source, suffixes in ((cnn, ("ort-session", "ort-session-cpu")), (bert, ("ort-session",))):
            for suffix in suffixes:
                saved = Path(folder) / f"{source.stem}-{suffix}.onnx"
                options = ort.SessionOptions()
                options.graph_optimization_level = levels[suffix]
                options.optimized_model_filepath = str(saved)
                ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
                _save(onnx.load(saved), out / saved.name)


def _with_random_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every stripped initializer filled with random values of its shape and type (the graph is what matters)."""
    import numpy as np
    from onnx import numpy_helper

    generator = np.random.default_rng(0)
    for index, tensor in enumerate(model.graph.initializer):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
            values = generator.standard_normal(tuple(tensor.dims)).astype(dtype) * 0.02
            model.graph.initializer[index].CopyFrom(numpy_helper.from_array(values, tensor.name))
    return model


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
