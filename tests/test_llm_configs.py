"""Hugging Face config.json spellings of families beyond Llama's (each case a config the user review found misread)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lilou.errors import LilouInputError
from lilou.llm.config import load_config
from lilou.llm.memory import kv_bytes_per_token, kv_cache_bytes

#: bigcode/starcoder's config.json, the fields Lilou reads.
STARCODER = {"architectures": ["GPTBigCodeForCausalLM"], "model_type": "gpt_bigcode", "multi_query": True,
             "n_embd": 6144, "n_head": 48, "n_inner": 24576, "n_layer": 40, "n_positions": 8192, "vocab_size": 49152}


def _write(folder: Path, config: dict, name: str = "config.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(config))
    return path


def test_gpt_bigcode_multi_query_is_one_kv_head(tmp_path):
    """StarCoder's multi_query was read only under Falcon's model type: 48 KV heads, KV cache 48x too big, weights
    34.3 GiB (15.5 B parameters: 28.9 GiB)."""
    config = load_config(_write(tmp_path / "starcoder", STARCODER))
    assert (config.kv_heads, config.head_dim, config.tied_embeddings) == (1, 128, True)
    per_layer = 6144 * (6144 + 2 * 128) + 6144 * 6144 + 2 * 6144 * 24576  # c_attn, c_proj, MLP
    assert config.total_parameters == 40 * per_layer + 49152 * 6144 + (2 * 40 + 1) * 6144  # the head is tied
    assert kv_bytes_per_token(config, "bf16", 1) == 40 * 2 * 1 * 128 * 2
    # GPTBigCodeConfig's default is multi_query true; false is a KV head per query head
    assert load_config(_write(tmp_path / "sc", {**STARCODER, "multi_query": None})).kv_heads == 1
    assert load_config(_write(tmp_path / "mha", {**STARCODER, "multi_query": False})).kv_heads == 48
    with pytest.raises(LilouInputError, match=r"multi_query is 'yes', not true or false"):
        load_config(_write(tmp_path / "bad", {**STARCODER, "multi_query": "yes"}))


#: Hybrid and attention-free configs (their layer kind, and what of the config says so), as the Hub spells them.
_LLAMA_LIKE = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "vocab_size": 65536}


@pytest.mark.parametrize("config, said", [
    ({**_LLAMA_LIKE, "model_type": "jamba", "attn_layer_period": 8, "attn_layer_offset": 4, "num_experts": 16,
      "num_experts_per_tok": 2}, "mamba layers (model_type 'jamba')"),
    ({**_LLAMA_LIKE, "model_type": "granitemoehybrid", "num_hidden_layers": 4,
      "layer_types": ["mamba", "mamba", "mamba", "attention"]}, "mamba layers (3 of the 4 layer_types are 'mamba')"),
    ({**_LLAMA_LIKE, "model_type": "falcon_h1", "mamba_d_ssm": 6144}, "mamba layers (model_type 'falcon_h1')"),
    ({**_LLAMA_LIKE, "model_type": "qwen3_next", "full_attention_interval": 4},
     "linear_attention layers (model_type 'qwen3_next')"),
    ({**_LLAMA_LIKE, "model_type": "some_new_hybrid", "num_hidden_layers": 2,
      "layer_types": ["linear_attention", "full_attention"]}, "linear_attention layers (1 of the 2 layer_types are"),
    ({**_LLAMA_LIKE, "model_type": "some_new_hybrid", "full_attention_interval": 4},
     "linear_attention layers (its full_attention_interval)"),
    ({"model_type": "mamba", "hidden_size": 2560, "num_hidden_layers": 64, "vocab_size": 50280, "state_size": 16},
     "mamba layers (model_type 'mamba')"),
    ({"model_type": "mamba2", "hidden_size": 4096, "num_hidden_layers": 64, "num_heads": 128, "vocab_size": 32768},
     "mamba layers (model_type 'mamba2')"),
    ({"model_type": "rwkv", "hidden_size": 768, "num_hidden_layers": 12, "vocab_size": 50277},
     "rwkv layers (model_type 'rwkv')"),
    ({"architectures": ["MambaLMHeadModel"], "d_model": 2560, "n_layer": 64, "vocab_size": 50277},
     "mamba layers (architecture 'MambaLMHeadModel')"),
])
def test_hybrid_and_attention_free_configs_are_refused_by_their_layer_kind(tmp_path, capsys, config, said):
    """Jamba, Granite 4.0-H, Falcon-H1 and Qwen3-Next were priced as transformers with every layer attention (Jamba
    92 B parameters for 52 B); Mamba, Mamba-2 and RWKV were refused as lacking an MLP width or heads."""
    path = _write(tmp_path / "model", config)
    with pytest.raises(LilouInputError, match=r"^model has " + said.replace("(", r"\(").replace(")", r"\)")):
        load_config(path)
    from lilou.cli import main

    assert main(["llm", str(path), "--gpu", "h100-sxm", "--input-len", "8", "--output-len", "8"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"lilou: error: model has {said}") and error.count("\n") == 1
    assert error.endswith("; Lilou models transformer decoders only\n")


def test_attention_only_layer_types_are_still_read(tmp_path):
    """GraniteMoeHybrid spells a full-attention layer "attention": a config of only those is a transformer."""
    config = load_config(_write(tmp_path / "m", {**_LLAMA_LIKE, "model_type": "llama", "num_hidden_layers": 2,
                                                  "layer_types": ["attention", "full_attention"]}))
    assert (config.layers, config.kind) == (2, "transformer")


MPT_7B = {"architectures": ["MPTForCausalLM"], "model_type": "mpt", "d_model": 4096, "n_heads": 32, "n_layers": 32,
          "expansion_ratio": 4, "max_seq_len": 2048, "vocab_size": 50432, "no_bias": True,
          "attn_config": {"alibi": True, "attn_type": "multihead_attention", "kv_n_heads": 1}}
DBRX = {"architectures": ["DbrxForCausalLM"], "model_type": "dbrx", "d_model": 6144, "n_heads": 48, "n_layers": 40,
        "max_seq_len": 32768, "vocab_size": 100352, "tie_word_embeddings": False,
        "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000},
        "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4}}
INTERNVL = {"architectures": ["InternVLChatModel"], "model_type": "internvl_chat",
            "vision_config": {"model_type": "intern_vit_6b", "hidden_size": 1024},
            "llm_config": {"architectures": ["InternLM2ForCausalLM"], "model_type": "internlm2", "hidden_size": 4096,
                           "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
                           "num_hidden_layers": 32, "num_key_value_heads": 8, "tie_word_embeddings": False,
                           "vocab_size": 92553}}


def test_mpt_dbrx_and_internvl_spellings(tmp_path):
    """MPT (expansion_ratio), DBRX (ffn_config, attn_config) and InternVL (llm_config) were refused as lacking an MLP
    width, or every field."""
    mpt = load_config(_write(tmp_path / "mpt", {**MPT_7B, "attn_config": {"alibi": True}}))
    assert (mpt.layers, mpt.hidden, mpt.heads, mpt.kv_heads, mpt.intermediate) == (32, 4096, 32, 32, 16384)
    assert (mpt.gated_mlp, mpt.norm, mpt.tied_embeddings, mpt.max_context) == (False, "layernorm", True, 2048)
    assert mpt.total_parameters == 32 * (4 * 4096 ** 2 + 2 * 4096 * 16384) + 50432 * 4096 + 65 * 4096  # 6.65 B
    assert load_config(_write(tmp_path / "mpt-mqa", MPT_7B)).kv_heads == 1
    with pytest.raises(LilouInputError, match=r"^mpt-half: intermediate \(.*\) is 8192.5, not a whole number"):
        load_config(_write(tmp_path / "mpt-half", {**MPT_7B, "expansion_ratio": 2.0001220703125}))
    dbrx = load_config(_write(tmp_path / "dbrx", DBRX))
    assert (dbrx.kv_heads, dbrx.experts, dbrx.experts_per_token, dbrx.expert_width, dbrx.moe_layers) == (8, 16, 4, 10752, 40)
    assert (dbrx.gated_mlp, dbrx.norm, dbrx.tied_embeddings, dbrx.max_context) == (True, "layernorm", False, 32768)
    attention = 6144 * (6144 + 2 * 8 * 128) + 6144 * 6144
    experts = 16 * 3 * 6144 * 10752 + 6144 * 16  # and the router
    assert dbrx.total_parameters == 40 * (attention + experts) + 2 * 100352 * 6144 + 81 * 6144  # 131.6 B
    internvl = load_config(_write(tmp_path / "internvl", INTERNVL))
    assert (internvl.model_type, internvl.layers, internvl.kv_heads, internvl.intermediate, internvl.vocab) == \
        ("internlm2", 32, 8, 14336, 92553)
    assert internvl.notes and "vision encoder is not priced" in internvl.notes[0]


def test_a_config_json_in_the_working_folder_is_named_by_its_folder(tmp_path, monkeypatch, capsys):
    """`lilou llm config.json` (or `.`) in the config's folder named the model "" ("--tp 3 does not divide the 32
    attention heads of" and nothing)."""
    _write(tmp_path / "starcoder", STARCODER)
    monkeypatch.chdir(tmp_path / "starcoder")
    assert load_config("config.json").name == load_config(".").name == "starcoder"
    from lilou.cli import main

    assert main(["llm", "config.json", "--gpu", "h100-sxm", "--tp", "5", "--input-len", "8", "--output-len", "8"]) == 2
    assert "attention heads of starcoder" in capsys.readouterr().err


#: openai/gpt-oss-20b's config.json, the fields Lilou reads.
GPT_OSS_20B = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "head_dim": 64, "hidden_size": 2880,
               "intermediate_size": 2880, "num_attention_heads": 64, "num_hidden_layers": 24, "num_key_value_heads": 8,
               "num_local_experts": 32, "num_experts_per_tok": 4, "vocab_size": 201088, "tie_word_embeddings": False,
               "max_position_embeddings": 131072, "sliding_window": 128,
               "layer_types": ["sliding_attention", "full_attention"] * 12,
               "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
                   "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}


def test_gpt_oss_keeps_attention_in_bf16_and_mxfp4_takes_its_scales(tmp_path):
    """modules_to_not_convert was ignored: the attention priced at 4 bits and the experts without their E8M0 scale
    per 32 weights, 11.71 GiB of weights for the 12.80 of the checkpoint (about 13.8 GB)."""
    from lilou.llm.memory import weight_bytes

    config = load_config(_write(tmp_path / "gpt-oss-20b", GPT_OSS_20B))
    assert (config.quantization, config.unquantised, config.quantization_group_bytes) == ("int4", ("attention", "router"),
                                                                                          1 / 32)
    parts = config.parameters()
    assert parts["attention"] == 24 * (2880 * (64 * 64 + 2 * 8 * 64) + 64 * 64 * 2880)
    expected = parts["mlp"] * 4.25 / 8 + (config.total_parameters - parts["mlp"]) * 2
    assert weight_bytes(config, "int4", 1) == pytest.approx(expected, rel=1e-12)
    assert round(expected / 2**30, 2) == 12.80
    # priced as another format (requantised), the format's own accounting: every layer's linear weights at 8 bits
    assert weight_bytes(config, "fp8", 1) == (parts["attention"] + parts["mlp"]) + \
        (config.total_parameters - parts["attention"] - parts["mlp"]) * 2
    # the attention GEMMs read 16-bit weights at the checkpoint's format, 4-bit ones when asked for another int4
    from lilou.llm.steps import StepShape, step_kernels

    def qkv_bytes_read(config):
        kernels = step_kernels(config, StepShape(seqs=1, q_len=1, kv_len=512, causal=False), dtype="int4",
                               kv_dtype="fp16", tp=1, engine="vllm")
        return next(k.spec.bytes_read for k in kernels if k.name == "qkv_proj")
    plain = load_config(_write(tmp_path / "plain", {**GPT_OSS_20B, "quantization_config": {"quant_method": "mxfp4"}}))
    assert qkv_bytes_read(config) == 2880 * 5120 * 2 + 2880 * 2  # 16-bit weights, one token's 16-bit activations
    assert qkv_bytes_read(plain) == 2880 * 5120 // 2 + 2880 * 2


QWEN25_7B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
             "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
             "vocab_size": 152064, "max_position_embeddings": 32768, "tie_word_embeddings": False}


@pytest.mark.parametrize("rope, limit, source", [
    ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131072,
     "original_max_position_embeddings 32768 x rope_scaling factor 4 (yarn)"),
    ({"rope_type": "dynamic", "factor": 2.0}, 65536, "max_position_embeddings 32768 x rope_scaling factor 2 (dynamic)"),
    ({"type": "linear", "factor": 2}, 65536, "max_position_embeddings 32768 x rope_scaling factor 2 (linear)"),
    ({"rope_type": "llama3", "factor": 8.0}, 32768, "max_position_embeddings"),  # vLLM does not scale llama3's
    (None, 32768, "max_position_embeddings"),
])
def test_the_context_limit_takes_rope_scaling(tmp_path, rope, limit, source):
    """Qwen2.5-7B with Qwen's yarn x4 for 128k was warned, past 32,768 tokens, that vLLM refuses the context."""
    config = load_config(_write(tmp_path / "qwen", {**QWEN25_7B, "rope_scaling": rope}))
    assert (config.max_context, config.context_source, config.learned_positions) == (limit, source, False)


@pytest.mark.parametrize("rope, limit, source", [
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "rope_theta": 1e6}, 131072,
     "original_max_position_embeddings 32768 x rope_parameters factor 4 (yarn)"),
    ({"full_attention": {"rope_type": "linear", "factor": 2.0}, "sliding_attention": {"rope_type": "default"}}, 65536,
     "max_position_embeddings 32768 x rope_parameters factor 2 (linear)"),
    ({"rope_type": "default", "rope_theta": 1e6}, 32768, "max_position_embeddings"),
    ({"full_attention": None}, 32768, "max_position_embeddings"),
])
def test_the_context_limit_takes_transformers_5_rope_parameters(tmp_path, rope, limit, source):
    """transformers 5 writes rope_parameters, not rope_scaling (Qwen2Config(rope_scaling=...).to_json_file()): a
    Qwen2.5-7B config with yarn x4 so saved was warned past 32,768 tokens, not 131,072."""
    config = load_config(_write(tmp_path / "qwen", {**QWEN25_7B, "rope_parameters": rope}))
    assert (config.max_context, config.context_source) == (limit, source)


def test_gemma3_context_is_not_scaled_again(tmp_path):
    """Gemma 3's max_position_embeddings (131,072) is already the scaled length, as vLLM reads it (it skips Gemma 3's
    rope factor); its linear x8 made the limit 1,048,576, so a 200k-token context got no warning. The built-in
    google/gemma-3-12b-it says 131,072 too."""
    text = {"model_type": "gemma3_text", "hidden_size": 3840, "intermediate_size": 15360, "num_hidden_layers": 48,
            "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 262208,
            "max_position_embeddings": 131072, "sliding_window": 1024, "rope_scaling": {"rope_type": "linear",
                                                                                        "factor": 8.0}}
    config = load_config(_write(tmp_path / "gemma3", {"model_type": "gemma3", "text_config": text}))
    assert (config.max_context, config.context_source) == (131072, "max_position_embeddings")
    assert load_config("google/gemma-3-12b-it").max_context == 131072


def test_bloom_n_embed_is_the_hidden_size(tmp_path):
    """bigscience/bloom-560m's config.json spells its hidden size n_embed (BloomConfig reads it): it was refused as
    lacking a hidden size and an MLP width. 559.2 M parameters less its embedding LayerNorm and biases."""
    bloom = {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "n_embed": 1024, "n_layer": 24,
             "num_attention_heads": 16, "seq_length": 2048, "vocab_size": 250880}
    config = load_config(_write(tmp_path / "bloom-560m", bloom))
    assert (config.hidden, config.intermediate, config.head_dim, config.tied_embeddings) == (1024, 4096, 64, True)
    assert config.total_parameters == 250880 * 1024 + 24 * (4 * 1024 * 1024 + 2 * 1024 * 4096) + 49 * 1024
    assert (config.max_context, config.context_source) == (2048, "seq_length")


def test_cohere2_sliding_window_pattern_leaves_every_fourth_layer_global(tmp_path):
    """Command R7B's config.json (cohere2, no layer_types) makes every 4th layer global (transformers'
    Cohere2Config: sliding_window_pattern, 4 by default); all 32 were read as local, so the 8 global layers' KV cache
    was capped at the 4,096-token window: at 16,384 tokens 0.5 GiB per sequence, not 0.875."""
    command_r7b = {"model_type": "cohere2", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 256000,
                   "max_position_embeddings": 8192, "sliding_window": 4096, "sliding_window_pattern": 4}
    config = load_config(_write(tmp_path / "c4ai-command-r7b", command_r7b))
    assert (config.sliding_window, config.sliding_layers) == (4096, 24)
    per_layer_token = 2 * 8 * 128 * 2
    assert kv_cache_bytes(config, "bf16", 1, 1, 16384) == per_layer_token * (8 * 16384 + 24 * 4096)
    left_out = {key: value for key, value in command_r7b.items() if key != "sliding_window_pattern"}
    assert load_config(_write(tmp_path / "default", left_out)).sliding_layers == 24


#: baidu/ERNIE-4.5-21B-A3B-PT's config.json, the fields Lilou reads (transformers' Ernie4_5_MoeConfig spellings).
ERNIE_45_21B = {"model_type": "ernie4_5_moe", "hidden_size": 2560, "intermediate_size": 12288,
                "moe_intermediate_size": 1536, "moe_num_experts": 64, "moe_k": 6, "moe_num_shared_experts": 2,
                "moe_layer_start_index": 1, "moe_layer_end_index": 27, "moe_layer_interval": 1,
                "num_hidden_layers": 28, "num_attention_heads": 20, "num_key_value_heads": 4, "vocab_size": 103424,
                "max_position_embeddings": 131072}


def test_ernie_45_moe_experts_are_read(tmp_path):
    """ERNIE 4.5's experts (moe_num_experts, moe_k, moe_num_shared_experts, its dense first layer) were not read: it
    was priced silently as a dense model of 3.35 B parameters. Now transformers 5.25's own count on the meta device,
    21,825,436,160 without its 1,728 e_score_correction_bias entries."""
    config = load_config(_write(tmp_path / "ernie", ERNIE_45_21B))
    assert (config.experts, config.experts_per_token, config.moe_intermediate, config.shared_expert_intermediate,
            config.dense_layers, config.tied_embeddings) == (64, 6, 1536, 2 * 1536, 1, True)
    assert config.total_parameters == 21_825_436_160
    # Ernie4_5_MoeDecoderLayer routes layer i when (i + 1) % interval == 0 and start <= i <= end: 1, 3, ..., 19
    sparse = load_config(_write(tmp_path / "sparse", {**ERNIE_45_21B, "moe_layer_interval": 2,
                                                      "moe_layer_end_index": 20}))
    assert sparse.moe_layers == 10


@pytest.mark.parametrize("fields, message", [
    ({"moe_layer_start_index": "1"}, r"moe_layer_start_index is '1', not a layer index"),
    ({"moe_layer_start_index": 28}, r"moe_layer_start_index 28, moe_layer_end_index 27 leave none of the 28 layers with experts"),
])
def test_ernie_45_bad_moe_layers_are_one_line(tmp_path, fields, message):
    with pytest.raises(LilouInputError, match=message):
        load_config(_write(tmp_path / "ernie", {**ERNIE_45_21B, **fields}))


def test_mlp_layer_types_and_num_dense_layers_keep_dense_layers(tmp_path):
    """MiMo-V2-Flash's, Laguna's and Beam's mlp_layer_types and AFMoE's num_dense_layers name the layers with a dense
    MLP (transformers builds an MoE block only where the entry is "sparse", or from num_dense_layers on); every layer
    was priced with experts (transformers' default MiMoV2FlashConfig at 315.7 B parameters, 308.8 B by its count)."""
    moe = {"model_type": "mimo_v2_flash", "hidden_size": 4096, "intermediate_size": 16384, "num_hidden_layers": 4,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "moe_intermediate_size": 2048,
           "n_routed_experts": 16, "num_experts_per_tok": 2}
    typed = load_config(_write(tmp_path / "typed", {**moe, "mlp_layer_types": ["dense", "sparse", "dense", "sparse"]}))
    assert (typed.moe_layers, typed.dense_layers) == (2, 2)
    first = load_config(_write(tmp_path / "first", {**moe, "model_type": "afmoe", "num_dense_layers": 1}))
    assert (first.moe_layers, first.dense_layers) == (3, 1)
    with pytest.raises(LilouInputError, match=r"mlp_layer_types is .*, not a list of one 'dense' or 'sparse' per "
                                              r"layer \(4 layers\)$"):
        load_config(_write(tmp_path / "short", {**moe, "mlp_layer_types": ["dense", "sparse"]}))


def test_experts_in_a_spelling_not_read_are_refused(tmp_path):
    """A count of experts Lilou does not read left the model dense without a word; now one line naming the field."""
    config = {**QWEN25_7B, "top_k_experts": 8}
    with pytest.raises(LilouInputError, match=r"^qwen: top_k_experts is 8, a count of experts in a spelling Lilou does "
                                              r"not read \(experts \(num_local_experts / .*\)\): the mixture of experts "
                                              r"would be priced as a dense model$"):
        load_config(_write(tmp_path / "qwen", config))
    assert load_config(_write(tmp_path / "dense", {**QWEN25_7B, "num_experts": 0})).experts == 0


@pytest.mark.parametrize("model_type, layernorm", [("apertus", False), ("apertus1p5_text", False), ("arcee", False),
                                                   ("jais2", True),
                                                   ("persimmon", True), ("nanochat", False), ("biogpt", True)])
def test_ungated_mlps_of_newer_families(tmp_path, model_type, layernorm):
    """Their MLP is up + activation (xIELU, ReLU^2, GELU) + down, as transformers builds it; it was priced with a gate:
    transformers' default ApertusConfig at 8.86 B parameters, 6.98 B by transformers' own count."""
    fields = {"model_type": model_type, "hidden_size": 4096, "intermediate_size": 21504, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 131072,
                  "tie_word_embeddings": False}
    config = load_config(_write(tmp_path / model_type, fields))
    assert (config.gated_mlp, config.norm) == (False, "layernorm" if layernorm else "rmsnorm")
    assert config.parameters()["mlp"] == 32 * 2 * 4096 * 21504


@pytest.mark.parametrize("field, value", [("hidden_size_per_layer_input", 256),
                                          ("per_layer_config", {"05": {"head_dim": 512}}), ("num_kv_shared_layers", 10)])
def test_per_layer_embeddings_and_head_sizes_are_refused(tmp_path, field, value):
    """Gemma 4's per-layer embeddings (2 B parameters of transformers' default 5.08 B) and its global layers' 512-wide
    heads were left out without a word (2.94 B parameters); now one line naming the field."""
    gemma4 = {"model_type": "gemma4_text", "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 30,
              "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262144, field: value}
    with pytest.raises(LilouInputError, match=rf"^gemma4: {field} \(per-layer embeddings, head sizes or shared KV "
                                              r"caches, as in Gemma 3n and Gemma 4\) are not modelled"):
        load_config(_write(tmp_path / "gemma4", gemma4))
    assert load_config(_write(tmp_path / "zero", {**gemma4, field: 0 if isinstance(value, int) else {}})).layers == 30


def test_gpt2_and_opt_positions_are_learned(tmp_path):
    """GPT-2 and OPT past their position embeddings: no engine runs it (the warning: tests/test_llm.py)."""
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257}
    config = load_config(_write(tmp_path / "gpt2", gpt2))
    assert (config.max_context, config.context_source, config.learned_positions) == (1024, "n_positions", True)
    assert load_config(_write(tmp_path / "opt", {"model_type": "opt", "hidden_size": 4096, "num_hidden_layers": 32,
                                                 "num_attention_heads": 32, "ffn_dim": 16384, "vocab_size": 50272,
                                                 "max_position_embeddings": 2048})).learned_positions
    assert not load_config(_write(tmp_path / "q", QWEN25_7B)).learned_positions
