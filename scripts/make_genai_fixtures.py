"""Write ``tests/data/genai/``: a Llama as onnxruntime-genai's model builder writes it (FP16, INT4), weight-free.

onnxruntime-genai's builder (``python -m onnxruntime_genai.models.builder``) makes the ONNX files behind most LLMs
published for onnxruntime (the ``*-onnx`` repositories of Phi, Llama, Mistral, Qwen on the Hugging Face Hub): one
``GroupQueryAttention`` per layer (rotary embedding and KV cache inside), ``SkipSimplifiedLayerNormalization``,
and for INT4 ``MatMulNBits``. The tests need real ones; the builder is not a dependency of Lilou, so::

    pip install --target /tmp/genai onnxruntime-genai==0.18.0 onnxruntime==1.32.0   # only for this script
    PYTHONPATH=/tmp/genai python scripts/make_genai_fixtures.py

The model is the two-layer ``LlamaForCausalLM`` of ``scripts/make_kv_cache_fixture.py`` (256 wide, 4 heads, 2 KV
heads, vocabulary 1000, random weights) with a word-level tokenizer (the builder reads one), built for the CUDA
execution provider (``-e cuda``) in FP16 and INT4 (``-p fp16``, ``-p int4``), and in INT4 with its embeddings tied
to the LM head (``tie_word_embeddings``, ``--extra_options shared_embeddings=true``: the table is the LM head's INT4
weight, read by ``GatherBlockQuantized``), and in FP16 for DirectML (``-e dml``: separate Q, K and V projections,
each of Q and K rotated by its own ``RotaryEmbedding`` before the attention, the way the DirectML folders of those
repositories ship them); every initializer above 1 KiB is stripped, as the zoo strips its exports.

``qwen3-gqa-fp16.onnx`` and ``gemma2-gqa-fp16.onnx`` are the same size of Qwen3 (its ``q_norm``/``k_norm`` fused into the
attention, Q, K and V split from one projection) and Gemma 2 (one sliding-window layer with a windowed cache of its
own length, ``past_sliding_length``, one global layer, attention soft-capping), built the same way.

``whisper-encoder.onnx`` and ``whisper-decoder.onnx`` are the builder's two files (``-e cuda -p fp16``) of a two-layer
``WhisperForConditionalGeneration`` (256 wide, 4 heads, 1500 audio positions, vocabulary 1000, random weights): the
encoder's ``Attention`` without a bias input, the decoder step's self-attention ``MultiHeadAttention`` with its cache
and its cross-attention over the encoder's keys and values; ``whisper-encoder-export.onnx`` is the same encoder as the
dynamo exporter writes it at opset 23 (``F.scaled_dot_product_attention`` as ONNX's ``Attention``), to compare with.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx
import torch

from lilou.zoo.export import strip_weights

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "genai"


def _tiny_llama(folder: Path, tied: bool) -> None:
    """The model and a tokenizer the builder can read, saved to ``folder``."""
    import transformers as hf
    from tokenizers import Tokenizer, models, pre_tokenizers

    torch.manual_seed(0)
    hf.LlamaForCausalLM(hf.LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                                       max_position_embeddings=2048, tie_word_embeddings=tied)
                        ).eval().save_pretrained(folder)
    vocabulary = {"<unk>": 0, **{f"t{i}": i for i in range(1, 1000)}}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    hf.PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="t1", eos_token="t2",
                               pad_token="t0").save_pretrained(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        for name, precision, tied, provider in (("fp16", "fp16", False, "cuda"), ("int4", "int4", False, "cuda"),
                                                ("int4-tied", "int4", True, "cuda"), ("dml-fp16", "fp16", False, "dml")):
            source, built = Path(folder) / f"llama-{name}", Path(folder) / name
            _tiny_llama(source, tied)
            extra = ["--extra_options", "shared_embeddings=true"] if tied else []
            subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source), "-o",
                            str(built), "-p", precision, "-e", provider, "-c", str(Path(folder) / "cache"), *extra],
                           check=True, capture_output=True)
            target = args.out / f"llama-gqa-{name}.onnx"
            model = onnx.load(built / "model.onnx", load_external_data=False)
            onnx.save(strip_weights(model, location=f"{target.stem}.weights"), target)
            print(f"{target}: {target.stat().st_size // 1024} KB")
        _other_decoders(args.out, Path(folder))
        _whisper(args.out, Path(folder))


def _other_decoders(out: Path, folder: Path) -> None:
    """Qwen3 and Gemma 2 at the Llama's size, built for CUDA in FP16."""
    import transformers as hf

    common = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=1000, max_position_embeddings=2048)
    for name, model in (("qwen3", lambda: hf.Qwen3ForCausalLM(hf.Qwen3Config(**common, head_dim=64))),
                        ("gemma2", lambda: hf.Gemma2ForCausalLM(hf.Gemma2Config(**common, head_dim=64,
                                                                                pad_token_id=0)))):
        source, built = folder / name, folder / f"{name}-built"
        _tiny_llama(source, tied=False)  # the tokenizer; the model is replaced below
        torch.manual_seed(0)
        model().eval().save_pretrained(source)
        subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source), "-o", str(built),
                        "-p", "fp16", "-e", "cuda", "-c", str(folder / "cache")], check=True, capture_output=True)
        target = out / f"{name}-gqa-fp16.onnx"
        onnx.save(strip_weights(onnx.load(built / "model.onnx", load_external_data=False),
                                location=f"{target.stem}.weights"), target)
        print(f"{target}: {target.stat().st_size // 1024} KB")


def _tiny_whisper(folder: Path) -> None:
    import transformers as hf

    torch.manual_seed(0)
    hf.WhisperForConditionalGeneration(hf.WhisperConfig(
        d_model=256, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=1024, decoder_ffn_dim=1024, vocab_size=1000, num_mel_bins=80, max_source_positions=1500,
        max_target_positions=128, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    ).eval().save_pretrained(folder)


class _Encoder(torch.nn.Module):
    def __init__(self, encoder: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.encoder(features).last_hidden_state


def _whisper(out: Path, folder: Path) -> None:
    """The builder's Whisper files, and the encoder as the dynamo exporter writes it."""
    import transformers as hf

    source, built = folder / "whisper", folder / "whisper-built"
    _tiny_whisper(source)
    subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source), "-o", str(built),
                    "-p", "fp16", "-e", "cuda", "-c", str(folder / "cache")], check=True, capture_output=True)
    exported = folder / "whisper-encoder-export.onnx"
    encoder = hf.WhisperForConditionalGeneration.from_pretrained(source).eval().model.encoder
    torch.onnx.export(_Encoder(encoder), (torch.randn(2, 80, 3000),), exported, dynamo=True, opset_version=23,
                      optimize=False)
    for path, name in ((built / "encoder.onnx", "whisper-encoder"), (built / "decoder.onnx", "whisper-decoder"),
                       (exported, "whisper-encoder-export")):
        target = out / f"{name}.onnx"
        onnx.save(strip_weights(onnx.load(path, load_external_data=False), location=f"{name}.weights"), target)
        print(f"{target}: {target.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
