"""Tensor-parallel LLM serving: the links an all-reduce crosses and what is measured of them, quantisation groups
that a TP degree splits, engines without TP, context limits of the built-ins, notes on every path.

Real configs (the Hub's config.json of each model, fields as published) and hand-checked expectations."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from lilou.errors import LilouInputError
from lilou.hardware import resolve_device
from lilou.llm.config import builtin_config
from lilou.llm.interconnect import GEFORCE, MEASURED_TP, NO_P2P_LOG_FACTOR, UNMEASURED_LOG_FACTOR, extrapolation, link

LLAMA2_70B = "meta-llama/Llama-2-70b-hf"
LLAMA3_70B = "meta-llama/Meta-Llama-3-70B"

# huggingface.co/Qwen/Qwen3-235B-A22B-FP8/blob/main/config.json (architecture and quantization_config)
QWEN3_235B_FP8 = {
    "architectures": ["Qwen3MoeForCausalLM"], "head_dim": 128, "hidden_size": 4096, "intermediate_size": 12288,
    "max_position_embeddings": 40960, "model_type": "qwen3_moe", "moe_intermediate_size": 1536,
    "num_attention_heads": 64, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 94,
    "num_key_value_heads": 4, "tie_word_embeddings": False, "vocab_size": 151936, "use_sliding_window": False,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]}}
# Qwen2.5-72B with an AWQ quantization_config at its unpadded MLP width (29568 = 231 x 128); Qwen's own
# Qwen2.5-72B-Instruct-AWQ pads it to 29696 (huggingface.co/Qwen/Qwen2.5-72B-Instruct-AWQ/blob/main/config.json)
QWEN25_72B_AWQ = {
    "architectures": ["Qwen2ForCausalLM"], "hidden_size": 8192, "intermediate_size": 29568,
    "max_position_embeddings": 32768, "model_type": "qwen2", "num_attention_heads": 64, "num_hidden_layers": 80,
    "num_key_value_heads": 8, "tie_word_embeddings": False, "vocab_size": 152064, "use_sliding_window": False,
    "quantization_config": {"bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemm",
                            "zero_point": True}}
# huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json
LLAMA31_70B = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672,
    "max_position_embeddings": 131072, "model_type": "llama", "num_attention_heads": 64, "num_hidden_layers": 80,
    "num_key_value_heads": 8, "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                                "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "vocab_size": 128256}


@pytest.fixture(scope="module")
def llm():
    from lilou.llm import LLMPredictor

    return LLMPredictor()


def _config(tmp_path, name, fields):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(fields))
    return str(folder)


def _half_width(interval, value):
    return math.log(interval[1] / value)


# ------------------------------------------------------------------------------------------------ D1: extrapolation


def test_the_measured_tp_gpus_are_those_of_the_serving_rows(datasets_dir):
    from lilou.data.llm_energy import serving_runs

    fitted = {r.gpu for r in serving_runs(datasets_dir) if r.tp > 1 and not r.held_back}
    held_back = {r.gpu for r in serving_runs(datasets_dir) if r.tp > 1 and r.held_back}
    assert fitted == MEASURED_TP == {"a100-sxm4-40gb", "b200"} and held_back == {"h100-sxm"}


def test_tp_over_pcie_is_said_extrapolated_and_widens_the_intervals(llm):
    l40s = llm.predict(LLAMA3_70B, "l40s", tp=8, batch=32, input_len=4096, output_len=256)
    said = [w for w in l40s.warnings if "extrapolated" in w]
    assert len(said) == 1 and "TP 8 on l40s: no serving row at TP > 1 on this GPU enters the fits" in said[0]
    assert "PCIe 4.0 x16" in said[0] and "GeForce" not in said[0]
    half = llm.calibration.interval_half_width("itl_ms", "vllm")
    share = l40s.decode.reduce_ms / l40s.decode.ms
    assert 0.1 < share < 0.5  # 160 all-reduces of 32 x 8192 BF16 over PCIe 4 in a 45 ms step
    assert _half_width(l40s.intervals["itl_ms"], l40s.itl_ms) == pytest.approx(
        math.hypot(half, share * math.log(2)), rel=1e-6)
    ttft_half = llm.calibration.interval_half_width("ttft_ms", "vllm")
    assert _half_width(l40s.intervals["ttft_ms"], l40s.ttft_ms) > ttft_half + 1e-3
    assert _half_width(l40s.steady_interval_ms, l40s.steady_itl_ms) > half + 1e-3
    # an NVSwitch group between the measured generations: said (its rows are held back), the calibrated band as it is
    h100 = llm.predict(LLAMA3_70B, "h100-sxm", tp=8, batch=32, input_len=4096, output_len=256)
    (note,) = [w for w in h100.warnings if "enters the fits" in w]
    assert "its rows are held back for evaluation" in note and "NVLink 4 constants" in note
    assert _half_width(h100.intervals["itl_ms"], h100.itl_ms) == pytest.approx(half, rel=1e-6)
    b200 = llm.predict(LLAMA3_70B, "b200", tp=8, batch=32, input_len=4096, output_len=256)
    assert not [w for w in b200.warnings if "enters the fits" in w]


def test_geforce_boards_are_named_as_having_no_peer_to_peer(llm):
    result = llm.predict("meta-llama/Llama-3.1-8B-Instruct", "rtx-4090", tp=8, batch=1, input_len=1024,
                         output_len=256)
    said = [w for w in result.warnings if "extrapolated" in w]
    assert len(said) == 1 and "rtx-4090 is a GeForce board" in said[0] and "peer-to-peer" in said[0]
    share = result.decode.reduce_ms / result.decode.ms
    half = llm.calibration.interval_half_width("itl_ms", "vllm")
    assert _half_width(result.intervals["itl_ms"], result.itl_ms) == pytest.approx(
        math.hypot(half, share * NO_P2P_LOG_FACTOR), rel=1e-6)
    assert {"rtx-4090", "rtx-5090", "rtx-3090"} <= GEFORCE and "rtx-pro-6000-blackwell-server" not in GEFORCE


def test_which_links_are_extrapolated():
    assert extrapolation(resolve_device("l40s"), 1) is None
    assert extrapolation(resolve_device("b200"), 8) is None and extrapolation(resolve_device("a100-sxm4-40gb"), 8) is None
    # the H100's TP rows are held back; its NVLink 4 (and the H200's) lies between the fitted NVLink 3 and 5
    for gpu in ("h100-sxm", "h200"):
        note, factor = extrapolation(resolve_device(gpu), 4)
        assert factor == 0.0 and "no serving row at TP > 1 on this GPU enters the fits" in note
        assert ("held back" in note) == (gpu == "h100-sxm")
    assert extrapolation(resolve_device("a100-pcie-80gb"), 2)[1] == UNMEASURED_LOG_FACTOR
    assert extrapolation(resolve_device("v100-sxm2-32gb"), 2)[1] == UNMEASURED_LOG_FACTOR  # NVLink 2: no rows
    assert extrapolation(resolve_device("rtx-5090"), 2)[1] == NO_P2P_LOG_FACTOR


# ------------------------------------------------------------------------------------------------ D4: NVL bridges


def test_nvl_bridges_join_pairs_and_quads_and_pcie_beyond():
    h100_nvl, h200_nvl = resolve_device("h100-nvl"), resolve_device("h200-nvl")
    assert (link(h100_nvl, 2).name, link(h100_nvl, 2).gbs) == ("NVLink 4 bridge", 300.0)
    assert link(h100_nvl, 4).gbs == 63.0 and link(h100_nvl, 4).name.startswith("PCIe 5.0 x16")
    # H200 NVL: a 2- or 4-way bridge at 900 GB/s per GPU (450 each way), PCIe Gen5 beyond
    assert (link(h200_nvl, 4).name, link(h200_nvl, 4).gbs) == ("NVLink 4 bridge", 450.0)
    assert link(h200_nvl, 8).gbs == 63.0
    assert link(resolve_device("h100-sxm"), 8).gbs == 450.0


def test_eight_h100_nvl_are_slower_than_eight_h100_sxm(llm):
    nvl = llm.predict(LLAMA2_70B, "h100-nvl", tp=8, batch=32, input_len=1024, output_len=128)
    sxm = llm.predict(LLAMA2_70B, "h100-sxm", tp=8, batch=32, input_len=1024, output_len=128)
    assert nvl.itl_ms > sxm.itl_ms and nvl.ttft_ms > sxm.ttft_ms
    assert any("over PCIe 5.0 x16, past the 2 GPUs an NVLink 4 bridge joins" in w for w in nvl.warnings)


# ------------------------------------------------------------------------------------------------ D3: groups, blocks


def test_quantisation_blocks_are_read():
    from lilou.llm.config import quantization_block

    assert quantization_block(QWEN3_235B_FP8["quantization_config"]) == 128
    assert quantization_block(QWEN25_72B_AWQ["quantization_config"]) == 128
    assert quantization_block({"quant_method": "gptq", "bits": 4, "group_size": -1}) == 0
    assert quantization_block({"quant_method": "fp8"}) == 0  # per tensor
    assert quantization_block({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "int", "group_size": 64}}}}) == 64


def test_a_tp_that_splits_a_quantisation_block_is_refused(llm, tmp_path):
    fp8 = _config(tmp_path, "qwen3-235b-a22b-fp8", QWEN3_235B_FP8)
    with pytest.raises(LilouInputError) as refused:
        llm.predict(fp8, "h100-sxm", tp=8, batch=32, input_len=4096, output_len=256)
    assert str(refused.value) == (
        "--tp 8: qwen3-235b-a22b-fp8's fp8 checkpoint quantises in groups of 128, and its expert width "
        "(moe_intermediate_size) 1536 / 8 = 192 per GPU is not a whole number of them, so vLLM cannot load it; use "
        "--tp 4 or expert parallelism (vLLM --enable-expert-parallel, not modelled by Lilou)")
    assert llm.predict(fp8, "h200", tp=4, batch=1, input_len=128, output_len=16).tp == 4  # 384 = 3 x 128
    # requantised by the engine (--dtype bf16 of the same config): no block to split
    assert llm.predict(fp8, "h100-sxm", tp=8, batch=1, input_len=128, output_len=16, dtype="bf16").tp == 8
    awq = _config(tmp_path, "qwen2.5-72b-awq", QWEN25_72B_AWQ)
    for tp in (2, 4, 8):
        with pytest.raises(LilouInputError, match=rf"intermediate_size 29568 / {tp} = .* use --tp 1$"):
            llm.predict(awq, "a100-sxm4-80gb", tp=tp, batch=1, input_len=128, output_len=16)
    padded = _config(tmp_path, "qwen2.5-72b-awq-padded", dict(QWEN25_72B_AWQ, intermediate_size=29696))
    assert llm.predict(padded, "a100-sxm4-80gb", tp=8, batch=1, input_len=128, output_len=16).tp == 8


def test_the_cli_refuses_a_split_block_in_one_line(tmp_path):
    fp8 = _config(tmp_path, "qwen3-235b-a22b-fp8", QWEN3_235B_FP8)
    done = subprocess.run([sys.executable, "-m", "lilou.cli", "llm", fp8, "--gpu", "h100-sxm", "--tp", "8",
                           "--input-len", "128", "--output-len", "16"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "use --tp 4" in lines[0]


# ------------------------------------------------------------------------------------------------ D6: HF has no TP


def test_hf_engine_refuses_tensor_parallelism(llm):
    with pytest.raises(LilouInputError, match=r"^--engine hf --tp 4: transformers has no tensor parallelism"):
        llm.predict(LLAMA3_70B, "a100-sxm4-80gb", tp=4, batch=8, input_len=1024, output_len=128, engine="hf")
    assert llm.predict(LLAMA3_70B, "a100-sxm4-80gb", tp=4, batch=8, input_len=1024, output_len=128).itl_ms


# ------------------------------------------------------------------------------------------------ D2, D8: context


@pytest.mark.parametrize("model,limit", [(LLAMA3_70B, 8192), (LLAMA2_70B, 4096),
                                         ("mistralai/Mixtral-8x7B-Instruct-v0.1", 32768),
                                         ("meta-llama/Llama-3.3-70B-Instruct", 131072),
                                         ("Qwen/Qwen3-32B", 40960)])
def test_built_in_context_limits_from_the_configs(model, limit):
    assert builtin_config(model).max_context == limit


def test_a_built_in_past_its_context_is_said(llm):
    result = llm.predict(LLAMA3_70B, "h100-sxm", tp=8, batch=1, input_len=32768, output_len=256)
    assert any(w.startswith(f"33024 tokens of context pass {LLAMA3_70B}'s 8192 (max_position_embeddings)")
               for w in result.warnings)


def test_a_built_in_without_a_known_limit_says_so(llm):
    assert builtin_config("lmsys/vicuna-7B").max_context == 0
    result = llm.predict("lmsys/vicuna-7B", "a100-sxm4-80gb", batch=1, input_len=1024, output_len=16)
    assert ("lmsys/vicuna-7B's context limit is not known to Lilou (no max_position_embeddings in its config or "
            "Lilou's table): 1040 tokens of context are priced as asked; check that the model takes them") \
        in result.warnings
    known = llm.predict(LLAMA3_70B, "h100-sxm", tp=8, batch=1, input_len=1024, output_len=16)
    assert not [w for w in known.warnings if "not known to Lilou" in w]


def test_the_transcribed_context_limits_are_in_the_table():
    sys.path.insert(0, "scripts")
    try:
        from build_llm_models import TRANSCRIBED_CONTEXT
    finally:
        sys.path.remove("scripts")
    assert {name: builtin_config(name).max_context for name in TRANSCRIBED_CONTEXT} == TRANSCRIBED_CONTEXT


def test_model_notes_are_said_when_it_does_not_fit(llm, tmp_path):
    model = _config(tmp_path, "llama-3.1-70b", LLAMA31_70B)
    result = llm.predict(model, "h100-sxm", tp=8, batch=32, input_len=131072, output_len=256)
    assert not result.memory.fits and result.itl_ms is None
    assert result.warnings[-1].startswith("does not fit on h100-sxm x 8 (TP)")  # last: the plan quotes it
    assert any(w.startswith("131328 tokens of context pass llama-3.1-70b's 131072") for w in result.warnings)


# ------------------------------------------------------------------------------------------------ N6


def test_one_output_token_says_there_is_no_decode_step(llm):
    result = llm.predict("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm", batch=4, input_len=1024, output_len=1)
    assert result.e2e_ms == result.ttft_ms
    assert any(w.startswith("output length 1: the request ends with its first token and has no decode step")
               for w in result.warnings)
    two = llm.predict("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm", batch=4, input_len=1024, output_len=2)
    assert not [w for w in two.warnings if w.startswith("output length 1")]


# ------------------------------------------------------------------------------------------------ N8


def test_replicated_kv_projections_count_whole_on_every_gpu():
    from lilou.llm.memory import GIB, memory_fit

    # Qwen3-30B-A3B: 48 layers, hidden 2048, 4 KV heads of 128; at TP 8 each GPU holds one KV head's K and V
    # projections (2 x 2048 x 128), not 4 / 8 of one
    config = builtin_config("Qwen/Qwen3-30B-A3B-Instruct-2507")
    fit = memory_fit(config, 80, dtype="bf16", kv_dtype="bf16", tp=8, engine="vllm", batch=1, input_len=128,
                     output_len=16)
    assert fit.weights_gb == pytest.approx((config.total_parameters * 2 / 8 + 48 * 2 * 2048 * 128 * 0.5 * 2) / GIB)
    at_4 = memory_fit(config, 80, dtype="bf16", kv_dtype="bf16", tp=4, engine="vllm", batch=1, input_len=128,
                      output_len=16)
    assert at_4.weights_gb == pytest.approx(config.total_parameters * 2 / 4 / GIB)  # 4 KV heads over 4: sharded
