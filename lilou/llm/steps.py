"""One prefill or decode step of a decoder LLM as the kernels it launches, each built from ONNX-like nodes.

Every kernel is a list of :class:`lilou.graph.costs.CostInput` nodes with tensors of the step's dtype (an FP8
model: FP8 weights, BF16 activations cast to FP8 inside each GEMM, as vLLM's W8A8 Linear layers and the
measured rows run), described by :func:`lilou.latency.kernel_model.kernel.describe_kernel` exactly as a kernel
group of an ONNX graph (or a measured row, ``lilou.latency.kernel_model.table_kernels.row_nodes``) is, so the
Predictor's kernel model prices them unchanged.

Per layer (shapes per GPU of a tensor-parallel group of ``tp``): input norm, QKV projection, RoPE, KV-cache
write, attention, output projection, residual + post-attention norm, MLP (gate/up, activation, down; routed
experts as a grouped GEMM over the experts the step's tokens reach), residual. Then the final norm, the LM head
over one row per sequence, and sampling. The engine decides the launches:

- ``vllm``: fused add + RMSNorm, one rotary kernel, ``reshape_and_cache``, merged gate+up GEMM, SiLU-and-mul;
- ``hf`` (transformers eager): RMSNorm as its separate elementwise kernels, rotate-half RoPE, ``torch.cat`` of
  the whole KV cache each step (DynamicCache), separate gate and up GEMMs and activation kernels, a MoE layer's
  experts as transformers 5.25 dispatches them (:func:`_hf_experts`).

Attention has no family in the kernel model, so it is priced as what a flash-attention kernel computes: the two
batched GEMMs (Q.K^T and P.V) and the softmax between them in one kernel, reading Q, K and V once and writing
O (the score matrix stays on chip). Grouped-query attention packs the ``heads / kv_heads`` query heads of one
KV head as rows, as the decode kernels do. A causal prefill does the lower triangle: each query attends
``(I + 1) / 2`` keys on average. Decode reads the whole KV cache: a memory-bound kernel. A model's
sliding-window layers (Gemma 2 and 3, Mistral v0.1, gpt-oss) are their own attention kernel, whose queries attend
at most the window. Each attention kernel
carries its shape, so that :mod:`lilou.llm.attention` can correct its price to what vLLM's kernels measure.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from lilou.graph.costs import CostInput, TensorInfo
from lilou.latency.kernel_model.kernel import KernelSpec, describe_kernel
from lilou.llm.attention import AttentionShape
from lilou.llm.config import LLMConfig
from lilou.llm.memory import ITEMSIZE, QUANTISED, WEIGHT_ONLY, kv_heads_per_gpu

_ONNX_TYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8": "float8e4m3fn", "int8": "int8",
              "int4": "int4", "fp4": "float4_e2m1fn"}


@dataclass(frozen=True)
class StepKernel:
    """One kernel of a step, launched ``count`` times per step (once per layer for layer kernels)."""

    name: str
    spec: KernelSpec
    count: int
    fixed_bytes: int      # bytes read from weights (batch-invariant: the size ladder keeps them fixed)
    layer: bool           # part of the per-layer sequence (else: once per step, before/after the layers)
    order: int            # position in the layer (or in the head / tail)
    attention: AttentionShape | None = None  # the attention kernel's shape (lilou.llm.attention corrects its price)
    causal: bool = False


@dataclass(frozen=True)
class StepShape:
    """What one step processes: ``seqs`` sequences of ``q_len`` new tokens over ``kv_len`` keys each, plus (a
    chunked-prefill step of a server in steady state) ``prefill_tokens`` prompt tokens of prompts of
    ``prefill_len`` tokens that ride in the same forward pass."""

    seqs: int
    q_len: int
    kv_len: int
    causal: bool          # a prefill (lower-triangle attention)
    prefill_tokens: int = 0
    prefill_len: int = 0

    @property
    def tokens(self) -> int:
        return self.seqs * self.q_len + self.prefill_tokens


class _Builder:
    """Tensors of a step: activations in ``dtype`` (BF16 for an FP8 model), weights in ``weight_dtype``."""

    def __init__(self, dtype: str, kv_dtype: str, weight_only: bool = False) -> None:
        self.weight_dtype, self.kv_dtype = dtype, kv_dtype
        # weight-only (W8A16 FP8-Marlin on a GPU without FP8 tensor cores): the GEMMs read the 8-bit weights and
        # the 16-bit activations as they are, no cast, as the INT4 (AWQ/GPTQ) kernels do
        self.weight_only = weight_only or dtype in WEIGHT_ONLY
        self.attention_weight_dtype = dtype  # the attention projections' weights (16-bit where the checkpoint keeps them)
        # a quantised model's activations stay 16-bit (lilou.llm.memory.QUANTISED), and so do its LM head's weights
        self.dtype = QUANTISED.get(dtype, dtype)
        self.count = 0

    def t(self, shape, dtype: str | None = None) -> TensorInfo:
        self.count += 1
        dtype = dtype or self.dtype
        # 4-bit tensors are sized by their type (TensorInfo.nbytes); itemsize stays a whole byte for them
        return TensorInfo(f"t{self.count}", tuple(int(d) for d in shape), _ONNX_TYPE[dtype],
                          max(1, int(ITEMSIZE[dtype])))


def _gemm(b: _Builder, m: int, k: int, n: int, experts: int = 1, weight_dtype: str | None = None
          ) -> tuple[list[CostInput], int]:
    """Y[m, n] = X[m, k] . W[k, n] (``experts`` independent weights: a grouped GEMM), and its weight bytes."""
    weight_dtype = weight_dtype or b.weight_dtype
    x_shape = (experts, m, k) if experts > 1 else (m, k)
    x, w = b.t(x_shape), b.t((experts, k, n) if experts > 1 else (k, n), weight_dtype)
    y = b.t((experts, m, n) if experts > 1 else (m, n))
    nodes = []
    if weight_dtype != b.dtype and not b.weight_only:  # W8A8, W4A4: activations cast to the weights' type
        quantised = b.t(x_shape, weight_dtype)
        nodes.append(CostInput("Cast", {}, [x], [quantised]))
        x = quantised
    nodes.append(CostInput("MatMul", {}, [x, w], [y]))
    return nodes, int(w.nbytes)


def _elementwise(b: _Builder, op: str, rows: int, cols: int, inputs: int = 2) -> list[CostInput]:
    x = b.t((rows, cols))
    others = [b.t((rows, cols)) for _ in range(inputs - 1)]
    return [CostInput(op, {}, [x, *others], [b.t((rows, cols))])]


def _norm(b: _Builder, rows: int, cols: int, residual: bool) -> tuple[list[CostInput], set[str]]:
    """(Fused add +) norm over the last ``cols``; RMSNorm is priced as the norm family, like LayerNorm."""
    x = b.t((rows, cols))
    nodes, external = [], set()
    if residual:
        s = b.t((rows, cols))
        nodes.append(CostInput("Add", {}, [x, b.t((rows, cols))], [s]))
        external.add(s.name)
        x = s
    y = b.t((rows, cols))
    nodes.append(CostInput("LayerNormalization", {"axis": -1}, [x, b.t((cols,)), b.t((cols,))], [y]))
    external.add(y.name)
    return nodes, external


def attended_keys(kv_len: int, causal: bool, window: int = 0) -> int:
    """Keys one query attends on average: all ``kv_len`` (decode), the lower triangle's ``(kv_len + 1) / 2`` (a causal
    prefill), each at most ``window`` in a sliding-window layer (query ``i`` of a prefill attends ``min(i + 1, W)``)."""
    if not causal:
        return min(kv_len, window) if window else kv_len
    if not window or kv_len <= window:
        return math.ceil((kv_len + 1) / 2)
    return math.ceil((window * (window + 1) / 2 + (kv_len - window) * window) / kv_len)


def attention_reach(kv_len: int, causal: bool, window: int = 0) -> int:
    """The KV length of a window-free kernel whose queries attend as many keys on average as these do: what the
    attention correction (:mod:`lilou.llm.attention`, fitted on window-free kernels) reads as the KV length."""
    if not window or kv_len <= window:
        return kv_len
    return min(kv_len, 2 * attended_keys(kv_len, causal, window) - 1) if causal else window


def attention_nodes(b: _Builder, seqs: int, q_len: int, kv_len: int, heads: int, kv_heads: int, head_dim: int,
                    causal: bool, window: int = 0, v_dim: int | None = None) -> list[CostInput]:
    """The fused attention kernel: Q.K^T, softmax, P.V over ``kv_heads`` groups of ``heads / kv_heads`` query
    heads (see the module docstring); ``window``: a sliding-window layer's; ``v_dim``: a value head other than the
    query/key head (multi-head latent attention)."""
    group = max(1, heads // kv_heads)
    batch = seqs * kv_heads
    keys = attended_keys(kv_len, causal, window)
    rows = group * q_len
    v_dim = v_dim or head_dim
    q = b.t((batch, rows, head_dim))
    k = b.t((batch, head_dim, keys), b.kv_dtype)
    v = b.t((batch, keys, v_dim), b.kv_dtype)
    scores, probs = b.t((batch, rows, keys), "fp32"), b.t((batch, rows, keys), "fp32")
    out = b.t((batch, rows, v_dim))
    return [CostInput("MatMul", {}, [q, k], [scores]), CostInput("Softmax", {"axis": -1}, [scores], [probs]),
            CostInput("MatMul", {}, [probs, v], [out])]


def attention_kernel(shape: StepShape, heads: int, kv_heads: int, head_dim: int, dtype: str,
                     kv_dtype: str) -> KernelSpec:
    """The attention kernel of a step (also used to check it against measured attention rows)."""
    b = _Builder(dtype, kv_dtype)
    nodes = attention_nodes(b, shape.seqs, shape.q_len, shape.kv_len, heads, kv_heads, head_dim, shape.causal)
    return describe_kernel(nodes, external_outputs={nodes[-1].outputs[0].name})


def _expected_experts(experts: int, top_k: int, tokens: int) -> float:
    """Distinct experts ``tokens`` reach when each picks ``top_k`` of ``experts`` uniformly."""
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


@functools.lru_cache(maxsize=256)
def remembered_step_kernels(config: LLMConfig, shape: StepShape, *, dtype: str, kv_dtype: str, tp: int,
                            engine: str, weight_only: bool = False, moe_loop: bool = False) -> tuple[StepKernel, ...]:
    """:func:`step_kernels`, remembered (a step's kernels do not depend on the GPU: a plan asks for the same steps
    on every device, 115 times). Immutable, so callers share it."""
    return tuple(step_kernels(config, shape, dtype=dtype, kv_dtype=kv_dtype, tp=tp, engine=engine,
                              weight_only=weight_only, moe_loop=moe_loop))


def step_kernels(config: LLMConfig, shape: StepShape, *, dtype: str, kv_dtype: str, tp: int,
                 engine: str, weight_only: bool = False, moe_loop: bool = False) -> list[StepKernel]:
    """The kernels of one step (see the module docstring), per GPU of the tensor-parallel group. ``weight_only``: an
    8-bit ``dtype`` served weight-only (W8A16: FP8 on a GPU without FP8 tensor cores), its GEMMs without a cast.
    ``moe_loop`` (``hf``): transformers' grouped GEMM of the experts falls back to one GEMM per expert hit (a GPU
    below compute capability 8.0, :func:`_hf_experts`)."""
    b = _Builder(dtype, kv_dtype, weight_only)
    if dtype == config.quantization and "attention" in config.unquantised:
        b.attention_weight_dtype = b.dtype  # gpt-oss: attention kept in 16 bits (modules_to_not_convert)
    h, d = config.hidden, config.head_dim
    heads, kv_heads = config.heads // tp, kv_heads_per_gpu(config, tp)
    tokens, seqs = shape.tokens, shape.seqs
    hf = engine == "hf"
    kernels: list[StepKernel] = []

    def add(name: str, nodes: list[CostInput], *, fixed: int = 0, layer: bool = True, count: int | None = None,
            external: set[str] | None = None, attention: AttentionShape | None = None,
            causal: bool | None = None) -> None:
        if count == 0:
            return  # no layer of this kind (a MoE model whose every layer is dense, say)
        spec = describe_kernel(nodes, external_outputs=external)
        kernels.append(StepKernel(name, spec, config.layers if count is None and layer else (count or 1),
                                  fixed, layer, len(kernels), attention,
                                  shape.causal if causal is None else causal))

    def norm(name: str, residual: bool) -> None:
        if hf and config.norm == "rmsnorm":
            # LlamaRMSNorm in eager: to fp32, pow, mean, add eps, rsqrt, mul, back to dtype, mul by weight
            if residual:
                add(f"{name}.residual", _elementwise(b, "Add", tokens, h))
            for op in ("Cast", "Pow", "Mul", "Add", "Sqrt", "Mul", "Cast", "Mul"):
                add(f"{name}.{op.lower()}", _elementwise(b, op, tokens, h, 1 if op in ("Cast", "Sqrt") else 2))
            add(f"{name}.mean", [CostInput("ReduceMean", {"axes": [-1]}, [b.t((tokens, h))], [b.t((tokens, 1))])])
            return
        if hf and residual:
            add(f"{name}.residual", _elementwise(b, "Add", tokens, h))
        nodes, external = _norm(b, tokens, h, residual and not hf)
        add(name, nodes, external=external)

    # ---------------------------------------------------------------- attention block
    norm("input_norm", residual=True)
    if config.mla:
        _latent_attention(b, add, config, shape, heads)
    else:
        _attention(b, add, config, shape, heads, kv_heads, hf)
    nodes, fixed = _gemm(b, tokens, heads * (config.v_head_dim if config.mla else d), h,
                         weight_dtype=b.attention_weight_dtype)
    add("o_proj", nodes, fixed=fixed)
    # ---------------------------------------------------------------- MLP block
    norm("post_attention_norm", residual=True)
    if config.moe:
        moe = config.moe_layers
        nodes, fixed = _gemm(b, tokens, h, config.experts)
        add("router", nodes, fixed=fixed, count=moe)
        add("router_topk", [CostInput("Softmax", {"axis": -1}, [b.t((tokens, config.experts), "fp32")],
                                      [b.t((tokens, config.experts), "fp32")])], count=moe)
        active = max(1, round(_expected_experts(config.experts, config.experts_per_token, tokens)))
        rows = max(1, math.ceil(tokens * config.experts_per_token / active))
        width = config.expert_width // tp
        mats = 2 if config.gated_mlp else 1
        if hf:
            _hf_experts(b, add, tokens, h, config.experts, config.experts_per_token, active, rows, width, mats,
                        moe, moe_loop)
        else:
            nodes, fixed = _gemm(b, rows, h, mats * width, experts=active)
            add("experts_up", nodes, fixed=fixed, count=moe)
            add("experts_act", _elementwise(b, "Mul", tokens * config.experts_per_token, width), count=moe)
            nodes, fixed = _gemm(b, rows, width, h, experts=active)
            add("experts_down", nodes, fixed=fixed, count=moe)
        if config.shared_expert_intermediate:
            _mlp(b, add, tokens, h, config.shared_expert_intermediate // tp, config.gated_mlp, hf, "shared", moe)
        if config.layers > moe:  # the dense first layers (first_k_dense_replace)
            _mlp(b, add, tokens, h, config.intermediate // tp, config.gated_mlp, hf, "mlp", config.layers - moe)
    else:
        _mlp(b, add, tokens, h, config.intermediate // tp, config.gated_mlp, hf, "mlp")
    if hf:
        add("mlp.residual", _elementwise(b, "Add", tokens, h))
    # ---------------------------------------------------------------- once per step
    table, ids = b.t((config.vocab, h)), b.t((tokens,), "fp32")
    add("embedding", [CostInput("Gather", {}, [table, ids], [b.t((tokens, h))])], layer=False)
    nodes, external = _norm(b, seqs, h, False)
    add("final_norm", nodes, layer=False, external=external)
    nodes, fixed = _gemm(b, seqs, h, config.vocab // tp, weight_dtype=b.dtype)
    add("lm_head", nodes, fixed=fixed, layer=False)
    add("sampling", [CostInput("Softmax", {"axis": -1}, [b.t((seqs, config.vocab), "fp32")],
                               [b.t((seqs, config.vocab), "fp32")])], layer=False)
    return kernels


def _attention(b: _Builder, add, config: LLMConfig, shape: StepShape, heads: int, kv_heads: int, hf: bool) -> None:
    """QKV projection, RoPE, the KV-cache write (vLLM) or concat (HF) and the attention kernels of one layer."""
    d, tokens, seqs, kv_dtype = config.head_dim, shape.tokens, shape.seqs, b.kv_dtype
    q_w, kv_w = heads * d, kv_heads * d
    nodes, fixed = _gemm(b, tokens, config.hidden, q_w + 2 * kv_w, weight_dtype=b.attention_weight_dtype)
    add("qkv_proj", nodes, fixed=fixed)
    if hf:
        for i in range(5):  # rotate_half: slice, neg, cat, mul, add, for q and k
            add(f"rope.{i}", _elementwise(b, "Mul", tokens, q_w + kv_w))
        # DynamicCache: torch.cat copies the whole cache of K and of V every step; a sliding-window layer's cache
        # (DynamicSlidingWindowLayer) keeps the last window - 1 tokens, so its cat copies at most those
        past_len, local = max(shape.kv_len - shape.q_len, 0), config.windowed_layers
        for suffix, kept, count in (("", past_len, config.layers - local),
                                    ("_window", min(past_len, max(config.sliding_window - 1, 0)), local)):
            past = seqs * kv_heads * kept * d
            if past and count > 0:
                add(f"kv_cache_cat{suffix}", [CostInput("Concat", {"axis": 0}, [b.t((past,), kv_dtype),
                                                                                b.t((tokens * kv_w,), kv_dtype)],
                                                        [b.t((past + tokens * kv_w,), kv_dtype)])], count=2 * count)
    else:
        add("rope", _elementwise(b, "Mul", tokens, q_w + kv_w))
        add("kv_cache_write", [CostInput("Cast", {}, [b.t((tokens, 2 * kv_w))],
                                         [b.t((tokens, 2 * kv_w), kv_dtype)])])
    _attention_kernels(b, add, config, shape, heads, kv_heads)


def _attention_kernels(b: _Builder, add, config: LLMConfig, shape: StepShape, heads: int, kv_heads: int) -> None:
    """The attention kernels of one layer: global, and sliding-window ones where the model has them."""
    d, seqs = config.head_dim, shape.seqs
    # global layers attend over the whole context, sliding-window layers over at most their window
    local = config.windowed_layers
    for suffix, window, count in (("", 0, config.layers - local), ("_window", config.sliding_window, local)):
        if count <= 0:
            continue
        reach = attention_reach(shape.kv_len, shape.causal, window)
        add(f"attention{suffix}", attention_nodes(b, seqs, shape.q_len, shape.kv_len, heads, kv_heads, d, shape.causal,
                                                  window), count=count,
            attention=AttentionShape(seqs, shape.q_len, reach, heads, kv_heads, d))
        if shape.prefill_tokens:  # the prompt chunks of the step: each token attends half its prompt on average
            p, length = shape.prefill_tokens, shape.prefill_len
            add(f"attention_prefill{suffix}", attention_nodes(b, 1, p, length, heads, kv_heads, d, True, window),
                count=count, attention=AttentionShape(1, p, attention_reach(length, True, window), heads, kv_heads, d),
                causal=True)


def _latent_attention(b: _Builder, add, config: LLMConfig, shape: StepShape, heads: int) -> None:
    """Multi-head latent attention as vLLM runs it (DeepSeek-V2/V3): queries through their low-rank projection, the
    latent and rotary key from one projection of the hidden state (not split over the TP group), written to the
    cache. A prefill expands keys and values from the latent (``kv_b``) and attends as multi-head attention with
    a ``qk_nope + qk_rope`` key and a ``v_head_dim`` value; a decode folds ``kv_b`` into the query and the output
    (two batched GEMMs per head) and attends over the cached latents directly: every query head of the GPU against
    one latent head of ``kv_lora_rank + qk_rope_head_dim`` keys and ``kv_lora_rank`` values."""
    h, d, rope, latent = config.hidden, config.head_dim, config.qk_rope_head_dim, config.kv_lora_rank
    nope, v_dim, tokens, seqs = d - rope, config.v_head_dim, shape.tokens, shape.seqs
    if config.q_lora_rank:
        nodes, fixed = _gemm(b, tokens, h, config.q_lora_rank, weight_dtype=b.attention_weight_dtype)
        add("q_a_proj", nodes, fixed=fixed)
        nodes, external = _norm(b, tokens, config.q_lora_rank, False)
        add("q_a_norm", nodes, external=external)
        nodes, fixed = _gemm(b, tokens, config.q_lora_rank, heads * d, weight_dtype=b.attention_weight_dtype)
        add("q_b_proj", nodes, fixed=fixed)
    else:
        nodes, fixed = _gemm(b, tokens, h, heads * d, weight_dtype=b.attention_weight_dtype)
        add("q_proj", nodes, fixed=fixed)
    nodes, fixed = _gemm(b, tokens, h, config.latent_width, weight_dtype=b.attention_weight_dtype)
    add("kv_a_proj", nodes, fixed=fixed)
    nodes, external = _norm(b, tokens, latent, False)
    add("kv_a_norm", nodes, external=external)
    add("rope", _elementwise(b, "Mul", tokens, heads * rope + rope))
    add("kv_cache_write", [CostInput("Cast", {}, [b.t((tokens, config.latent_width))],
                                     [b.t((tokens, config.latent_width), b.kv_dtype)])])

    def expanded(name: str, rows: int, queries: int, length: int) -> None:
        """Keys and values expanded from the latent, then multi-head attention (a prefill, or a step's prompt)."""
        nodes, fixed = _gemm(b, rows, latent, heads * (nope + v_dim), weight_dtype=b.attention_weight_dtype)
        add(f"kv_b_proj{name}", nodes, fixed=fixed)
        add(f"attention{name}", attention_nodes(b, 1 if name else seqs, queries, length, heads, heads, d, True,
                                                v_dim=v_dim), causal=True,
            attention=AttentionShape(1 if name else seqs, queries, length, heads, heads, d))

    if shape.causal:
        expanded("", tokens, shape.q_len, shape.kv_len)
    else:
        decodes = seqs * shape.q_len
        nodes, fixed = _gemm(b, decodes, nope, latent, experts=heads, weight_dtype=b.attention_weight_dtype)
        add("q_absorb", nodes, fixed=fixed)
        add("attention", attention_nodes(b, seqs, shape.q_len, shape.kv_len, heads, 1, config.latent_width, False,
                                         v_dim=latent),
            attention=AttentionShape(seqs, shape.q_len, shape.kv_len, heads, 1, config.latent_width))
        nodes, fixed = _gemm(b, decodes, latent, v_dim, experts=heads, weight_dtype=b.attention_weight_dtype)
        add("out_absorb", nodes, fixed=fixed)
    if shape.prefill_tokens:  # a steady-state step's prompt chunk
        expanded("_prefill", shape.prefill_tokens, shape.prefill_tokens, shape.prefill_len)


#: transformers' expert implementation that ``hf`` prices: ``transformers.integrations.moe.grouped_mm_experts_forward``,
#: the default ``experts_implementation`` ("grouped_mm") of the ``@use_experts_implementation`` experts of Mixtral,
#: Qwen2-MoE, Qwen3-MoE ... in transformers 5.x (read in 5.25: ``modeling_utils.get_correct_experts_implementation``).
HF_EXPERTS_SOURCE = "transformers 5.25's grouped_mm_experts_forward"


def _hf_experts(b: _Builder, add, tokens: int, h: int, experts: int, top_k: int, active: int, rows: int, width: int,
                mats: int, moe: int, loop: bool) -> None:
    """The routed experts of one MoE layer as transformers 5.25 runs them eagerly (:data:`HF_EXPERTS_SOURCE`), after
    the router's GEMM and softmax: the router's ``topk`` and renormalisation (``MixtralTopKRouter`` /
    ``Qwen3MoeTopKRouter``: sum, divide, cast), then over the ``S = tokens x top_k`` token-expert pairs: ``torch.sort``
    of the expert ids, ``perm // top_k``, the gathers of the hidden states and routing weights, ``torch.histc`` and
    ``cumsum`` (the offsets), the gate/up grouped GEMM over the experts hit (``rows`` each), the activation and the
    gate multiply (``_default_apply_gate``), the down grouped GEMM, the routing-weight multiply, the inverse
    permutation (``arange``, scatter), its gather, the sum over top-k and the cast back: 18 launches besides the
    router. ``torch.nn.functional.grouped_mm`` needs compute capability 8.0 (``_can_use_grouped_mm``); below it
    (``loop``) each grouped GEMM is ``_grouped_mm_fallback``: a zeroed output and one ``torch.mm`` per expert hit,
    each at ``rows`` tokens. transformers 4.x (and ``experts_implementation="eager"``) loops in Python over the experts
    hit with about nine launches each (``torch.where``, gather, gate, up, act, mul, down, weight, ``index_add_``);
    that is not what is priced."""
    pairs = tokens * top_k

    def small(name: str, op: str, n: int, cols: int = 1, inputs: int = 1, dtype: str = "fp32") -> None:
        add(name, [CostInput(op, {}, [b.t((n, cols), dtype) for _ in range(inputs)], [b.t((n, cols), dtype)])],
            count=moe)

    small("router_topk_select", "TopK", tokens, experts)
    small("router_renorm_sum", "ReduceSum", tokens, top_k)
    small("router_renorm_div", "Div", tokens, top_k, 2)
    small("router_cast", "Cast", tokens, top_k)
    small("experts_sort", "Sort", pairs)
    small("experts_perm_div", "Div", pairs, 1, 2)
    add("experts_gather", [CostInput("Gather", {}, [b.t((tokens, h)), b.t((pairs,), "fp32")], [b.t((pairs, h))])],
        count=moe)
    small("experts_weight_gather", "Gather", pairs, 1, 2)
    small("experts_histc", "Histogram", pairs)
    small("experts_cumsum", "CumSum", experts)

    def grouped(name: str, m: int, k: int, n: int) -> None:
        if loop:  # _grouped_mm_fallback: torch.zeros, then one torch.mm per expert hit
            add(f"{name}_zeros", _elementwise(b, "Mul", pairs, n, 1), count=moe)
            nodes, fixed = _gemm(b, m, k, n)
            add(name, nodes, fixed=fixed, count=moe * active)
        else:
            nodes, fixed = _gemm(b, m, k, n, experts=active)
            add(name, nodes, fixed=fixed, count=moe)

    grouped("experts_up", rows, h, mats * width)
    add("experts_act", _elementwise(b, "Sigmoid", pairs, width, 1), count=moe)
    add("experts_gate_mul", _elementwise(b, "Mul", pairs, width), count=moe)
    grouped("experts_down", rows, width, h)
    add("experts_weight_mul", _elementwise(b, "Mul", pairs, h), count=moe)
    small("experts_arange", "Range", pairs)
    small("experts_inverse_scatter", "ScatterElements", pairs, 1, 2)
    add("experts_unpermute", [CostInput("Gather", {}, [b.t((pairs, h)), b.t((pairs,), "fp32")], [b.t((pairs, h))])],
        count=moe)
    add("experts_sum", [CostInput("ReduceSum", {"axes": [1]}, [b.t((tokens, top_k, h))], [b.t((tokens, h))])],
        count=moe)
    add("experts_cast", _elementwise(b, "Cast", tokens, h, 1), count=moe)


def _mlp(b: _Builder, add, tokens: int, h: int, width: int, gated: bool, hf: bool, name: str,
         count: int | None = None) -> None:
    """A dense MLP (gate + up or up, activation, down), in ``count`` layers (default: every layer)."""
    if gated and hf:
        for part in ("gate", "up"):
            nodes, fixed = _gemm(b, tokens, h, width)
            add(f"{name}.{part}_proj", nodes, fixed=fixed, count=count)
        add(f"{name}.act", _elementwise(b, "Sigmoid", tokens, width, 1), count=count)
        add(f"{name}.act_mul", _elementwise(b, "Mul", tokens, width), count=count)
        add(f"{name}.gate_mul", _elementwise(b, "Mul", tokens, width), count=count)
    elif gated:
        nodes, fixed = _gemm(b, tokens, h, 2 * width)
        add(f"{name}.gate_up_proj", nodes, fixed=fixed, count=count)
        x = b.t((tokens, 2 * width))
        add(f"{name}.act", [CostInput("Mul", {}, [x], [b.t((tokens, width))])], count=count)  # SiLU-and-mul
    else:
        nodes, fixed = _gemm(b, tokens, h, width)
        add(f"{name}.up_proj", nodes, fixed=fixed, count=count)
        add(f"{name}.act", _elementwise(b, "Gelu", tokens, width, 1), count=count)
    nodes, fixed = _gemm(b, tokens, width, h)
    add(f"{name}.down_proj", nodes, fixed=fixed, count=count)
