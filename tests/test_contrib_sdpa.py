"""onnxruntime-genai's Whisper files: the encoder's Attention and the decoder step's MultiHeadAttention (cache and
cross-attention) written back as the SDPA calls eager runs (lilou.graph.contrib_sdpa).

``tests/data/genai/whisper-{encoder,decoder}.onnx`` are real: a two-layer Whisper (256 wide, 4 heads) built by
onnxruntime-genai 0.18's model builder for CUDA in FP16; ``whisper-encoder-export.onnx`` the same encoder exported by
torch.onnx's dynamo exporter at opset 23 (scripts/make_genai_fixtures.py), weights stripped.
"""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from lilou.graph.dag import load_graph

GENAI = Path(__file__).resolve().parent / "data" / "genai"
STEP = {"batch_size": (2,), "sequence_length": (1,), "past_sequence_length": (31,)}


@pytest.fixture(scope="module")
def predictor():
    from lilou.api import Predictor

    return Predictor()


def test_the_built_encoder_is_priced_as_the_exported_one(predictor) -> None:
    """One SDPA kernel per layer, priced as the export's (the same shapes); the GEMM work the same but for the
    keys and values of the decoder's cross-attention, which the built encoder computes (the export's decoder does)
    and the bias adds it writes apart from their GEMMs."""
    built = predictor.predict(GENAI / "whisper-encoder.onnx", gpu="a10g", batch=2)
    exported = predictor.predict(GENAI / "whisper-encoder-export.onnx", gpu="a10g", precision="fp16")
    assert built.precision == exported.precision == "fp16"
    assert any("onnxruntime's fused ops (2 Attention, 4 SkipLayerNormalization)" in w for w in built.warnings)
    assert not any("unknown shape" in w or "unsupported op" in w for w in built.warnings)
    attention = [k.latency_ms for k in built.kernels if "Attention" in k.ops]
    assert attention == pytest.approx([k.latency_ms for k in exported.kernels if "Attention" in k.ops], rel=0.01)
    assert len(attention) == 2
    cross = [k for k in built.kernels if any("/cross/" in n for n in k.nodes)]
    assert len(cross) == 4 and all(k.category == "gemm" for k in cross)  # keys and values of two layers
    gemm_flops = [sum(k.flops for k in r.kernels if k.category == "gemm" and k not in cross)
                  for r in (built, exported)]
    assert gemm_flops[0] == pytest.approx(gemm_flops[1], rel=0.002)
    assert built.latency_ms == pytest.approx(exported.latency_ms, rel=0.1)


def test_a_decoder_step_grows_its_cache_and_attends_to_the_encoder() -> None:
    """Self-attention over the grown cache (past + 1), cross-attention over the encoder's 1500 keys: four SDPA
    calls; the present outputs are the cache and the new token's keys and values."""
    graph = load_graph(GENAI / "whisper-decoder.onnx", shapes=STEP)
    assert not graph.unsupported_ops and not any("unknown shape" in w for w in graph.warnings)
    outputs = {t.name: t.shape for t in graph.outputs}
    assert outputs["logits"] == (2, 1, 1000)
    assert all(outputs[f"present_{kv}_self_{i}"] == (2, 4, 32, 64) for kv in ("key", "value") for i in (0, 1))
    attentions = [data for _, data in graph.dag.nodes(data=True) if data["op"] == "Attention"]
    assert len(attentions) == 4
    keys = sorted(data["inputs"][1].shape for data in attentions)
    assert keys == [(2, 4, 32, 64)] * 2 + [(2, 4, 1500, 64)] * 2
    assert sum(data["attributes"].get("is_causal", 0) for data in attentions) == 2


def test_a_built_attention_with_a_mask_stays_unsupported() -> None:
    """A key-padding mask the SDPA rewrite does not write: the op stays, named."""
    model = onnx.load(GENAI / "whisper-decoder.onnx", load_external_data=False)
    cross = next(n for n in model.graph.node if n.op_type == "MultiHeadAttention" and "cross" in n.name)
    cross.input[4] = "key_padding_mask"
    model.graph.input.append(helper.make_tensor_value_info("key_padding_mask", TensorProto.INT32,
                                                           ["batch_size", 1500]))
    from lilou.graph import build_graph

    assert build_graph(model, shapes=STEP).unsupported_ops == ["MultiHeadAttention"]
