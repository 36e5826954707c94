"""`lilou llm` and lilou.llm: configs, memory fit, step composition on the kernel model, CLI.

Expectations are hand-computed from the published architectures (Llama-3.1-8B: 32 layers, hidden 4096,
32 heads, 8 KV heads, head dim 128, MLP 14336, vocabulary 128256, untied embeddings)."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lilou.errors import LilouInputError
from lilou.llm import LLMPredictor
from lilou.llm.config import builtin_config, builtin_models, load_config
from lilou.llm.memory import GIB, kv_bytes_per_token, max_batch_fitting, memory_fit

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def llm():
    from lilou.llm import LLMPredictor

    return LLMPredictor()


def test_builtin_table_holds_the_wattgpu_and_llm_energy_models():
    names = builtin_models()
    assert len(names) == 112
    assert {"openai-community/gpt2", "mistralai/Mixtral-8x7B-Instruct-v0.1", "Qwen/Qwen3-30B-A3B-Instruct-2507",
            "lmsys/vicuna-13B", "meta-llama/Llama-2-70b-hf"} <= set(names)
    assert "wattgpu" in builtin_config(LLAMA).source


def test_parameter_count_of_llama_31_8b_by_hand():
    config = builtin_config("llama-3.1-8b-instruct")  # any case, organisation optional
    parts = config.parameters()
    assert parts["embedding"] == parts["lm_head"] == 128256 * 4096 == 525_336_576
    assert parts["attention"] == 32 * (4096 * (4096 + 2 * 1024) + 4096 * 4096) == 1_342_177_280
    assert parts["mlp"] == 32 * 3 * 4096 * 14336 == 5_637_144_576
    assert config.total_parameters == 8_030_261_248  # Meta publishes 8.03 B


def test_memory_of_llama_31_8b_bf16_on_an_a100_80gb():
    config = builtin_config(LLAMA)
    fit = memory_fit(config, 80, dtype="bf16", kv_dtype="bf16", tp=1, engine="vllm", batch=16, input_len=1024,
                     output_len=256)
    assert fit.weights_gb == pytest.approx(8_030_261_248 * 2 / GIB)          # 14.96 GiB
    assert kv_bytes_per_token(config, "bf16", 1) == 32 * 2 * 8 * 128 * 2 == 131_072
    assert fit.kv_cache_gb == pytest.approx(131_072 * 16 * 1280 / GIB) == 2.5
    assert fit.budget_gb == pytest.approx(72.0)                               # gpu_memory_utilization 0.9
    assert fit.fits


def test_kv_cache_grows_with_tokens_and_splits_over_tp():
    config = builtin_config(LLAMA)
    args = dict(dtype="bf16", kv_dtype="bf16", engine="vllm")
    base = memory_fit(config, 80, tp=1, batch=8, input_len=512, output_len=512, **args)
    longer = memory_fit(config, 80, tp=1, batch=8, input_len=1536, output_len=512, **args)
    wider = memory_fit(config, 80, tp=1, batch=32, input_len=512, output_len=512, **args)
    split = memory_fit(config, 80, tp=2, batch=8, input_len=512, output_len=512, **args)
    assert longer.kv_cache_gb == pytest.approx(2 * base.kv_cache_gb)
    assert wider.kv_cache_gb == pytest.approx(4 * base.kv_cache_gb)
    assert split.kv_cache_gb == pytest.approx(base.kv_cache_gb / 2)
    assert split.weights_gb == pytest.approx(base.weights_gb / 2)
    fp8 = memory_fit(config, 80, tp=1, batch=8, input_len=512, output_len=512, dtype="bf16", kv_dtype="fp8",
                     engine="vllm")
    assert fp8.kv_cache_gb == pytest.approx(base.kv_cache_gb / 2)


def test_max_batch_fitting_is_the_largest_batch_that_fits():
    config = builtin_config(LLAMA)
    args = dict(dtype="bf16", kv_dtype="bf16", tp=1, engine="vllm", input_len=1024, output_len=1024)
    largest = max_batch_fitting(config, 80, **args)
    assert largest > 100
    assert memory_fit(config, 80, batch=largest, **args).fits
    assert not memory_fit(config, 80, batch=largest + 1, **args).fits


def test_seventy_b_on_an_l4_does_not_fit(llm):
    result = llm.predict("meta-llama/Llama-3.1-70B-Instruct", "l4", batch=1, input_len=512, output_len=128,
                         dtype="bf16")
    data = result.to_json()
    assert data["memory"]["fits"] is False
    assert data["max_batch_fitting"] == 0
    assert data["memory"]["weights_gb"] > 130 and data["memory"]["device_gb"] == round(23034 / 1024, 4)  # nvidia-smi
    assert data["ttft_ms"] is None and data["itl_ms"] is None and data["power_w"] is None
    assert any("does not fit on l4" in w for w in data["warnings"])
    # the documented keys, null (they were {}: a KeyError for a consumer)
    assert data["intervals"] == {"ttft_ms": None, "itl_ms": None, "power_w": None}


def test_none_is_the_default_engine_and_a_predictor_is_not_a_string(llm):
    """engine=None priced a third, uncalibrated engine ("engine": null; Llama-3.1-8B on an L4 at batch 8, 512/128:
    TTFT 1035.5 ms for vLLM's 1130.1); LLMPredictor(predictor="eager") failed at predict with an AttributeError."""
    from lilou.llm import LLMPredictor

    args = dict(batch=8, input_len=512, output_len=128)
    default = llm.predict(LLAMA, "l4", **args).to_json()
    assert llm.predict(LLAMA, "l4", engine=None, dtype=None, kv_dtype=None, **args).to_json() == default
    assert default["engine"] == "vllm"
    for wrong in ("eager", b"eager", 1):
        with pytest.raises(LilouInputError, match=rf"^predictor must be a lilou.Predictor, not {type(wrong).__name__}$"):
            LLMPredictor(predictor=wrong)


def test_tp_must_divide_the_heads():
    from lilou.llm import LLMPredictor

    llm = LLMPredictor(predictor=object())  # the checks run before any kernel is priced
    with pytest.raises(LilouInputError, match="does not divide the 32 attention heads"):
        llm.predict(LLAMA, "a100-sxm4-80gb", tp=3, batch=1, input_len=16, output_len=16)
    with pytest.raises(LilouInputError, match="does not divide the 28 attention heads"):
        llm.predict("Qwen/Qwen2.5-7B-Instruct", "h200", tp=8, batch=1, input_len=16, output_len=16)
    with pytest.raises(LilouInputError, match="MIG"):
        llm.predict(LLAMA, "a100-sxm4-80gb", mig="3g.40gb", tp=2, batch=1, input_len=16, output_len=16)


def test_tp_must_divide_the_mlp_widths(tmp_path):
    """vLLM splits each parallel linear layer's width evenly over the GPUs and refuses a model whose width the TP
    does not divide; such a TP was priced as if it loaded."""
    from lilou.llm import LLMPredictor

    llm = LLMPredictor(predictor=object())  # the checks run before any kernel is priced
    path = tmp_path / "wide.json"
    path.write_text(json.dumps({**LLAMA_3_8B_CONFIG, "intermediate_size": 14340}))
    with pytest.raises(LilouInputError, match=r"^--tp 8 does not divide the intermediate_size of wide \(14340\): "
                                              r"vLLM splits it evenly over the GPUs and refuses to load the model$"):
        llm.predict(str(path), "h200", tp=8, batch=1, input_len=16, output_len=16)
    path.write_text(json.dumps({**LLAMA_3_8B_CONFIG, "model_type": "mixtral", "num_local_experts": 8,
                                "num_experts_per_tok": 2, "intermediate_size": 14340}))
    with pytest.raises(LilouInputError, match=r"does not divide the expert width \(moe_intermediate_size\)"):
        llm.predict(str(path), "h200", tp=8, batch=1, input_len=16, output_len=16)


def test_fp8_is_refused_before_turing_and_under_hf_before_ada():
    """FP8 tensor cores need 8.9; vLLM's weight-only FP8 (FP8-Marlin) runs from 7.5 (test below); a V100 runs
    neither, and transformers dequantises an FP8 checkpoint to BF16 below 8.9 (its FP8 quantizer)."""
    from lilou.llm import LLMPredictor

    with pytest.raises(LilouInputError, match=r"^v100-sxm2-32gb \(compute capability 7.0\) has no FP8 tensor cores "
                                              r"\(FP8 needs compute capability 8.9 or newer.*nor runs vLLM's "
                                              r"weight-only FP8 \(W8A16, FP8-Marlin: 7.5 or newer\); use --dtype fp16$"):
        LLMPredictor(predictor=object()).predict(LLAMA, "v100-sxm2-32gb", batch=1, input_len=16, output_len=16,
                                                 dtype="fp8")
    with pytest.raises(LilouInputError, match=r"^--dtype fp8 --engine hf: a100-sxm4-80gb \(compute capability 8.0\) "
                                              r"has no FP8 tensor cores, and transformers' FP8 quantizer then "
                                              r"dequantises the checkpoint to BF16; use --dtype bf16"):
        LLMPredictor(predictor=object()).predict(LLAMA, "a100-sxm4-80gb", batch=1, input_len=16, output_len=16,
                                                 dtype="fp8", engine="hf")


@pytest.mark.parametrize("value", [0, -3])
def test_lengths_and_batch_must_be_positive(value):
    from lilou.llm import LLMPredictor

    llm = LLMPredictor(predictor=object())
    with pytest.raises(LilouInputError, match="positive integer"):
        llm.predict(LLAMA, "l4", batch=value, input_len=16, output_len=16)
    with pytest.raises(LilouInputError, match="input length must be a positive integer"):
        llm.predict(LLAMA, "l4", batch=1, input_len=value, output_len=16)


@pytest.mark.parametrize(("field", "value", "line"), [
    ("batch", 10**400, "batch 10000000000000000000... (401 digits) is above 2^40, not a real one; use a realistic batch"),
    ("input_len", 2**40 + 1, "input length 1099511627777 is above 2^40, not a real one; use a realistic input length"),
    ("output_len", np.int64(2**41), "output length 2199023255552 is above 2^40, not a real one; use a realistic output "
                                    "length"),
])
def test_a_batch_or_length_past_2_to_the_40_is_refused_in_one_line(field, value, line):
    """A 400-digit batch or length (JSON and Python allow one) was an internal error, "OverflowError: int too large to
    convert to float", in lilou llm, /v1/llm and plans (audit ua46); 2^40 is refused as an ONNX model's --batch is."""
    llm = LLMPredictor(predictor=object())
    arguments = {"batch": 1, "input_len": 16, "output_len": 16, field: value}
    with pytest.raises(LilouInputError) as error:
        llm.predict(LLAMA, "l4", **arguments)
    assert str(error.value) == line


def test_unknown_name_suggests_close_names():
    with pytest.raises(LilouInputError, match=r"unknown LLM 'Llama-3.1-8B-Instuct'; did you mean .*Llama-3.1-8B-Instruct"):
        builtin_config("Llama-3.1-8B-Instuct")
    # a family's start: its models first, not the closest spelling of another family (llama-13B before session 36)
    with pytest.raises(LilouInputError) as family:
        builtin_config("llama-3")
    suggested = str(family.value).split("did you mean ")[1].split("?")[0].split(", ")
    assert len(suggested) == 5 and all("llama-3" in s.lower() for s in suggested)
    # a typo past the whole name: the names sharing the longest start first (difflib put llama-13B first)
    with pytest.raises(LilouInputError) as typo:
        builtin_config("llama-3.1-8bb")
    suggested = str(typo.value).split("did you mean ")[1].split("?")[0].split(", ")
    assert suggested[:2] == ["meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct"]


def test_a_base_name_finds_its_fine_tune_of_the_same_architecture():
    """Users type "llama-3.1-8b"; the table holds Meta's Instruct release, whose layers are the base model's."""
    assert builtin_config("llama-3.1-8b").name == LLAMA
    assert builtin_config("meta-llama/Llama-3.1-8B").name == LLAMA
    assert builtin_config("gemma-2-9b").name == "google/gemma-2-9b-it"
    # Llama-2-7b-hf and -chat-hf share one architecture: either is the same prediction
    assert builtin_config("llama-2-7b").name in ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-7b-chat-hf")
    with pytest.raises(LilouInputError, match=r"unknown LLM 'mistral-7b'; did you mean mistralai/Mistral-7B-v0.1"):
        builtin_config("mistral-7b")  # a version suffix is not a fine-tune: named, not guessed


@pytest.mark.parametrize(("name", "expected"), [
    # each exited 2 with the right model first among the suggestions
    ("llama-3-8b", "meta-llama/Meta-Llama-3-8B"),
    ("Llama-3-8B", "meta-llama/Meta-Llama-3-8B"),
    ("meta-llama/Meta-Llama-3-8B-Instruct", "meta-llama/Meta-Llama-3-8B"),  # the most used Hugging Face id
    ("llama-3-8b-instruct", "meta-llama/Meta-Llama-3-8B"),
    ("Meta-Llama-3-70B-Instruct", "meta-llama/Meta-Llama-3-70B"),
    ("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1"),  # the base release, of one architecture with its Instruct
    ("Mixtral-8x7B-Instruct", "mistralai/Mixtral-8x7B-v0.1"),
    # what resolved before still does, to the same entry
    ("llama-3.1-8b", LLAMA),
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B-Instruct"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mistralai/Mixtral-8x7B-Instruct-v0.1"),
])
def test_common_spellings_of_one_architecture_resolve(name, expected):
    """The organisation, a Meta- prefix and -Instruct / -chat / -it / -hf / -v0.1 suffixes are what common spellings
    of one model differ by; they resolve where every built-in so spelled has one architecture."""
    assert builtin_config(name).name == expected


@pytest.mark.parametrize("name", ["mistral-7b", "Mistral-7B-Instruct", "mistralai/Mistral-7B", "llama-3"])
def test_a_common_spelling_of_two_architectures_is_not_guessed(name):
    """Mistral-7B-v0.1 (a 4096-token window, 32,000 tokens) and -Instruct-v0.3 (no window, 32,768) are two
    architectures: the spelling they share is refused with the suggestions, never resolved to one of them."""
    with pytest.raises(LilouInputError, match=rf"unknown LLM '{re.escape(name)}'; did you mean "):
        builtin_config(name)


def test_hugging_face_configs_of_several_families(tmp_path):
    from transformers import FalconConfig, MistralConfig, MixtralConfig, OPTConfig

    for cls, expected in ((MistralConfig, (32, 4096, 32, 8, 14336, True)),
                          (MixtralConfig, (32, 4096, 32, 8, 14336, True)),
                          (OPTConfig, (12, 768, 12, 12, 3072, False)),
                          (FalconConfig, (32, 4544, 71, 1, 18176, False))):
        folder = tmp_path / cls.__name__
        folder.mkdir()
        cls().to_json_file(folder / "config.json")
        config = load_config(folder / "config.json")
        got = (config.layers, config.hidden, config.heads, config.kv_heads, config.intermediate, config.gated_mlp)
        assert got == expected, cls.__name__
    assert load_config(tmp_path / "MixtralConfig").experts == 8
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "vocab_size": 32000}))
    with pytest.raises(LilouInputError, match=r"lacks layers \(num_hidden_layers.*heads \(num_attention_heads"):
        load_config(broken)


def test_encoders_and_encoder_decoders_are_refused(tmp_path):
    """A BERT or T5 config has every field a decoder's has; priced as one it gave a TTFT and an ITL for a model that
    generates nothing token by token (BERT) or runs an encoder first (T5)."""
    from transformers import BertConfig, T5Config

    for cls, message in ((BertConfig, "an encoder (model_type 'bert'), not a decoder LLM"),
                         (T5Config, "an encoder-decoder model (model_type 't5'); lilou llm prices decoder-only LLMs")):
        folder = tmp_path / cls.__name__
        folder.mkdir()
        cls().to_json_file(folder / "config.json")
        with pytest.raises(LilouInputError, match=re.escape(message)):
            load_config(folder / "config.json")
    # encoders and encoder-decoders transformers also builds as *ForCausalLM were priced as decoder LLMs (PLBart's
    # is_encoder_decoder left out: its model type alone says so)
    from transformers import PLBartConfig, XLMRobertaXLConfig

    for cls, message in ((XLMRobertaXLConfig, "an encoder (model_type 'xlm-roberta-xl'), not a decoder LLM"),
                         (PLBartConfig, "an encoder-decoder model (model_type 'plbart')")):
        config = {key: value for key, value in cls().to_dict().items() if key != "is_encoder_decoder"}
        (tmp_path / f"{cls.__name__}.json").write_text(json.dumps(config, default=str))
        with pytest.raises(LilouInputError, match=re.escape(message)):
            load_config(tmp_path / f"{cls.__name__}.json")


LLAMA_3_8B_CONFIG = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256}


@pytest.mark.parametrize(("change", "message"), [
    ({"hidden_size": True}, r"hidden \(hidden_size / .*\) is True, not a whole number"),
    ({"hidden_size": "4096"}, r"hidden \(hidden_size / .*\) is '4096', not a whole number"),
    ({"hidden_size": 4096.5}, r"is 4096.5, not a whole number"),
    ({"num_hidden_layers": float("nan")}, r"layers \(num_hidden_layers / .*\) is nan"),
    ({"num_key_value_heads": -8}, r"kv_heads \(num_key_value_heads / .*\) must not be negative"),
    ({"num_key_value_heads": 5}, r"32 attention heads do not split into groups of 5 KV heads"),
    ({"num_local_experts": 8, "num_experts_per_tok": 100}, r"100 experts per token of 8 routed experts"),
    ({"hidden_size": 4}, r"hidden size 4 is smaller than its 32 attention heads"),
    ({"model_type": "gpt2", "hidden_size": [], "intermediate_size": None}, r"hidden \(hidden_size .*\) is \[\]"),
    # sizes no model has: 10^8 layers of width 1 took 8 GB and ended in a MemoryError; 10^400 an OverflowError
    ({"num_hidden_layers": 100_000_000, "hidden_size": 32, "intermediate_size": 1},
     r"layers \(num_hidden_layers .*\) 100,000,000 is beyond any released model \(at most 4,096\)"),
    ({"vocab_size": 10 ** 400}, r"vocab \(vocab_size .*\) about 10\^400 is beyond any released model"),
    ({"num_hidden_layers": 1e300}, r"about 10\^300 is beyond any released model"),
    # zero or negative optional fields stood silently for a default, or gave a negative KV cache that always fitted
    ({"num_key_value_heads": 0}, r"kv_heads \(num_key_value_heads .*\) is 0; leave the field out for its default"),
    ({"head_dim": 0}, r"head_dim \(head_dim .*\) is 0"),
    ({"sliding_window": -5}, r"sliding_window is -5, not a number of tokens"),
    ({"model_type": "qwen2", "sliding_window": 4096, "max_window_layers": -100},
     r"max_window_layers is -100, not a layer count"),
    ({"model_type": "gemma3_text", "sliding_window": 1024, "sliding_window_pattern": 0},
     r"sliding_window_pattern is 0, not a positive whole number"),
    # each was read without a word: a truthy string tied the LM head, a dense count past the layers made a MoE
    # dense, a layer_types string was ignored and a longer list cut short
    ({"tie_word_embeddings": "false"}, r"tie_word_embeddings is 'false', not true or false"),
    ({"num_local_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": 1000},
     r"dense_layers \(first_k_dense_replace / num_dense_layers\) is 1000, not fewer than the 32 layers"),
    # a missing top-k read "0 experts per token of 8 routed experts"
    ({"num_local_experts": 8}, r"the config lacks experts_per_token \(num_experts_per_tok / .*\), the experts each "
                               r"token is routed to of its 8 routed experts$"),
    # Qwen-MoE's and DeepSeek's layer patterns were not read at all
    ({"num_local_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 0},
     r"decoder_sparse_step is 0, not a positive whole number"),
    ({"num_local_experts": 8, "num_experts_per_tok": 2, "moe_layer_freq": 1.5},
     r"moe_layer_freq is 1.5, not a positive whole number"),
    ({"num_local_experts": 8, "num_experts_per_tok": 2, "moe_layer_freq": float("inf")},
     r"moe_layer_freq is inf, not a positive whole number"),
    ({"num_local_experts": 8, "num_experts_per_tok": 2, "mlp_only_layers": "0,1"},
     r"mlp_only_layers is '0,1', not a list of layer indices"),
    ({"num_local_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 64},
     r"decoder_sparse_step 64 leave none of the 32 layers with experts"),
    # 10^400 was an OverflowError in math.isfinite, an internal error (audit ua46)
    ({"num_local_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 10 ** 400},
     r"decoder_sparse_step 1000000000000000000000000000000000000000 leave none of the 32 layers with experts"),
    ({"sliding_window": 4096, "layer_types": "sliding_attention"}, r"layer_types is 'sliding_attention', not a list"),
    ({"sliding_window": 4096, "layer_types": ["sliding_attention"] * 40}, r"one attention kind per layer \(32 layers\)"),
    # a Llama 4 layer count no model has: its chunked layers' list of 2^62 entries ran out of memory
    ({"model_type": "llama4_text", "attention_chunk_size": 8192, "num_hidden_layers": 2 ** 62},
     r"is beyond any released model"),
    ({"model_type": "llama4_text", "interleave_moe_layer_step": 0}, r"interleave_moe_layer_step is 0"),
])
def test_a_config_with_impossible_dimensions_is_one_line(tmp_path, change, message):
    """Hand-edited or hostile config.json files: a boolean, string, fraction or NaN dimension, negative or
    non-dividing KV heads, top-k above the expert count, a head narrower than one element. Before, some gave
    a math-domain traceback (exit 1) and others a prediction with replicated KV heads on -1 GPUs."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_3_8B_CONFIG, **change}))
    with pytest.raises(LilouInputError, match=message):
        load_config(path)
    assert load_config(_valid(tmp_path)).hidden == 4096


def _valid(folder: Path) -> Path:
    path = folder / "valid.json"
    path.write_text(json.dumps({**LLAMA_3_8B_CONFIG, "hidden_size": 4096.0}))  # an integral float is a whole number
    return path


def test_a_deeply_nested_config_is_one_line(tmp_path, capsys):
    """A few hundred kilobytes of nested brackets exhaust the JSON parser's recursion: bad input, exit 2."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    from lilou.cli import main

    assert main(["llm", str(path), "--gpu", "l4", "--batch", "1", "--input-len", "8", "--output-len", "8"]) == 2
    assert capsys.readouterr().err == f"lilou: error: {path}: not a readable JSON config (RecursionError)\n"


def test_an_onnx_file_given_as_the_llm_names_the_commands_that_take_it(capsys):
    """`lilou plan examples/resnet18.onnx --llm` said "not a readable JSON config (UnicodeDecodeError)"; a bare
    file name in the working folder was looked up as a built-in name."""
    from lilou.cli import main

    hint = ("an ONNX model, not an LLM config; `lilou llm` and `plan --llm` take a Hugging Face config.json or a "
            "built-in name (`lilou llm --list`); an ONNX file is priced by `lilou infer` and planned by `lilou plan "
            "FILE --slo-ms T`")
    assert main(["plan", "examples/resnet18.onnx", "--llm", "--itl-slo-ms", "40", "--input-len", "512",
                 "--output-len", "128"]) == 2
    assert capsys.readouterr().err == f"lilou: error: examples/resnet18.onnx: {hint}\n"
    assert main(["llm", "model.ONNX", "--gpu", "l4", "--batch", "1", "--input-len", "8", "--output-len", "8"]) == 2
    assert capsys.readouterr().err == f"lilou: error: model.ONNX: {hint}\n"


@pytest.mark.parametrize("key, stored, gpu, dtype, said", [
    ("torch_dtype", "float16", "a100-sxm4-80gb", "fp16",
     "no --dtype given: FP16, the checkpoint's own (its torch_dtype), as vLLM serves it"),
    ("dtype", "bfloat16", "a100-sxm4-80gb", "bf16",  # transformers 5 writes dtype
     "no --dtype given: BF16, the checkpoint's own (its torch_dtype), as vLLM serves it"),
    ("torch_dtype", "bfloat16", "v100-sxm2-32gb", "fp16",
     "no --dtype given: FP16; the checkpoint is BF16 (its torch_dtype), which v100-sxm2-32gb does not run: vLLM "
     "casts it to FP16"),
    ("torch_dtype", "float32", "a100-sxm4-80gb", "bf16",
     "no --dtype given: BF16 (the widest half precision a100-sxm4-80gb runs); the checkpoint is FP32 (its "
     "torch_dtype)"),
    ("torch_dtype", "auto", "v100-sxm2-32gb", "fp16", "no --dtype given: FP16 (the widest half precision "
     "v100-sxm2-32gb runs)"),
])
def test_the_checkpoint_dtype_is_the_default_as_vllm_auto_serves_it(llm, tmp_path, key, stored, gpu, dtype, said):
    """Without --dtype an FP16 checkpoint was priced and labelled BF16 (the widest type the GPU runs); vLLM's --dtype
    auto serves a checkpoint in its own 16-bit type."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_3_8B_CONFIG, key: stored}))
    result = llm.predict(str(path), gpu, batch=1, input_len=64, output_len=16)
    assert (result.dtype, result.warnings[0]) == (dtype, said)
    asked = llm.predict(str(path), gpu, batch=1, input_len=64, output_len=16, dtype=dtype)
    assert asked.itl_ms == result.itl_ms and not any(w.startswith("no --dtype") for w in asked.warnings)


def test_a_name_holding_a_nul_byte_is_one_line(llm, tmp_path):
    """A config path with a NUL byte (a host handing on a user's text) was os.stat's ValueError out of lilou llm's
    predict and plan_llm, not a LilouInputError."""
    from lilou.plan import plan_llm

    path = f"{tmp_path}/config\0.json"
    message = f"an LLM's name or config path cannot hold a NUL byte: {path[:80]!r}"
    with pytest.raises(LilouInputError) as refused:
        llm.predict(path, "l4", batch=1, input_len=8, output_len=8)
    assert str(refused.value) == message
    with pytest.raises(LilouInputError) as refused:
        plan_llm(path, 40, input_len=8, output_len=8, gpus=["l4"], llm_predictor=llm)
    assert str(refused.value) == message


def test_decode_is_kv_bound_and_bf16_beats_fp32_on_an_a100(llm):
    args = dict(batch=8, input_len=1024, output_len=128)
    bf16 = llm.predict("meta-llama/Llama-3.2-3B-Instruct", "a100-sxm4-80gb", dtype="bf16", **args)
    fp32 = llm.predict("meta-llama/Llama-3.2-3B-Instruct", "a100-sxm4-80gb", dtype="fp32", **args)
    assert bf16.itl_ms < fp32.itl_ms and bf16.ttft_ms < fp32.ttft_ms
    # the decode step streams the weights and the KV cache: at least their bytes over the bandwidth
    assert bf16.decode.memory_ms > bf16.decode.compute_ms
    assert bf16.decode.ms >= bf16.decode.memory_ms
    assert bf16.e2e_ms == pytest.approx(bf16.ttft_ms + 127 * bf16.itl_ms)
    assert bf16.tokens_per_s == pytest.approx(8 * 128 / (bf16.e2e_ms / 1000))


@pytest.mark.parametrize("gpu", ["l4", "a10g", "h100-sxm"])
def test_a_larger_batch_is_never_a_faster_step(llm, gpu):
    """Up to batch 16 every kernel is priced as the cheapest of the same kernel at its batch and every larger one
    (the size ladder of lilou.latency.composition.monotone): before session 36 the L4 decode step was 58.2 ms at
    batch 1 and 56.5 ms at batch 3, and `plan --llm` chose batches from those numbers."""
    steps = [llm.predict("llama-3.1-8b", gpu, batch=b, input_len=512, output_len=128) for b in range(1, 17)]
    for field in ("itl_ms", "ttft_ms", "steady_itl_ms"):
        values = [getattr(step, field) for step in steps]
        assert all(a <= b for a, b in zip(values, values[1:])), (field, values)


def test_a_mig_slice_is_never_faster_than_a_slice_that_holds_it(llm):
    """The A100-80GB's slices against the whole GPU and each other (a slice with no fewer SMs, no less bandwidth and
    L2 holds it): before session 36 the 7g.80gb slice's decode step came out 0.003 ms below the whole GPU's, the
    attention correction reading 98 SMs' work items as lighter than 108's."""
    from lilou.hardware import find_gpu, resolve_device
    from lilou.latency.composition.monotone import dominates

    spec = find_gpu("a100-sxm4-80gb")
    devices = [resolve_device(spec.name)] + [resolve_device(spec.name, p.name) for p in spec.mig_profiles]
    steps = {d.name: llm.predict("llama-3.1-8b", spec.name, mig=d.mig, batch=8, input_len=512, output_len=128)
             for d in devices}
    pairs = [(small, large) for small in devices for large in devices
             if small.name != large.name and dominates(large, small) and steps[small.name].itl_ms is not None]
    assert len(pairs) >= 6
    for small, large in pairs:
        for field in ("itl_ms", "ttft_ms", "steady_itl_ms"):
            assert getattr(steps[small.name], field) >= getattr(steps[large.name], field), (small.name, large.name)
    # the slice's power line is a whole sentence (it stopped at "of the board's"), and one sequence is singular
    assert "power is the slice's share (0.39 of the SMs) of the board's power: the slices share one board, whose " \
        "draw no slice can read alone" in steps["a100-sxm4-80gb/3g.40gb"].warnings
    alone = llm.predict("llama-3.1-8b", "a100-sxm4-80gb", mig="1g.20gb", batch=4, input_len=8192, output_len=8192)
    assert any("at most 1 sequence fits at these lengths" in w for w in alone.warnings), alone.warnings


def test_longer_context_and_tp_change_the_step_as_they_should(llm):
    short = llm.predict(LLAMA, "h200", batch=32, input_len=256, output_len=64, dtype="bf16")
    long = llm.predict(LLAMA, "h200", batch=32, input_len=8192, output_len=64, dtype="bf16")
    assert long.decode.bytes > short.decode.bytes and long.itl_ms > short.itl_ms
    tp2 = llm.predict(LLAMA, "h200", tp=2, batch=32, input_len=256, output_len=64, dtype="bf16")
    assert tp2.decode.bytes == pytest.approx(short.decode.bytes / 2, rel=0.05)
    assert any("all-reduces per layer over NVLink 4" in w for w in tp2.warnings)


def test_hf_eager_pays_launches_that_vllm_graphs_do_not(llm):
    args = dict(batch=1, input_len=128, output_len=32, dtype="fp16")
    vllm = llm.predict(LLAMA, "a100-sxm4-80gb", engine="vllm", **args)
    hf = llm.predict(LLAMA, "a100-sxm4-80gb", engine="hf", **args)
    assert hf.decode.ms > vllm.decode.ms


def test_hf_s_first_token_pays_the_host_work_of_a_generate_step(llm):
    """transformers' ``generate`` runs its logits processors, sampling and the stopping criteria's sync for the first
    token as for each later one (``itl_step_ms``, fitted on measured HF ITLs): TTFT left it out, and GPT-2 at batch 1
    came out at 5.9 ms with an ITL of 11.8 (audit ua44a). vLLM's TTFT scale was fitted on measured TTFTs."""
    args = dict(batch=1, input_len=128, output_len=2, dtype="fp16")
    calibration = llm.calibration
    hf = llm.predict("openai-community/gpt2", "a100-sxm4-80gb", engine="hf", **args)
    assert hf.ttft_ms == pytest.approx(hf.prefill.ms * calibration.ttft_scale["hf"] + calibration.itl_step_ms["hf"])
    assert hf.ttft_ms > hf.itl_ms  # the prefill of 128 tokens and the same host step as a decode step
    vllm = llm.predict("openai-community/gpt2", "a100-sxm4-80gb", engine="vllm", **args)
    assert vllm.ttft_ms == pytest.approx(vllm.prefill.ms * calibration.ttft_scale["vllm"])


def test_cli_json_keys_and_exit_status():
    command = [sys.executable, "-m", "lilou.cli", "llm", LLAMA, "--gpu", "a100-sxm4-80gb", "--batch", "4",
               "--input-len", "512", "--output-len", "64", "--dtype", "bf16", "--format", "json"]
    probe = (f"import sys; from lilou.cli import main; code = main({command[3:]!r}); "
             "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert set(data) >= {"model", "gpu", "mig", "tp", "batch", "input_len", "output_len", "dtype", "ttft_ms", "itl_ms",
                         "e2e_ms", "tokens_per_s", "power_w", "energy_per_token_j", "memory", "max_batch_fitting",
                         "warnings", "intervals"}
    assert set(data["memory"]) == {"weights_gb", "kv_cache_gb", "activations_gb", "total_gb", "device_gb", "fits"}
    assert set(data["intervals"]) == {"ttft_ms", "itl_ms", "power_w"}
    assert data["gpu"] == "a100-sxm4-80gb" and data["batch"] == 4 and data["memory"]["fits"] is True
    assert 0 < data["power_w"] <= 400
    bad = subprocess.run(command[:3] + ["llm", "Llama-3.1-8B-Instuct", "--gpu", "l4", "--input-len", "8",
                                        "--output-len", "8"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "did you mean" in bad.stderr


# ------------------------------------------------------------------ attention correction, host terms (issue 18)


def test_attention_features_by_hand():
    import math

    from lilou.llm.attention import AttentionShape, features

    # Llama-3.1-8B decode at batch 4 over 1024 keys on an A100 (108 SMs): 4 query heads per KV head fit one
    # 64-row tile, so 4 sequences x 8 KV heads = 32 work items
    f = features(AttentionShape(seqs=4, q_len=1, kv_len=1024, heads=32, kv_heads=8, head_dim=128), sms=108)
    assert f.tolist() == pytest.approx([math.log(32 / 108), math.log(1024), math.log(4), 0.0])
    # a 2048-token prefill: 4 x 2048 / 64 = 128 query tiles per KV head
    f = features(AttentionShape(seqs=1, q_len=2048, kv_len=2048, heads=32, kv_heads=8, head_dim=64), sms=132)
    assert f.tolist() == pytest.approx([math.log(8 * 128 / 132), math.log(2048), math.log(4), math.log(0.5)])


def test_attention_correction_on_real_aiconfigurator_decode_rows(llm, datasets_dir):
    """The shipped correction brings vLLM's measured decode-attention kernels on an L40S (CUDA-graph replay)
    from the kernel model's ~3x-too-fast price (median APE 62 %) to 26 %."""
    import numpy as np

    from lilou.data.kernel_table import kernel_table
    from lilou.hardware import resolve_device
    from lilou.llm.attention import AttentionShape, shipped_correction
    from lilou.llm.steps import StepKernel, StepShape, attention_kernel

    rows = kernel_table(["aiconfigurator"], data_dir=datasets_dir).filter(
        "gpu = 'l40s' AND family = 'attention-decode' AND framework LIKE 'VLLM%' AND dtype = 'bf16' "
        "AND kv_dtype = 'bf16' AND coalesce(\"window\", 0) = 0").project(
        "batch, kv_len, heads, kv_heads, head_dim, latency_ms").order(
        "hash(batch, kv_len, heads, kv_heads, head_dim)").limit(200).fetchall()
    assert len(rows) == 200
    device = resolve_device("l40s")
    shapes = [AttentionShape(b, 1, kv + 1, h, kvh or h, d) for b, kv, h, kvh, d, _ in rows]
    kernels = [StepKernel("attention", attention_kernel(StepShape(s.seqs, 1, s.kv_len, causal=False), s.heads,
                                                        s.kv_heads, s.head_dim, "bf16", "bf16"), 1, 0, True, 0)
               for s in shapes]
    work = llm._work(kernels, device, "bf16")
    measured = np.array([r[-1] for r in rows])
    corrected = np.array([shipped_correction().apply(float(w), s, False, device.sms) for w, s in zip(work, shapes)])
    before = np.median(np.abs(work - measured) / measured)
    after = np.median(np.abs(corrected - measured) / measured)
    assert before > 0.55 and after < 0.35      # measured: 0.62 -> 0.26 on these 200 rows


def test_attention_correction_applies_to_vllm_steps_only(llm):
    from lilou.llm import LLMPredictor
    from lilou.llm.attention import AttentionCorrection

    plain = LLMPredictor(predictor=llm.predictor, calibration=llm.calibration, attention=AttentionCorrection())
    args = dict(batch=8, input_len=1024, output_len=64, dtype="bf16")
    for engine, applies in (("vllm", True), ("hf", False)):
        corrected = llm.predict(LLAMA, "a100-sxm4-80gb", engine=engine, **args)
        uncorrected = plain.predict(LLAMA, "a100-sxm4-80gb", engine=engine, **args)
        if applies:  # decode attention is priced slower than the kernel model's; prefill moves either way (refitted)
            assert corrected.decode.gpu_ms > uncorrected.decode.gpu_ms
            assert corrected.prefill.ms != pytest.approx(uncorrected.prefill.ms, rel=1e-4)
        else:
            assert corrected.decode.gpu_ms == uncorrected.decode.gpu_ms
            assert corrected.prefill.ms == uncorrected.prefill.ms


def test_a_step_sequence_holds_every_kernel_count_times():
    """The launch order of an HF step: the KV-cache concat runs twice per layer, every other kernel once."""
    from lilou.llm.config import load_config
    from lilou.llm.predictor import _sequence
    from lilou.llm.steps import StepShape, step_kernels

    kernels = step_kernels(load_config(LLAMA), StepShape(1, 1, 300, causal=False), dtype="fp16", kv_dtype="fp16",
                           tp=1, engine="hf")
    assert {k.count for k in kernels if k.layer} == {32, 64}
    work = np.arange(1.0, len(kernels) + 1)
    sequence = _sequence(kernels, work)
    assert len(sequence) == sum(k.count for k in kernels) == 1188
    assert sequence.sum() == pytest.approx(sum(k.count * w for k, w in zip(kernels, work)))


def test_a_chunked_prefill_step_carries_the_prompt_tokens_through_every_gemm():
    """A steady-state vLLM step: the decodes' GEMMs grow by the prompt tokens (M = batch + chunk, weights read
    once), and one causal attention kernel over the chunk is added; nothing else changes."""
    from lilou.llm.config import load_config
    from lilou.llm.steps import StepShape, step_kernels

    config = load_config(LLAMA)
    args = dict(dtype="bf16", kv_dtype="bf16", tp=1, engine="vllm")
    decode = {k.name: k for k in step_kernels(config, StepShape(8, 1, 600, causal=False), **args)}
    mixed = {k.name: k for k in step_kernels(config, StepShape(8, 1, 600, causal=False, prefill_tokens=24,
                                                              prefill_len=512), **args)}
    assert set(mixed) - set(decode) == {"attention_prefill"}
    prompt = mixed["attention_prefill"]
    assert prompt.causal and not mixed["attention"].causal and prompt.count == 32
    assert (prompt.attention.q_len, prompt.attention.kv_len) == (24, 512)
    # Llama-3.1-8B: QKV 4096 -> 4096 + 2 x 1024, gate+up 4096 -> 2 x 14336, down 14336 -> 4096
    for name, k, n in (("qkv_proj", 4096, 6144), ("o_proj", 4096, 4096), ("mlp.gate_up_proj", 4096, 28672),
                       ("mlp.down_proj", 14336, 4096)):
        assert decode[name].spec.flops == 2 * 8 * k * n
        assert mixed[name].spec.flops == 2 * (8 + 24) * k * n
        assert mixed[name].fixed_bytes == decode[name].fixed_bytes == 2 * k * n
    assert mixed["attention"].spec == decode["attention"].spec
    assert mixed["lm_head"].spec == decode["lm_head"].spec  # logits only for the decoding sequences


def test_an_fp8_step_keeps_bf16_activations_and_quantises_before_each_gemm():
    """vLLM's FP8 (W8A8) models: FP8 weights, BF16 residual stream, activations cast to FP8 inside each GEMM
    module, as AIConfigurator's FP8 GEMM rows measure them (tests/test_table_folds.py)."""
    from lilou.llm.config import load_config
    from lilou.llm.steps import StepShape, step_kernels

    kernels = {k.name: k for k in step_kernels(load_config(LLAMA), StepShape(4, 1, 300, causal=False), dtype="fp8",
                                               kv_dtype="bf16", tp=1, engine="vllm")}
    qkv = kernels["qkv_proj"]
    assert qkv.spec.ops == ("Cast", "MatMul") and qkv.fixed_bytes == 4096 * 6144
    assert qkv.spec.bytes == 2 * 4 * 4096 + 4096 * 6144 + 2 * 4 * 6144
    bf16 = {k.name: k for k in step_kernels(load_config(LLAMA), StepShape(4, 1, 300, causal=False), dtype="bf16",
                                            kv_dtype="bf16", tp=1, engine="vllm")}
    assert kernels["input_norm"].spec == bf16["input_norm"].spec  # the residual stream is BF16 either way


def test_steady_state_is_the_vllm_server_with_batch_running(llm):
    """vLLM predictions carry the steady state of a server that keeps ``batch`` requests running: its step holds
    the decodes plus batch x I / O prompt tokens, so it is slower than the static batch's decode step and faster
    than a decode step plus a whole prefill every O steps; HF eager has none."""
    from lilou.llm.steps import StepShape

    args = dict(batch=32, input_len=1024, output_len=128, dtype="bf16")
    vllm = llm.predict(LLAMA, "a100-sxm4-80gb", engine="vllm", **args)
    assert vllm.decode.gpu_ms < vllm.steady.gpu_ms < vllm.decode.gpu_ms + vllm.prefill.ms / 128
    calibration = llm.calibration
    assert vllm.steady_itl_ms == pytest.approx(calibration.itl_ms("vllm", vllm.steady, 32))
    data = vllm.to_json()
    assert set(data["steady_state"]) == {"itl_ms", "tokens_per_s", "interval_ms"}
    assert data["steady_state"]["tokens_per_s"] == pytest.approx(32 * 1000 / vllm.steady_itl_ms, rel=1e-4)
    lo, hi = data["steady_state"]["interval_ms"]
    assert lo < data["steady_state"]["itl_ms"] < hi
    assert set(data["intervals"]) == {"ttft_ms", "itl_ms", "power_w"}
    assert StepShape(32, 1, 1100, causal=False, prefill_tokens=256, prefill_len=1024).tokens == 288
    hf = llm.predict(LLAMA, "a100-sxm4-80gb", engine="hf", **args)
    assert hf.steady is None and hf.to_json()["steady_state"] is None


def test_hf_decode_step_is_the_launch_queue_at_the_fitted_host_time(llm):
    """With a host time per launch, an HF step is its launch queue: the host's dispatch hides behind the GPU when
    the kernels are long and sets the pace when they are short; a vLLM step keeps the CUDA-graph sum."""
    from lilou.latency.composition.overhead import queue_total
    from lilou.llm.power import PowerModel
    from lilou.llm.predictor import Calibration

    args = dict(batch=1, input_len=256, output_len=64, dtype="fp16", engine="hf")
    decode = llm.predict(LLAMA, "a100-sxm4-80gb", **args).decode
    assert len(decode.queue) == 4 and decode.launches == 1188
    calibration = Calibration(itl_scale={"hf": 1.1}, ttft_scale={}, power=PowerModel(), intervals={},
                              itl_step_ms={"hf": 8.0}, itl_launch_gap_ms={"hf": 0.018})
    step = calibration.itl_ms("hf", decode, batch=1)
    assert step == pytest.approx(np.mean([queue_total(e, 0.018, 1.1) for e in decode.queue]) + 8.0)
    assert step >= 8.0 + max(1188 * 0.018, 1.1 * decode.gpu_ms) - 1e-9
    # host-bound at 50 us per launch: the step is the host's issue time, whatever the GPU does
    slow_host = Calibration(itl_scale={"hf": 1.0}, ttft_scale={}, power=PowerModel(), intervals={},
                            itl_launch_gap_ms={"hf": 0.05})
    assert slow_host.itl_ms("hf", decode, batch=1) == pytest.approx(1188 * 0.05, rel=0.02)


def test_interval_half_width_per_engine_with_the_pooled_one_as_fallback():
    from lilou.llm.power import PowerModel
    from lilou.llm.predictor import Calibration

    calibration = Calibration(itl_scale={}, ttft_scale={}, power=PowerModel(), intervals={
        "itl_ms": {"all": 1.0, "vllm": 0.3, "hf": 0.4}, "ttft_ms": {"all": 0.1}, "power_w": 0.8})
    assert calibration.interval_half_width("itl_ms", "vllm") == 0.3
    assert calibration.interval_half_width("itl_ms", "hf") == 0.4
    assert calibration.interval_half_width("ttft_ms", "hf") == 0.1        # no HF TTFT residuals: the pooled one
    assert calibration.interval_half_width("power_w", "vllm") == 0.8      # a file of one float per quantity
    assert calibration.interval_half_width("e2e_ms", "vllm") is None


def test_decode_step_with_a_per_launch_host_term():
    from lilou.llm.power import PowerModel
    from lilou.llm.predictor import Calibration, Phase

    decode = Phase(ms=100.0, flops=0.0, bytes=0.0, memory_ms=10.0, compute_ms=1.0, gpu_ms=20.0, launches=1000)
    calibration = Calibration(itl_scale={"hf": 1.5, "vllm": 1.5}, ttft_scale={}, power=PowerModel(), intervals={},
                              itl_step_ms={"hf": 2.0, "vllm": 2.0}, itl_per_seq_ms={"hf": 0.0, "vllm": 0.5},
                              itl_per_launch_ms={"hf": 0.03})
    assert calibration.itl_ms("hf", decode, batch=1) == pytest.approx(1.5 * 20 + 0.03 * 1000 + 2)
    # no per-launch term: the step's own time (for vLLM the CUDA-graph sum) is scaled
    assert calibration.itl_ms("vllm", decode, batch=4) == pytest.approx(1.5 * 100 + 2 + 0.5 * 4)


@pytest.mark.parametrize(("softcap", "taken"), [(50, 50.0), (30.5, 30.5), (10**400, 0.0), (-(10**400), 0.0),
                                               (0, 0.0), ("50", 0.0), (True, 0.0)])
def test_a_softcap_too_large_for_a_float_is_none(tmp_path, softcap, taken):
    """attn_logit_softcapping of 10**400 in a config.json (an upload to /v1/llm) was "internal error: OverflowError:
    int too large to convert to float" (audit ua46); one that is no positive finite number caps nothing, as inf."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_3_8B_CONFIG, "attn_logit_softcapping": softcap}))
    assert load_config(path).attention_softcap == taken


@pytest.mark.parametrize(("rope", "context"), [
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131072),
    ({"rope_type": "linear", "factor": 8}, 8192 * 8),
    ({"rope_type": "dynamic", "factor": 2**20}, 8192 * 2**20),
    ({"rope_type": "yarn", "factor": 10**400}, 8192),  # OverflowError: int too large to convert to float
    ({"rope_type": "yarn", "factor": 1e308}, 8192),  # OverflowError: cannot convert float infinity to integer
    ({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 10**400}, 8192 * 4),
    ({"rope_type": "dynamic", "factor": 2**20 + 1}, 8192),
])
def test_a_rope_factor_past_2_to_the_20_is_ignored_as_an_infinite_one(tmp_path, rope, context):
    """A rope_scaling factor of 10**400 or 1e308 in a config.json (an upload to /v1/llm) was an internal error, an
    OverflowError (audit ua46); like an infinite one, a factor past 2^20 (released models scale by 4 to 64) scales
    nothing, and an original_max_position_embeddings past 2^40 is not taken."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_3_8B_CONFIG, "max_position_embeddings": 8192, "rope_scaling": rope}))
    assert load_config(path).max_context == context


def test_sliding_windows_of_hugging_face_configs(tmp_path):
    """transformers' own configs: Gemma 2 windows every other layer and soft-caps, Gemma 3 five layers in six,
    Mistral every layer, Qwen 2 none (use_sliding_window false); a window that is not a number is one line."""
    from transformers import Gemma2Config, Gemma3TextConfig, MistralConfig, Qwen2Config

    expected = {Gemma2Config: (4096, 13, 50.0), Gemma3TextConfig: (4096, 22, 0.0), MistralConfig: (4096, 32, 0.0),
                Qwen2Config: (0, 0, 0.0)}
    for cls, window in expected.items():
        path = tmp_path / f"{cls.__name__}.json"
        cls().to_json_file(path)
        config = load_config(path)
        assert (config.sliding_window, config.windowed_layers, config.attention_softcap) == window, cls.__name__
    gemma2 = json.loads((tmp_path / "Gemma2Config.json").read_text())
    del gemma2["layer_types"]  # configs written before transformers listed the layer types
    (tmp_path / "old.json").write_text(json.dumps(gemma2))
    assert (load_config(tmp_path / "old.json").windowed_layers) == 13
    (tmp_path / "bad.json").write_text(json.dumps({**LLAMA_3_8B_CONFIG, "sliding_window": "4k"}))
    with pytest.raises(LilouInputError, match=r"^bad: sliding_window is '4k', not a whole number of tokens$"):
        load_config(tmp_path / "bad.json")


def test_built_in_windows_come_from_the_configs():
    assert [(builtin_config(name).sliding_window, builtin_config(name).windowed_layers) for name in (
        "google/gemma-2-9b-it", "google/gemma-3-12b-it", "openai/gpt-oss-120b", "mistralai/Mistral-7B-v0.1",
        "mistralai/Mistral-7B-Instruct-v0.3", "Qwen/Qwen2.5-7B-Instruct")] == [
        (4096, 21), (1024, 40), (128, 18), (4096, 32), (0, 0), (0, 0)]


def test_a_window_bounds_the_keys_a_query_attends():
    from lilou.llm.steps import attended_keys, attention_reach

    assert attended_keys(8192, causal=False) == 8192 and attended_keys(8192, False, 4096) == 4096
    assert attended_keys(4096, True, 4096) == attended_keys(4096, True) == 2049
    # a prefill of 8192 over a 4096 window: (4096 x 4097 / 2 + 4096 x 4096) / 8192 keys per query
    assert attended_keys(8192, True, 4096) == 3073
    assert attention_reach(8192, True, 4096) == 6145 and attention_reach(9000, False, 4096) == 4096
    assert attention_reach(1000, True, 4096) == 1000


GEMMA_2_9B_CONFIG = {"model_type": "gemma2", "num_hidden_layers": 42, "hidden_size": 3584, "num_attention_heads": 16,
                     "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000,
                     "tie_word_embeddings": True, "sliding_window": 4096}


def test_windowed_layers_hold_and_read_at_most_their_window(llm, tmp_path):
    """Gemma 2 9B: below its window the prediction is the window-free one (the same config with
    ``sliding_window: null``); past it the local layers' KV cache and attention stop growing, and a warning says
    so."""
    from lilou.llm.memory import kv_cache_bytes

    gemma = builtin_config("google/gemma-2-9b-it")
    assert kv_cache_bytes(gemma, "bf16", 1, 2, 8704) == (2 * 8 * 256 * 2) * 2 * (21 * 8704 + 21 * 4096)
    windowed, free = tmp_path / "gemma.json", tmp_path / "free.json"
    windowed.write_text(json.dumps(GEMMA_2_9B_CONFIG))
    free.write_text(json.dumps({**GEMMA_2_9B_CONFIG, "sliding_window": None}))
    assert load_config(windowed).windowed_layers == 21 and load_config(free).windowed_layers == 0

    def predict(path, input_len):
        return llm.predict(str(path), "a100-sxm4-80gb", batch=4, input_len=input_len, output_len=256, dtype="bf16")

    short, short_free = predict(windowed, 2048), predict(free, 2048)
    # the same kernels, the windowed config's attention in two kernels of 21 layers each: equal to the last bits
    assert (short.ttft_ms, short.itl_ms) == pytest.approx((short_free.ttft_ms, short_free.itl_ms), rel=1e-12)
    assert short.memory == short_free.memory
    long, long_free = predict(windowed, 16384), predict(free, 16384)
    assert long.itl_ms < long_free.itl_ms and long.ttft_ms < long_free.ttft_ms
    assert long.memory.kv_cache_gb < long_free.memory.kv_cache_gb and long.max_batch_fitting > long_free.max_batch_fitting
    assert ("21 of 42 layers attend over a sliding window of 4096 tokens (the config's sliding_window): their "
            "attention and KV cache cover at most 4096 of the 16640 tokens") in long.warnings
    assert not any("sliding window" in w for w in short.warnings)


def test_hugging_face_copies_at_most_a_window_of_cache_in_windowed_layers():
    """transformers' DynamicCache grows by torch.cat every step; a sliding-window layer's cache keeps its last
    window - 1 tokens, so its cat copies those, however long the context (Gemma 2 9B, window 4096)."""
    from lilou.llm.steps import StepShape, step_kernels

    gemma = builtin_config("google/gemma-2-9b-it")
    args = dict(dtype="bf16", kv_dtype="bf16", tp=1, engine="hf")
    bytes_of = {}
    for past in (1000, 8000):
        cats = {k.name: k for k in step_kernels(gemma, StepShape(2, 1, past + 1, causal=False), **args)
                if k.name.startswith("kv_cache_cat")}
        assert {name: k.count for name, k in cats.items()} == {"kv_cache_cat": 42, "kv_cache_cat_window": 42}
        bytes_of[past] = {name: k.spec.bytes_read for name, k in cats.items()}
    row = 2 * gemma.kv_heads * gemma.head_dim * 2  # bytes of one token of K (or V) for 2 sequences in BF16
    assert bytes_of[1000] == {"kv_cache_cat": 1000 * row + row, "kv_cache_cat_window": 1000 * row + row}
    assert bytes_of[8000] == {"kv_cache_cat": 8000 * row + row, "kv_cache_cat_window": 4095 * row + row}


#: DeepSeek-V3's published config.json (architecture fields).
DEEPSEEK_V3_CONFIG = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
                      "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
                      "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
                      "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536,
                      "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
                      "tie_word_embeddings": False}


def _deepseek(tmp_path, **change) -> Path:
    path = tmp_path / "deepseek-v3.json"
    path.write_text(json.dumps({**DEEPSEEK_V3_CONFIG, **change}))
    return path


def test_deepseek_v3_parameters_by_hand(tmp_path):
    """Multi-head latent attention, a shared expert and three dense first layers: 671.0 B parameters, DeepSeek's
    published total (its multi-token-prediction module aside)."""
    config = load_config(_deepseek(tmp_path))
    assert (config.mla, config.head_dim, config.latent_width, config.dense_layers, config.moe_layers,
            config.shared_expert_intermediate) == (True, 192, 576, 3, 58, 2048)
    per_layer = (7168 * 1536 + 1536 * 128 * 192      # q_a, q_b
                 + 7168 * 576 + 512 * 128 * (128 + 128)  # kv_a (latent + rotary key), kv_b (keys and values)
                 + 128 * 128 * 7168)                 # o_proj
    assert config.parameters()["attention"] == 61 * per_layer == 11_413_422_080
    routed = 256 * 3 * 7168 * 2048 + 7168 * 256 + 3 * 7168 * 2048
    assert config.parameters()["mlp"] == 58 * routed + 3 * 3 * 7168 * 18432
    assert config.total_parameters == 671_026_279_424
    with pytest.raises(LilouInputError, match=r"multi-head latent attention \(kv_lora_rank\) without v_head_dim"):
        load_config(_deepseek(tmp_path, v_head_dim=None))


def test_a_latent_cache_is_one_latent_per_token_and_layer_on_every_gpu(tmp_path):
    config = load_config(_deepseek(tmp_path))
    assert kv_bytes_per_token(config, "bf16", 1) == kv_bytes_per_token(config, "bf16", 8) == 61 * 576 * 2
    fit = memory_fit(config, 141, dtype="fp8", kv_dtype="bf16", tp=8, engine="vllm", batch=32, input_len=2048,
                     output_len=256)
    linear = config.parameters()["attention"] + config.parameters()["mlp"]  # FP8; embedding and LM head in BF16
    # q_a_proj and kv_a_proj_with_mqa are ReplicatedLinear in vLLM: whole (FP8) on every GPU, not 1 / 8 of them
    replicated = 61 * (7168 * 1536 + 7168 * 576) * (1 - 1 / 8)
    assert fit.weights_gb == pytest.approx(((linear + 2 * (671_026_279_424 - linear)) / 8 + replicated) / GIB)
    assert fit.kv_cache_gb == pytest.approx(61 * 576 * 2 * 32 * 2304 / GIB)


def test_latent_attention_steps_as_vllm_runs_them(tmp_path):
    """A prefill expands keys and values from the latent (kv_b) and attends with a 192-wide key and a 128-wide
    value; a decode folds kv_b into two batched GEMMs per head and attends over the 576-wide latents, every query
    head of the GPU against one latent head; the first three layers have a dense MLP, the others experts."""
    from lilou.llm.steps import StepShape, step_kernels

    config = load_config(_deepseek(tmp_path))
    sizes = dict(dtype="bf16", kv_dtype="bf16", tp=8, engine="vllm")
    prefill = {k.name: k for k in step_kernels(config, StepShape(2, 1000, 1000, causal=True), **sizes)}
    decode = {k.name: k for k in step_kernels(config, StepShape(2, 1, 1000, causal=False), **sizes)}
    assert {"kv_b_proj", "attention"} <= set(prefill) and not {"q_absorb", "out_absorb"} & set(prefill)
    assert {"q_absorb", "attention", "out_absorb"} <= set(decode) and "kv_b_proj" not in decode
    # 16 heads per GPU: prefill keys 16 x 192 per token; decode: one latent head, 16 query rows per sequence
    assert prefill["attention"].attention.head_dim == 192 and prefill["attention"].attention.kv_heads == 16
    assert (decode["attention"].attention.kv_heads, decode["attention"].attention.head_dim) == (1, 576)
    scores = 2 * 16 * 1000  # two sequences, 16 query rows, 1000 latents
    assert decode["attention"].spec.flops == 2 * scores * (576 + 512) + 5 * scores  # Q.K^T, P.V and the softmax
    assert decode["kv_cache_write"].spec.bytes_written == 2 * 576 * 2
    assert (decode["mlp.down_proj"].count, decode["experts_down"].count, decode["shared.down_proj"].count) == (3, 58, 58)


def test_latent_attention_predictions_and_refusals(llm, tmp_path):
    path = _deepseek(tmp_path)
    result = llm.predict(str(path), "h200", tp=8, batch=32, input_len=2048, output_len=256, dtype="fp8")
    assert result.memory.fits and result.itl_ms > 0 and result.ttft_ms > 0
    assert any(w.startswith("multi-head latent attention: the KV cache holds one latent of 576") for w in result.warnings)
    with pytest.raises(LilouInputError, match="^deepseek-v3: multi-head latent attention is modelled as vLLM runs it"):
        llm.predict(str(path), "h200", tp=8, batch=1, input_len=128, output_len=16, engine="hf")
    # DeepSeek-V2-Lite's layout: no low-rank query projection
    lite = load_config(_deepseek(tmp_path, q_lora_rank=None))
    from lilou.llm.steps import StepShape, step_kernels

    names = {k.name for k in step_kernels(lite, StepShape(1, 1, 10, causal=False), dtype="bf16", kv_dtype="bf16",
                                          tp=1, engine="vllm")}
    assert "q_proj" in names and "q_a_proj" not in names


def test_int4_weight_only_as_awq_and_gptq_store_and_run_it(llm):
    """--dtype int4: the layers' linear weights at 4 bits plus an FP16 scale and a 4-bit zero per group of 128, the
    embedding and LM head in FP16 (Llama-3.1-70B: 39.8 GB, the size of its AWQ checkpoints); GEMMs read 4-bit weights
    with FP16 activations and no cast; decode at batch 1 reads about half the bytes; V100 refused."""
    from lilou.llm.memory import weight_bytes
    from lilou.llm.steps import StepShape, step_kernels

    config = builtin_config("meta-llama/Llama-3.1-70B-Instruct")
    parts = config.parameters()
    linear = parts["attention"] + parts["mlp"]
    assert weight_bytes(config, "int4", 1) == linear * (0.5 + 2.5 / 128) + (config.total_parameters - linear) * 2
    assert weight_bytes(config, "int4", 1) / 1e9 == pytest.approx(39.8, abs=0.1)
    small = builtin_config(LLAMA)
    kernels = {k.name: k for k in step_kernels(small, StepShape(1, 1, 1024, causal=False), dtype="int4",
                                               kv_dtype="fp16", tp=1, engine="vllm")}
    assert kernels["qkv_proj"].spec.ops == ("MatMul",) and kernels["qkv_proj"].fixed_bytes == 4096 * 6144 // 2
    assert kernels["lm_head"].fixed_bytes == 4096 * 128256 * 2
    # on the A100 the 16-bit math of an INT4 GEMM is priced on the BF16 tensor cores (the table's INT4 rows' unit)
    bf16, int4 = (llm.predict(LLAMA, "a100-sxm4-80gb", batch=1, input_len=1024, output_len=256, dtype=d)
                  for d in ("bf16", "int4"))
    assert int4.kv_dtype == "fp16" and int4.memory.weights_gb < 0.4 * bf16.memory.weights_gb
    assert int4.itl_ms < 0.6 * bf16.itl_ms and int4.ttft_ms == pytest.approx(bf16.ttft_ms, rel=0.02)
    assert any(w.startswith("INT4 weight-only (AWQ/GPTQ, groups of 128)") for w in int4.warnings)
    with pytest.raises(LilouInputError, match=r"^v100-sxm2-32gb \(compute capability 7.0\) cannot run vLLM's INT4"):
        llm.predict(LLAMA, "v100-sxm2-32gb", batch=1, input_len=16, output_len=16, dtype="int4")


def test_int8_w8a8_on_int8_tensor_cores(llm):
    """--dtype int8 (the page offered it before the API took it): W8A8 GEMMs on the INT8 tensor cores, 16-bit
    activations and cache (FP16 on a T4, which has no BF16), refused below compute capability 7.5."""
    int8, bf16 = (llm.predict(LLAMA, "a100-sxm4-80gb", batch=4, input_len=512, output_len=128, dtype=d)
                  for d in ("int8", "bf16"))
    config = builtin_config(LLAMA)
    linear = config.parameters()["attention"] + config.parameters()["mlp"]  # the embedding and LM head stay BF16
    assert int8.kv_dtype == "bf16" and int8.memory.weights_gb == pytest.approx(
        bf16.memory.weights_gb * (linear + 2 * (config.total_parameters - linear)) / (2 * config.total_parameters))
    assert int8.ttft_ms < 0.7 * bf16.ttft_ms and int8.itl_ms < bf16.itl_ms
    assert llm.predict(LLAMA, "t4", batch=1, input_len=64, output_len=16, dtype="int8").kv_dtype == "fp16"
    with pytest.raises(LilouInputError, match=r"^v100-sxm2-32gb \(compute capability 7.0\) has no INT8 tensor cores"):
        llm.predict(LLAMA, "v100-sxm2-32gb", batch=1, input_len=16, output_len=16, dtype="int8")


def test_nvfp4_on_blackwell_only(llm):
    """--dtype fp4 (NVFP4, W4A4): 4-bit linear weights with an FP8 scale per 16 (0.5625 B per weight), BF16 embedding
    and LM head, GEMMs on the FP4 tensor cores; a decode step of Llama-3.1-70B on a B200 reads about a third of the
    BF16 bytes; refused without FP4 tensor cores (H100)."""
    from lilou.llm.memory import weight_bytes

    config = builtin_config("meta-llama/Llama-3.1-70B-Instruct")
    parts = config.parameters()
    linear = parts["attention"] + parts["mlp"]
    assert weight_bytes(config, "fp4", 1) == linear * (0.5 + 1 / 16) + (config.total_parameters - linear) * 2
    runs = {d: llm.predict(config.name, "b200", batch=32, input_len=1024, output_len=256, dtype=d)
            for d in ("bf16", "fp8", "fp4")}
    assert runs["fp4"].itl_ms < runs["fp8"].itl_ms < runs["bf16"].itl_ms
    assert runs["fp4"].ttft_ms < runs["fp8"].ttft_ms < runs["bf16"].ttft_ms and runs["fp4"].kv_dtype == "bf16"
    with pytest.raises(LilouInputError, match=r"^h100-sxm \(compute capability 9.0\) has no FP4 tensor cores"):
        llm.predict(LLAMA, "h100-sxm", batch=1, input_len=16, output_len=16, dtype="fp4")


@pytest.mark.parametrize(("quantization", "dtype", "said"), [
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}, "int4", "awq 4-bit"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, "int4", "gptq 4-bit"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}, "fp8", "fp8"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "fp4", "modelopt NVFP4"),
    ({"quant_method": "compressed-tensors", "format": "int-quantized", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "int"}, "input_activations": {"num_bits": 8, "type": "int"}}}},
     "int8", "compressed-tensors INT8 W8A8"),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "int", "group_size": 128}, "input_activations": None}}},
     "int4", "compressed-tensors INT4 weight-only"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "", "bitsandbytes 4-bit (fp4)"),
    ({"quant_method": "gptq", "bits": 8}, "", "gptq 8-bit"),
])
def test_a_quantized_checkpoint_sets_the_default_dtype(llm, tmp_path, quantization, dtype, said):
    """A checkpoint's quantization_config (AWQ, GPTQ, FP8, ModelOpt, compressed-tensors) is its default --dtype; a
    format Lilou does not price (bitsandbytes, 8-bit GPTQ) is said, and the model priced in 16 bits."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_3_8B_CONFIG, "quantization_config": quantization}))
    assert (load_config(path).quantization, load_config(path).quantization_note) == (dtype, said)
    result = llm.predict(str(path), "b200", batch=1, input_len=64, output_len=16)
    assert result.dtype == (dtype or "bf16")
    first = result.warnings[0]
    if dtype:
        assert first == f"no --dtype given: {dtype.upper()}, the checkpoint's own ({said}, its quantization_config)"
        other = llm.predict(str(path), "b200", batch=1, input_len=64, output_len=16, dtype="bf16")
        assert other.warnings[0] == (f"--dtype bf16: the checkpoint stores {dtype.upper()} weights ({said}); priced "
                                     "as asked, as if requantised")
    else:
        assert first == "no --dtype given: BF16 (the widest half precision b200 runs)"
        assert result.warnings[1].startswith(f"the checkpoint's quantization_config ({said}) is not a format Lilou "
                                             "prices: its weights are priced at 16 bits (BF16)")


@pytest.mark.parametrize(("quantization", "said", "factor"), [
    ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "gptq 8-bit", "2.0x"),
    ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "bitsandbytes 8-bit (LLM.int8)", "2.0x"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "bitsandbytes 4-bit (nf4)",
     "3.6x"),
])
def test_a_format_lilou_does_not_price_has_its_own_warning_with_the_memory_it_overstates(llm, tmp_path, quantization,
                                                                                          said, factor):
    """8-bit GPTQ and bitsandbytes were priced in BF16 with a clause at the end of the "no --dtype" line: the weights'
    memory about 2x (8-bit) or 3.5x (NF4) the checkpoint's, unsaid."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_3_8B_CONFIG, "quantization_config": quantization}))
    for dtype in (None, "bf16"):  # an explicit 16-bit --dtype is told too
        result = llm.predict(str(path), "a100-sxm4-80gb", batch=8, input_len=1024, output_len=256, dtype=dtype)
        (line,) = [w for w in result.warnings if "quantization_config" in w]
        assert line.startswith(f"the checkpoint's quantization_config ({said}) is not a format Lilou prices: its "
                               f"weights are priced at 16 bits (BF16), so the weights' memory is overstated about "
                               f"{factor} (the checkpoint stores about ")
        assert line.endswith("bits a weight) and max_batch_fitting understated; the GEMMs read 16-bit weights")


def test_an_int4_checkpoint_s_group_size_is_said_and_its_scales_counted(llm, tmp_path):
    """AWQ with group_size 64 was said to be "groups of 128" and its scales counted at 128."""
    weights = {}
    for group in (128, 64):
        path = tmp_path / f"g{group}.json"
        path.write_text(json.dumps({**LLAMA_3_8B_CONFIG, "quantization_config": {
            "quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm"}}))
        result = llm.predict(str(path), "a100-sxm4-80gb", batch=8, input_len=1024, output_len=256)
        (line,) = [w for w in result.warnings if w.startswith("INT4 weight-only")]
        weights[group] = result.memory.weights_gb
        said = "groups of 128" if group == 128 else "group size 64: its scales counted at 64, its GEMMs priced as at 128"
        assert line.startswith(f"INT4 weight-only (AWQ/GPTQ, {said}): ")
    config = load_config(tmp_path / "g64.json")
    linear = config.parameters()["attention"] + config.parameters()["mlp"]
    # an FP16 scale and a 4-bit zero point per group: 2.5 bytes per 64 weights rather than per 128
    assert weights[64] - weights[128] == pytest.approx(linear * (2.5 / 64 - 2.5 / 128) / GIB, rel=1e-6)


def test_a_context_past_the_models_positions_is_said(llm):
    """max_position_embeddings (from WattGPU's rows for the built-ins): Gemma 2 2B takes 8192 tokens."""
    assert builtin_config("google/gemma-2-2b-it").max_context == 8192
    assert builtin_config(LLAMA).max_context == 131072
    long = llm.predict("google/gemma-2-2b-it", "h100-sxm", batch=1, input_len=10000, output_len=100, dtype="bf16")
    assert ("10100 tokens of context pass google/gemma-2-2b-it's 8192 (max_position_embeddings): beyond what it was "
            "trained on, and vLLM refuses such a max_model_len unless told to allow it; priced as asked") in long.warnings
    short = llm.predict("google/gemma-2-2b-it", "h100-sxm", batch=1, input_len=4000, output_len=100, dtype="bf16")
    assert not any("max_position_embeddings" in w for w in short.warnings)


def test_formats_no_serving_row_measured_get_wider_intervals(llm):
    """INT4 (no serving row) widens the ITL interval in quadrature by the kernel calibration's INT4 GEMM band beyond
    the BF16 one, times the GEMMs' share of the decode step; BF16 keeps the engine's calibrated half-width."""
    import math

    from lilou.plan.calibration import Calibration

    bf16, int4 = (llm.predict(LLAMA, "a100-sxm4-80gb", batch=8, input_len=1024, output_len=256, dtype=d)
                  for d in ("bf16", "int4"))
    engine_half = llm.calibration.interval_half_width("itl_ms", "vllm")
    lo, hi = bf16.intervals["itl_ms"]
    assert (lo, hi) == pytest.approx((bf16.itl_ms * math.exp(-engine_half), bf16.itl_ms * math.exp(engine_half)))
    calibration = Calibration.shipped()
    extra = math.sqrt(calibration.widest("gemm", "int4").hi ** 2 - calibration.pooled_band("gemm", "bf16").hi ** 2)
    assert 0.5 < int4.decode.gemm_share < 1
    half = math.hypot(engine_half, int4.decode.gemm_share * extra)
    assert int4.intervals["itl_ms"] == pytest.approx([int4.itl_ms * math.exp(-half), int4.itl_ms * math.exp(half)])
    assert any(w.startswith("no serving row is INT4") for w in int4.warnings)
    assert not any(w.startswith("no serving row") for w in bf16.warnings)


def test_quantised_weights_do_not_speed_up_attention(llm):
    """vLLM's attention computes in 16-bit whatever the projections' weights: an INT8 Llama-3.1-8B's 131,072-token
    prefill on an H100 was priced 3.7x faster than BF16's (4,100 TFLOPS implied, twice the INT8 peak). Attention is
    most of that prefill's FLOPs, so faster weight formats can speed it by far less."""
    args = dict(batch=1, input_len=131072, output_len=16)
    bf16 = llm.predict("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm", dtype="bf16", **args)
    for dtype in ("int8", "fp8"):
        quantised = llm.predict("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm", dtype=dtype, **args)
        assert 0.6 * bf16.ttft_ms < quantised.ttft_ms < bf16.ttft_ms, dtype


def test_a_batch_above_vllm_s_default_max_num_seqs_is_said(llm):
    """A vLLM server runs at most max_num_seqs (256 by default) sequences at once: batch 512 is priced as running,
    which needs the server configured so."""
    big = llm.predict("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm", batch=512, input_len=128, output_len=128)
    assert any(w.startswith("batch 512: vLLM runs at most max_num_seqs sequences at once (256") for w in big.warnings)
    small = llm.predict("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm", batch=256, input_len=128, output_len=128)
    assert not any("max_num_seqs" in w for w in small.warnings)
    hf = llm.predict("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm", batch=512, input_len=128, output_len=128,
                     engine="hf")
    assert not any("max_num_seqs" in w for w in hf.warnings)


def test_hf_results_compare_equal(llm):
    """An HF-engine result holds each decode point's launch queue as arrays; comparing two results raised
    'The truth value of an array ... is ambiguous'."""
    args = dict(batch=2, input_len=64, output_len=16, engine="hf")
    assert llm.predict("meta-llama/Llama-3.2-3B-Instruct", "a10g", **args) == \
        llm.predict("meta-llama/Llama-3.2-3B-Instruct", "a10g", **args)


def _hub_config(folder: Path, name: str, config: dict) -> Path:
    path = folder / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    return path


LLAMA_4_MAVERICK_TEXT = {  # meta-llama/Llama-4-Maverick-17B-128E-Instruct's text_config, as the Hub ships it
    "model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 40,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
    "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "vocab_size": 202048,
    "attention_chunk_size": 8192, "max_position_embeddings": 1048576, "tie_word_embeddings": False}


def test_llama_4_is_read_with_its_dense_layers_shared_expert_and_chunks(tmp_path):
    """Llama 4's MoE layers alternate with dense ones (``interleave_moe_layer_step``), each holds a shared expert,
    and three of four layers attend within 8192-token chunks. Read as a MoE in every layer without the shared
    expert, Maverick came out at 778 B parameters (the model card's 400 B: transformers counts 400.7 B) and did not
    fit 8 H100s in FP8, which Meta says it does."""
    path = _hub_config(tmp_path, "maverick", {"model_type": "llama4", "text_config": LLAMA_4_MAVERICK_TEXT,
                                              "vision_config": {"model_type": "llama4_vision_model"}})
    config = load_config(path)
    assert abs(config.total_parameters / 1e9 - 400.71) < 0.01
    assert (config.moe_layers, config.dense_layers, config.shared_expert_intermediate) == (24, 24, 8192)
    assert (config.sliding_window, config.windowed_layers) == (8192, 36)
    prediction = LLMPredictor().predict(path, "h100-sxm", tp=8, dtype="fp8", input_len=1024, output_len=128)
    assert prediction.memory.fits and prediction.itl_ms is not None
    assert any(w.startswith("36 of the 48 layers attend within chunks of 8192 tokens") for w in prediction.warnings)
    assert any(w.startswith("the model's vision encoder is not priced") for w in prediction.warnings)


def test_configs_as_the_hub_ships_them_leave_fields_to_transformers_defaults(tmp_path):
    """A Gemma 2 config without ``tie_word_embeddings`` ties its LM head (transformers' default for gemma2; Lilou
    counted a head of its own: 10.16 B parameters for Gemma-2-9B, 9.24 B in truth); Gemma 3's multimodal config
    leaves its text model's vocabulary and heads to Gemma3TextConfig's defaults, and was refused; Falcon's first
    configs call it RefinedWebModel, and were refused for lacking an MLP width; gpt-oss's MXFP4 experts were priced
    in BF16 by default (217 GiB: "does not fit" an H100 that OpenAI says holds it)."""
    gemma2 = {"model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42, "num_attention_heads": 16,
              "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000,
              "sliding_window": 4096}
    assert abs(load_config(_hub_config(tmp_path, "gemma2", gemma2)).total_parameters / 1e9 - 9.24) < 0.01
    gemma3 = {"model_type": "gemma3", "vision_config": {"model_type": "siglip_vision_model"},
              "text_config": {"model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504,
                              "num_hidden_layers": 62, "num_attention_heads": 32, "num_key_value_heads": 16,
                              "head_dim": 128, "sliding_window": 1024}}
    text = load_config(_hub_config(tmp_path, "gemma3", gemma3))
    assert (text.vocab, text.tied_embeddings, text.windowed_layers) == (262208, True, 62 - 62 // 6)
    falcon = {"model_type": "RefinedWebModel", "hidden_size": 4544, "n_head": 71, "n_layer": 32,
              "vocab_size": 65024, "multi_query": True, "parallel_attn": True}
    refined = load_config(_hub_config(tmp_path, "falcon", falcon))
    assert (refined.intermediate, refined.kv_heads, refined.tied_embeddings) == (4 * 4544, 1, True)
    assert abs(refined.total_parameters / 1e9 - 6.92) < 0.01
    oss = {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 36, "num_attention_heads": 64,
           "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 128,
           "num_experts_per_tok": 4, "vocab_size": 201088, "sliding_window": 128,
           "layer_types": ["sliding_attention", "full_attention"] * 18, "quantization_config": {"quant_method": "mxfp4"}}
    prediction = LLMPredictor().predict(_hub_config(tmp_path, "oss", oss), "h100-sxm", input_len=1024, output_len=128)
    assert prediction.dtype == "int4" and prediction.memory.fits


def test_the_context_warning_of_learned_positions_and_rope_scaling(llm, tmp_path):
    """A context past GPT-2's learned positions cannot run at all; one within Qwen's yarn x4 is not warned of."""
    gpt2 = tmp_path / "gpt2.json"
    gpt2.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
                                "vocab_size": 50257}))
    warnings = llm.predict(gpt2, "h100-sxm", input_len=2048, output_len=256).warnings
    assert ("2304 tokens of context pass gpt2's 1024 (n_positions): its positions are learned embeddings of that many "
            "rows, so no engine can run such a context; priced as asked") in warnings
    qwen = tmp_path / "qwen.json"
    qwen.write_text(json.dumps({"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
                                "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                                "vocab_size": 152064, "max_position_embeddings": 32768,
                                "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                 "original_max_position_embeddings": 32768}}))
    assert not [w for w in llm.predict(qwen, "h100-sxm", input_len=100000, output_len=256).warnings if "context" in w]


def test_the_python_api_is_documented():
    from lilou.llm import LLMPredictor
    from lilou.llm.predictor import LLMPrediction

    doc = LLMPredictor.predict.__doc__
    assert all(word in doc for word in ("milliseconds", "watts", "GiB", "bf16, fp16, fp8, fp4, int8, int4, fp32",
                                        "vllm (None: vllm) or hf", "LilouInputError"))
    assert "milliseconds" in LLMPrediction.__doc__ and "None where the model does not fit" in LLMPrediction.__doc__


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(engine="hf", kv_dtype="fp8", gpu="a100-sxm4-80gb"),
     r"^--kv-dtype fp8 --engine hf: transformers' DynamicCache stores keys and values in the model's dtype and has no "
     r"FP8 cache"),
    (dict(kv_dtype="fp32", gpu="h100-sxm"),
     r"^--kv-dtype fp32 with --dtype bf16: vLLM's kv_cache_dtype is auto \(the model's own dtype\) or fp8"),
])
def test_a_kv_cache_the_engine_cannot_store_is_refused(llm, kwargs, message):
    """Audit ua42c finding 6: an FP8 cache under transformers (DynamicCache has no FP8 storage) and an FP32 cache of a
    BF16 model under vLLM (kv_cache_dtype is auto or an FP8 variant) were priced without a word."""
    with pytest.raises(LilouInputError, match=message):
        llm.predict(LLAMA, batch=8, input_len=4096, output_len=256, **kwargs)


def test_vllm_spellings_of_an_fp8_cache_and_its_warning(llm):
    """fp8_e4m3 and fp8_e5m2 (vLLM's kv_cache_dtype values) are fp8; an FP8 cache says that its attention rests on the
    BF16-cache correction and that no serving row measured one; an FP32 model's own FP32 cache is vLLM's auto."""
    runs = {kv: llm.predict(LLAMA, "h100-sxm", batch=8, input_len=4096, output_len=256, kv_dtype=kv)
            for kv in ("fp8", "fp8_e4m3", "FP8_E5M2")}
    assert {r.kv_dtype for r in runs.values()} == {"fp8"}
    assert runs["fp8_e4m3"].to_json() == runs["fp8"].to_json() == runs["FP8_E5M2"].to_json()
    said = [w for w in runs["fp8"].warnings if w.startswith("FP8 KV cache:")]
    assert said == ["FP8 KV cache: its attention is priced with the correction fitted on vLLM's BF16-cache kernels "
                    "(reading the cache's 8-bit bytes), and no serving row measured an FP8 cache"]
    bf16 = llm.predict(LLAMA, "h100-sxm", batch=8, input_len=4096, output_len=256)
    assert not any(w.startswith("FP8 KV cache") for w in bf16.warnings)
    assert llm.predict(LLAMA, "h100-sxm", batch=1, input_len=64, output_len=16, dtype="fp32",
                       kv_dtype="fp32").kv_dtype == "fp32"


def test_fp8_before_ada_is_weight_only_w8a16_as_vllm_serves_it(llm, tmp_path):
    """Audit ua42c finding 1: an FP8 checkpoint on an A100 was refused ("use bf16", which does not fit Llama-3.1-70B);
    vLLM serves it weight-only (W8A16, FP8-Marlin) from compute capability 7.5. Priced as the INT4 weight-only path:
    GEMMs read 8-bit weights with no cast of the activations, on the 16-bit tensor cores; weights as FP8's; a warning
    names W8A16 and the intervals widen by the weight-only GEMM band; dense and MoE (vLLM's fused Marlin MoE)."""
    from lilou.llm.steps import StepShape, step_kernels

    config = builtin_config(LLAMA)
    shape = StepShape(1, 1, 1024, causal=False)
    w8a8 = {k.name: k for k in step_kernels(config, shape, dtype="fp8", kv_dtype="bf16", tp=1, engine="vllm")}
    w8a16 = {k.name: k for k in step_kernels(config, shape, dtype="fp8", kv_dtype="bf16", tp=1, engine="vllm",
                                             weight_only=True)}
    assert w8a8["qkv_proj"].spec.ops == ("Cast", "MatMul") and w8a16["qkv_proj"].spec.ops == ("MatMul",)
    assert w8a16["qkv_proj"].fixed_bytes == w8a8["qkv_proj"].fixed_bytes == 4096 * 6144
    big = llm.predict("meta-llama/Llama-3.1-70B-Instruct", "a100-sxm4-80gb", batch=8, input_len=1024, output_len=256,
                      dtype="fp8")
    assert big.dtype == "fp8" and big.kv_dtype == "bf16" and big.memory.fits and big.itl_ms > 0
    assert big.memory.weights_gb == pytest.approx(67.67, abs=0.01)
    assert not llm.predict("meta-llama/Llama-3.1-70B-Instruct", "a100-sxm4-80gb", batch=8, input_len=1024,
                           output_len=256, dtype="bf16").memory.fits
    assert big.warnings[0] == (
        "FP8 on a100-sxm4-80gb (compute capability 8.0, no FP8 tensor cores): vLLM serves it weight-only, W8A16 with "
        "its FP8-Marlin kernels: weights FP8, compute BF16 (GEMMs on the 16-bit tensor cores reading 8-bit weights, "
        "dequantised in the kernel, priced as the INT4 weight-only path is; the embedding and LM head in BF16). No "
        "serving or kernel row measured W8A16: the TTFT and ITL intervals are widened by the weight-only (INT4) GEMM "
        "band")
    runs = {d: llm.predict(LLAMA, "a100-sxm4-80gb", batch=8, input_len=1024, output_len=256, dtype=d)
            for d in ("bf16", "fp8", "int4")}
    assert runs["int4"].itl_ms < runs["fp8"].itl_ms < 0.8 * runs["bf16"].itl_ms
    assert runs["fp8"].ttft_ms == pytest.approx(runs["bf16"].ttft_ms, rel=0.05)  # the same 16-bit math
    width = {d: math.log(r.intervals["itl_ms"][1] / r.itl_ms) for d, r in runs.items()}
    assert width["fp8"] > width["bf16"] + 0.2
    # a T4 (7.5, no BF16) computes in FP16; an L4 (8.9) keeps W8A8 on its FP8 tensor cores, without the note
    t4 = llm.predict(LLAMA, "t4", batch=1, input_len=256, output_len=64, dtype="fp8")
    assert t4.kv_dtype == "fp16" and "weights FP8, compute FP16" in t4.warnings[0]
    assert not any("W8A16" in w for w in llm.predict(LLAMA, "l4", batch=1, input_len=256, output_len=64,
                                                      dtype="fp8").warnings)
    # an FP8 checkpoint is its own default --dtype on an A100 now, MoE included
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_3_8B_CONFIG, "quantization_config": {"quant_method": "fp8",
                                                                               "activation_scheme": "dynamic"}}))
    assert llm.predict(str(path), "a100-sxm4-80gb", batch=1, input_len=64, output_len=16).dtype == "fp8"
    moe = llm.predict("mistralai/Mixtral-8x7B-Instruct-v0.1", "a100-sxm4-80gb", batch=8, input_len=1024,
                      output_len=256, dtype="fp8")
    assert moe.memory.fits and "fused Marlin MoE kernel with FP8 weights" in moe.warnings[0]


def test_hf_moe_layer_is_transformers_expert_dispatch_not_one_grouped_gemm(llm):
    """Audit ua42c finding 3: `--engine hf` priced a MoE layer as vLLM's router, one grouped GEMM each way and an
    activation (5 launches). transformers 5.25 runs grouped_mm_experts_forward (its default experts implementation):
    router, softmax, top-k and renormalisation, sort, gathers, offsets, two grouped GEMMs over the experts hit, the
    gate, the routing weights, the inverse permutation and the sum back (22 launches); below compute capability 8.0
    each grouped GEMM is one GEMM per expert hit (_grouped_mm_fallback). vLLM's steps are unchanged."""
    from lilou.llm.steps import StepShape, step_kernels

    config = builtin_config("Qwen/Qwen3-30B-A3B-Instruct-2507")  # 48 MoE layers, 8 of 128 experts of 768
    shape = StepShape(1, 1, 600, causal=False)
    moe = lambda kernels: [(k.name, k.count) for k in kernels if k.name.startswith(("router", "experts"))]  # noqa: E731
    vllm = step_kernels(config, shape, dtype="bf16", kv_dtype="bf16", tp=1, engine="vllm")
    assert moe(vllm) == [(n, 48) for n in ("router", "router_topk", "experts_up", "experts_act", "experts_down")]
    hf = step_kernels(config, shape, dtype="bf16", kv_dtype="bf16", tp=1, engine="hf")
    assert moe(hf) == [(n, 48) for n in (
        "router", "router_topk", "router_topk_select", "router_renorm_sum", "router_renorm_div", "router_cast",
        "experts_sort", "experts_perm_div", "experts_gather", "experts_weight_gather", "experts_histc",
        "experts_cumsum", "experts_up", "experts_act", "experts_gate_mul", "experts_down", "experts_weight_mul",
        "experts_arange", "experts_inverse_scatter", "experts_unpermute", "experts_sum", "experts_cast")]
    grouped = {k.name: k for k in hf}
    assert grouped["experts_up"].spec.gemm == (8, 1, 1536, 2048)  # the 8 experts hit, 1 token each
    looped = {k.name: k for k in step_kernels(config, shape, dtype="bf16", kv_dtype="bf16", tp=1, engine="hf",
                                              moe_loop=True)}
    assert (looped["experts_up"].count, looped["experts_up"].spec.gemm) == (48 * 8, (1, 1, 1536, 2048))
    assert (looped["experts_down"].count, looped["experts_down"].spec.gemm) == (48 * 8, (1, 1, 2048, 768))
    assert looped["experts_up_zeros"].count == looped["experts_down_zeros"].count == 48
    run = llm.predict(config.name, "a100-sxm4-80gb", batch=1, input_len=512, output_len=128, engine="hf")
    dense = llm.predict("Qwen/Qwen3-8B", "a100-sxm4-80gb", batch=1, input_len=512, output_len=128, engine="hf")
    assert run.itl_ms > 1.5 * dense.itl_ms  # 40.8 against 33.8 ms before: the dispatch's launches are host time
    said = [w for w in run.warnings if w.startswith("transformers' MoE block")]
    assert said == ["transformers' MoE block is priced from its code (transformers 5.25's grouped_mm_experts_forward, "
                    "the default experts implementation), not measured: the router, top-k, sort, gathers, two grouped "
                    "GEMMs over the experts hit, scatter back, each a launch of its own; transformers 4.x (or "
                    "experts_implementation='eager') loops in Python over the experts hit, about 9 launches each, which "
                    "is slower than priced"]
    assert not any(w.startswith("transformers' MoE") for w in llm.predict(
        config.name, "a100-sxm4-80gb", batch=1, input_len=512, output_len=128).warnings)


QWEN15_MOE_CONFIG = {"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
                     "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_attention_heads": 16,
                     "num_key_value_heads": 16, "num_hidden_layers": 24, "num_experts": 60, "num_experts_per_tok": 4,
                     "vocab_size": 151936, "max_position_embeddings": 8192, "decoder_sparse_step": 1,
                     "mlp_only_layers": [], "tie_word_embeddings": False}
DEEPSEEK_V2_LITE_CONFIG = {"model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944,
                           "moe_intermediate_size": 1408, "n_routed_experts": 64, "n_shared_experts": 2,
                           "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1,
                           "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 27,
                           "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                           "v_head_dim": 128, "vocab_size": 102400, "max_position_embeddings": 163840,
                           "tie_word_embeddings": False}


@pytest.mark.parametrize(("base", "change", "dense", "parameters"), [
    # transformers 5.25's count on the meta device, less its biases (Lilou leaves biases out): Qwen1.5-MoE-A2.7B
    # 14,315,784,192 - 147,456 (its shared_expert_gate is counted since, 49,152)
    (QWEN15_MOE_CONFIG, {}, 0, 14_315_636_736),
    # Qwen2MoeDecoderLayer: layer i routes only when i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0
    (QWEN15_MOE_CONFIG, {"decoder_sparse_step": 2}, 12, 8_085_596_160),  # 8,085,743,616 - 147,456
    (QWEN15_MOE_CONFIG, {"mlp_only_layers": list(range(12))}, 12, 8_085_596_160),
    (QWEN15_MOE_CONFIG, {"decoder_sparse_step": 2, "mlp_only_layers": [0, 1, 3, 99]}, 14, None),  # 1 and 3 route
    (dict(QWEN15_MOE_CONFIG, model_type="qwen3_moe", shared_expert_intermediate_size=0), {"decoder_sparse_step": 3},
     16, None),
    # DeepSeek-V2-Lite: 15,706,484,224 in transformers, less its 27 kv_a_layernorm (13,824), not counted by Lilou
    (DEEPSEEK_V2_LITE_CONFIG, {}, 1, 15_706_470_400),
    # moe_layer_freq 2 (vLLM's and DeepSeek's DeepseekV2DecoderLayer: i >= first_k_dense_replace and
    # i % moe_layer_freq == 0): layers 2, 4 ... 26 route, 14 dense, as transformers' count with first_k 14
    # (9,156,554,240 - 13,824)
    (DEEPSEEK_V2_LITE_CONFIG, {"moe_layer_freq": 2}, 14, 9_156_540_416),
])
def test_moe_layer_patterns_are_read_as_the_engines_build_them(llm, tmp_path, base, change, dense, parameters):
    """decoder_sparse_step, mlp_only_layers (Qwen2/3-MoE) and moe_layer_freq (DeepSeek) were ignored: every layer
    after first_k_dense_replace was priced with experts (14.32 B parameters at any sparse step)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**base, **change}))
    config = load_config(path)
    assert (config.dense_layers, config.moe_layers) == (dense, config.layers - dense)
    if parameters is not None:
        assert config.total_parameters == parameters
    dense_mlp = config.mlp_matrices * config.hidden * config.intermediate
    every = load_config(_write(tmp_path / "every", base))
    per_moe_layer = (every.parameters()["mlp"] - every.dense_layers * dense_mlp) // every.moe_layers
    assert config.parameters()["mlp"] == config.moe_layers * per_moe_layer + dense * dense_mlp
    memory = llm.predict(str(path), "h100-sxm", batch=1, input_len=128, output_len=16).memory
    assert memory.weights_gb == pytest.approx(config.total_parameters * 2 / GIB, rel=1e-3)


def _write(folder: Path, config: dict) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder / "config.json"


def test_phimoe_uses_layernorm(tmp_path):
    """transformers' PhimoeDecoderLayer normalises with nn.LayerNorm (input, post-attention and final norms);
    Phi-3.5-MoE and Phi-tiny-MoE were priced with RMSNorm."""
    assert builtin_config("microsoft/Phi-tiny-MoE-instruct").norm == "layernorm"
    path = _write(tmp_path / "phimoe", {**LLAMA_3_8B_CONFIG, "model_type": "phimoe", "num_local_experts": 16,
                                        "num_experts_per_tok": 2})
    assert load_config(path).norm == "layernorm"
