"""Memory fit of an LLM serving configuration on one GPU (or MIG slice) of a tensor-parallel group.

Per GPU: weights / TP + KV cache + activation workspace, against the engine's budget:

- weights: every parameter (:meth:`LLMConfig.parameters`) at the weight dtype, divided by TP (vLLM shards
  the embedding and LM head over the vocabulary too; norms are replicated and negligible);
- KV cache: ``layers x 2 x KV heads per GPU x head dim x tokens x bytes``, tokens = batch x (input + output)
  (a sliding-window layer's at most batch x its window). With TP larger than the KV heads, vLLM replicates each
  KV head over ``TP / KV heads`` GPUs, so a GPU holds ``max(1, KV heads / TP)``. Multi-head latent attention
  caches one latent of ``kv_lora_rank + qk_rope_head_dim`` per token and layer instead, whole on every GPU;
- activation workspace: the largest step's live tensors (the widest of QKV, gate+up and the attention
  output, the residual stream twice) plus the FP32 logits of the sampled rows. vLLM sizes it in its
  profiling run with ``max_num_batched_tokens`` tokens (:data:`VLLM_MAX_BATCHED_TOKENS`); HF eager runs
  the whole prompt of the whole batch in one step.

Budget: vLLM keeps ``gpu_memory_utilization`` (0.9 by default) of the device for everything it allocates;
HF eager can use all of it but the CUDA context (:data:`CUDA_CONTEXT_GIB`). Sizes are GiB (2^30 bytes); the device's
is what a process sees on it (:attr:`lilou.hardware.Device.memory_gib`: nvidia-smi's total where a public printout
gives it, else the nominal size read as GiB).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from lilou.graph.memory import CUDA_CONTEXT_GIB
from lilou.llm.config import LLMConfig

GIB = 2**30
#: vLLM's default ``gpu_memory_utilization``.
VLLM_MEMORY_UTILIZATION = 0.9
#: Tokens per scheduler step with chunked prefill (vLLM's ``max_num_batched_tokens`` for online serving).
VLLM_MAX_BATCHED_TOKENS = 8192
#: Bytes per element of the weight / KV dtypes (INT4, FP4: two weights per byte).
ITEMSIZE = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5, "fp4": 0.5}
#: Quantised formats quantise the layers' linear weights only: the activations, the KV cache (by default), the
#: embedding and the LM head stay in this 16-bit type (AWQ's and GPTQ's checkpoints; ModelOpt's and
#: compressed-tensors' FP8, INT8 and NVFP4 ones list the LM head as ignored). With the bytes their groups add per
#: weight: AWQ and GPTQ keep an FP16 scale and a 4-bit zero point per 128 weights, NVFP4 an FP8 scale per 16 (FP8's
#: and INT8's per-tensor or per-channel scales are negligible).
QUANTISED = {"int4": "fp16", "fp4": "bf16", "fp8": "bf16", "int8": "bf16"}
GROUP_BYTES_PER_WEIGHT = {"int4": (2 + 0.5) / 128, "fp4": 1 / 16, "fp8": 0.0, "int8": 0.0}
#: The weight-only ones (AWQ, GPTQ): their GEMMs read 4-bit weights and the activations as they are, no cast.
WEIGHT_ONLY = frozenset({"int4"})


@dataclass(frozen=True)
class MemoryFit:
    weights_gb: float
    kv_cache_gb: float
    activations_gb: float
    total_gb: float
    device_gb: float     # the device's (or slice's) memory
    budget_gb: float     # what the engine may use of it
    fits: bool

    def to_json(self) -> dict[str, float | bool]:
        data = asdict(self)
        data.pop("budget_gb")
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in data.items()}


def kv_heads_per_gpu(config: LLMConfig, tp: int) -> int:
    return max(1, config.kv_heads // tp)


def replicated_attention_parameters(config: LLMConfig, tp: int) -> float:
    """Attention weights each GPU of a TP group holds beyond its 1 / ``tp`` share, because vLLM replicates them: the
    K and V projections of a KV head shared by ``tp / kv_heads`` GPUs (KV heads fewer than TP), and under multi-head
    latent attention the ReplicatedLinear down-projections to the query and KV latents (``q_a_proj``,
    ``kv_a_proj_with_mqa``). Before, every weight was divided by TP (DeepSeek-V3 FP8 at TP 8: about 0.8 GiB short)."""
    if tp <= 1:
        return 0.0
    h = config.hidden
    if config.mla:
        whole = h * config.q_lora_rank + h * config.latent_width
    elif config.kv_heads < tp:
        whole = 2 * h * config.head_dim  # one KV head's K and V projections on every GPU
    else:
        return 0.0
    share = whole / tp if config.mla else 2 * h * config.kv_width / tp
    return config.layers * (whole - share)


def weight_bytes(config: LLMConfig, dtype: str, tp: int) -> float:
    """Every weight at ``dtype`` on one GPU of ``tp``: its 1 / ``tp`` share plus the weights vLLM replicates
    (:func:`replicated_attention_parameters`); a quantised format (FP8, INT8, INT4, FP4) quantises the layers'
    linear weights only, the embedding, LM head and norms staying in 16 bits, as their checkpoints keep them."""
    replicated = replicated_attention_parameters(config, tp)
    if dtype not in QUANTISED:
        return config.total_parameters * ITEMSIZE[dtype] / tp + replicated * ITEMSIZE[dtype]
    parts = config.parameters()
    own = dtype == config.quantization  # the checkpoint's own format: its 16-bit parts and its scales' bytes
    attention_quantised = "attention" not in config.unquantised or not own
    linear = parts["attention"] * attention_quantised + parts["mlp"]
    other = config.total_parameters - linear
    scales = config.quantization_group_bytes if own and config.quantization_group_bytes is not None else \
        GROUP_BYTES_PER_WEIGHT[dtype]
    per_weight = ITEMSIZE[dtype] + scales
    attention_bytes = per_weight if attention_quantised else ITEMSIZE[QUANTISED[dtype]]
    return (linear * per_weight + other * ITEMSIZE[QUANTISED[dtype]]) / tp + replicated * attention_bytes


def kv_bytes_per_token(config: LLMConfig, kv_dtype: str, tp: int) -> float:
    """KV-cache bytes one token adds on one GPU, over every layer."""
    return config.layers * _layer_token_bytes(config, kv_dtype, tp)


def _layer_token_bytes(config: LLMConfig, kv_dtype: str, tp: int) -> int:
    """What one token adds to one layer's cache on one GPU: a key and a value per KV head of the GPU, or under
    multi-head latent attention one latent, the same on every GPU of the group (vLLM keeps it whole on each)."""
    if config.mla:
        return config.latent_width * ITEMSIZE[kv_dtype]
    return 2 * kv_heads_per_gpu(config, tp) * config.head_dim * ITEMSIZE[kv_dtype]


def kv_cache_bytes(config: LLMConfig, kv_dtype: str, tp: int, batch: int, context: int) -> float:
    """KV-cache bytes of ``batch`` sequences of ``context`` tokens on one GPU: a sliding-window layer keeps at most
    its window (vLLM's hybrid KV-cache manager, transformers' sliding-window caches), the others every token."""
    local = config.windowed_layers
    per_layer_token = _layer_token_bytes(config, kv_dtype, tp)
    tokens = (config.layers - local) * context + local * min(context, config.sliding_window or context)
    return per_layer_token * batch * tokens


def step_tokens(engine: str, batch: int, input_len: int) -> int:
    """Tokens in the largest step: the whole batch's prompts (HF), or vLLM's chunk budget."""
    tokens = batch * input_len
    return min(tokens, max(VLLM_MAX_BATCHED_TOKENS, batch)) if engine == "vllm" else tokens


def activation_bytes(config: LLMConfig, dtype: str, tp: int, engine: str, batch: int, input_len: int) -> float:
    tokens = step_tokens(engine, batch, input_len)
    width = config.moe and config.experts_per_token * config.expert_width or config.intermediate
    if config.mla:  # queries and the expanded keys and values of a prefill
        widest = max(config.q_width / tp + config.latent_width,
                     config.heads * (config.head_dim - config.qk_rope_head_dim + config.v_head_dim) / tp, 2 * width / tp)
    else:
        widest = max((config.q_width + 2 * config.kv_width) / tp, 2 * width / tp, config.q_width / tp)
    per_token = (widest + 2 * config.hidden) * ITEMSIZE[QUANTISED.get(dtype, dtype)]
    logits = batch * config.vocab / tp * 4  # FP32 logits of the sampled rows (one per sequence)
    return tokens * per_token + logits


def budget_bytes(device_gb: float, engine: str) -> float:
    if engine == "vllm":
        return VLLM_MEMORY_UTILIZATION * device_gb * GIB
    return (device_gb - CUDA_CONTEXT_GIB) * GIB


def memory_fit(config: LLMConfig, device_gb: float, *, dtype: str, kv_dtype: str, tp: int, engine: str,
               batch: int, input_len: int, output_len: int) -> MemoryFit:
    weights = weight_bytes(config, dtype, tp)
    kv = kv_cache_bytes(config, kv_dtype, tp, batch, input_len + output_len)
    activations = activation_bytes(config, dtype, tp, engine, batch, input_len)
    total = weights + kv + activations
    budget = budget_bytes(device_gb, engine)
    return MemoryFit(weights_gb=weights / GIB, kv_cache_gb=kv / GIB, activations_gb=activations / GIB,
                     total_gb=total / GIB, device_gb=float(device_gb), budget_gb=budget / GIB, fits=total <= budget)


def max_batch_fitting(config: LLMConfig, device_gb: float, *, dtype: str, kv_dtype: str, tp: int, engine: str,
                      input_len: int, output_len: int, limit: int = 1 << 20) -> int:
    """The largest batch whose memory fits (0 when not even one sequence does); the need grows with the batch,
    so a bisection finds it."""
    def fits(batch: int) -> bool:
        return memory_fit(config, device_gb, dtype=dtype, kv_dtype=kv_dtype, tp=tp, engine=engine, batch=batch,
                          input_len=input_len, output_len=output_len).fits

    if not fits(1):
        return 0
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    if high > limit:
        return limit
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low
