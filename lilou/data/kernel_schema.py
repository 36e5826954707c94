"""The schema of the kernel-measurement table: one row per measured call, from every source.

Every trainer, benchmark and test reads measurements in this one shape (see
:mod:`lilou.data.kernel_table`). A row says what ran (``family``, ``op`` and the family's
shape fields), in which precision (``dtype``, ``quant``), on which GPU (``gpu``, the
database's canonical name, and the raw ``device`` string of the source), and how it was
timed (``timing``): the timing method is a property of the measurement, not of the GPU.
CUDA-graph replay and profiler kernel time carry no launch overhead; eager CUDA events,
``triton.testing.do_bench`` and host timer loops include the launch floor of short calls.

Shape fields are nullable integers shared between families; :data:`FAMILY_SHAPES` says
which ones each family fills and what they mean. A field a family does not use is null.
"""
from __future__ import annotations

from types import MappingProxyType

#: Precisions a row can be in. ``tf32`` is FP32 storage with TF32 tensor-core math; ``fp4``
#: covers NVFP4 / MXFP4 (``quant`` says which).
DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4", "fp4")

#: How a latency was timed, and whether that includes the host's launch of the call.
TIMING_METHODS = MappingProxyType({
    "cuda-events-eager": "CUDA events around eager PyTorch calls (includes the launch floor of short calls)",
    "cuda-graph-replay": "CUDA events around CUDA-graph replays (no launch overhead)",
    "profiler-kernel-time": "sum of the CUDA kernel durations recorded by torch.profiler (no launch overhead)",
    "host-timer-loop": "host clock around back-to-back library calls, divided by the count "
                       "(launch gaps count when the GPU outruns the host)",
    "triton-do-bench": "triton.testing.do_bench: eager calls, L2 cleared, CUDA events per call (includes the launch floor)",
})
#: Timing methods whose figures include the host's launch overhead.
TIMING_INCLUDES_LAUNCH = frozenset({"cuda-events-eager", "host-timer-loop", "triton-do-bench"})

#: Op families and the shape fields each one fills (all other shape fields are null).
FAMILY_SHAPES = MappingProxyType({
    # Y[batch, m, n] = X[batch, m, k] . W[batch, k, n]; k is the reduction. ``batch`` is 1 for a plain GEMM.
    "gemm": ("batch", "m", "n", "k"),
    "bmm": ("batch", "m", "n", "k"),
    # NCHW input [batch, in_c, in_h, in_w], filter [out_c, in_c/groups, kernel_h, kernel_w].
    "conv": ("batch", "in_c", "in_h", "in_w", "out_c", "kernel_h", "kernel_w", "stride_h", "stride_w",
             "pad_h", "pad_w", "groups"),
    # ``batch`` sequences of ``seq_len`` new tokens, no cached history; heads are per GPU.
    "attention-prefill": ("batch", "seq_len", "heads", "kv_heads", "head_dim", "window"),
    # ``batch`` sequences of one new token attending ``kv_len`` cached tokens (and itself).
    "attention-decode": ("batch", "kv_len", "heads", "kv_heads", "head_dim", "window"),
    # Other fused attention kernels (Liger's neighbourhood / multi-token attention): ``shape`` holds the config.
    "attention": ("batch", "seq_len", "heads", "head_dim"),
    # One GPU's fused MoE forward: ``tokens`` enter, ``experts`` held, each sliced to ``inter`` columns.
    "moe": ("tokens", "hidden", "inter", "topk", "experts", "tp", "ep"),
    # [rows, cols] tensors: activations, binary/scalar arithmetic, RoPE, SwiGLU (cols = the input width).
    "elementwise": ("rows", "cols"),
    # Norm over the last ``cols`` of [rows, cols] (LayerNorm, RMSNorm; GroupNorm: ``groups`` too).
    "norm": ("rows", "cols", "groups"),
    "softmax": ("rows", "cols"),
    "reduction": ("rows", "cols"),
    "pooling": ("batch", "in_c", "in_h", "in_w", "kernel_h", "kernel_w", "stride_h", "stride_w"),
    # A whole multi-timestep cuDNN RNN call (``op``: vanilla, lstm, gru).
    "rnn": ("batch", "hidden", "timesteps"),
    # A whole (gated) MLP layer: [rows, cols] tokens through ``inter``-wide projections and the activation.
    "mlp": ("rows", "cols", "inter"),
    # Lookup of ``rows`` token ids in a [vocab, cols] table.
    "embedding": ("rows", "cols", "vocab"),
    # Losses over [rows, vocab] logits (cross-entropy, JSD, fused linear losses): ``shape`` holds the config.
    "loss": ("rows", "cols", "vocab"),
})
FAMILIES = tuple(FAMILY_SHAPES)

SHAPE_FIELDS = ("batch", "m", "n", "k", "in_c", "in_h", "in_w", "out_c", "kernel_h", "kernel_w", "stride_h",
                "stride_w", "pad_h", "pad_w", "groups", "seq_len", "kv_len", "heads", "kv_heads", "head_dim",
                "window", "tokens", "hidden", "inter", "topk", "experts", "tp", "ep", "rows", "cols", "vocab",
                "timesteps")

#: Every column, in table order, with its DuckDB type and meaning.
COLUMNS = MappingProxyType({
    "source": ("VARCHAR", "dataset the row comes from (neusight, aiconfigurator, vidur, deepbench, liger_kernel; "
                          "lilou_profile: measured by `lilou profile ops`)"),
    "subset": ("VARCHAR", "the source's own split of its files (NeuSight train/test, DeepBench train/inference, "
                          "the AIConfigurator system, the Vidur model), null when it has none"),
    "gpu": ("VARCHAR", "canonical name in the GPU database (lilou gpus)"),
    "device": ("VARCHAR", "the device string as the source records it"),
    "dtype": ("VARCHAR", "precision of the math: one of DTYPES"),
    "quant": ("VARCHAR", "quantisation scheme for fp8/int8/int4/fp4 rows (e.g. fp8-per-tensor, fp8-block, nvfp4, "
                         "int8-weight-only, w8a8-smoothquant), or the source's precision label; else null"),
    "kv_dtype": ("VARCHAR", "KV-cache precision of attention rows"),
    "unit": ("VARCHAR", "the unit whose peak bounds the math, a key of the GPU database's peak_tflops (fp32, fp16, "
                        "int8 = DP4A, tf32_tensor, fp16_tensor, bf16_tensor, fp8_tensor, int8_tensor, fp4_tensor); "
                        "null where the source does not say or the family is memory-bound"),
    "family": ("VARCHAR", "op family: one of FAMILIES"),
    "op": ("VARCHAR", "the source's own op name (linear, bmm, add, rms_norm, attn_pre_proj, lstm ...)"),
    "mode": ("VARCHAR", "forward, backward, backward-data, backward-filter or full (forward + backward)"),
    "provider": ("VARCHAR", "the kernel or library that ran it where the source says (cuBLAS kernel, "
                            "kernel_source, Liger provider, cuDNN algorithm)"),
    **{name: ("BIGINT", "shape field, see FAMILY_SHAPES") for name in SHAPE_FIELDS},
    "layout": ("VARCHAR", "GEMM operand transposes (DeepBench: NN, NT, TN, TT)"),
    "distribution": ("VARCHAR", "MoE routing: balanced or power_law_<alpha>"),
    "bias": ("BOOLEAN", "the GEMM adds a bias in its epilogue (nn.Linear)"),
    "shape": ("VARCHAR", "the source's shape fields as JSON, for what the columns above do not hold"),
    "latency_ms": ("DOUBLE", "measured time of one call, milliseconds"),
    "latency_stat": ("VARCHAR", "which statistic of the repeats latency_ms is (mean, median, min ...)"),
    "timing": ("VARCHAR", "timing method: one of TIMING_METHODS"),
    "includes": ("VARCHAR", "what the time covers beyond the main kernel, where the source says"),
    "framework": ("VARCHAR", "framework or library and its version where known (PyTorch 2.1.0, vLLM 0.24.0 ...)"),
})
COLUMN_NAMES = tuple(COLUMNS)



def is_held_back(gpu: str) -> bool:
    """Rows on H100s and L4s are held back from every source for independent evaluation."""
    return gpu.startswith("h100") or gpu == "l4"
