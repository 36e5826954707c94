"""``LLMPredictor``: time to first token, inter-token latency, throughput, power and memory fit of a decoder LLM
served on one GPU, a MIG slice or a tensor-parallel group.

>>> from lilou.llm import LLMPredictor
>>> p = LLMPredictor()                                                  # doctest: +SKIP
>>> r = p.predict("Llama-3.1-8B-Instruct", "a100-80gb", batch=16, input_len=1024, output_len=256)  # doctest: +SKIP
>>> r.itl_ms, r.memory.fits, r.to_json()["intervals"]                   # doctest: +SKIP

Each prefill and decode step is the list of kernels of :mod:`lilou.llm.steps`, priced in one batched call by the
Predictor's own kernel-model path (:meth:`lilou.latency.composition.end_to_end.EndToEndModel.kernel_work`, with the dtype's
precision path), so a precision-aware kernel model loaded by the Predictor prices them without change. The
engine decides how kernel times add up: vLLM replays decode steps as CUDA graphs (kernel times back to back, no
launch gap); its prefill and every HF eager step go through the launch queue of
:mod:`lilou.latency.composition.overhead` (an HF decode step at a fitted host time per launch, :class:`Calibration`).
For vLLM, each attention kernel's price is corrected to what vLLM's measured
attention kernels take (:mod:`lilou.llm.attention`). Tensor parallelism adds two all-reduces per layer
(:mod:`lilou.llm.interconnect`). ITL is the mean decode step over the output (KV lengths ``I+1 .. I+O-1``, by
midpoint quadrature), TTFT the prefill of the whole batch. For vLLM, ``steady_state`` is the other reading of
"``batch`` concurrent requests": a server that keeps ``batch`` sequences running, each step carrying its
decodes and ``batch x I / O`` prompt tokens of arriving requests (chunked prefill, vLLM's default since 0.6).
"""
from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from lilou.errors import LilouInputError
from lilou.hardware import Device, resolve_device
from lilou.latency.composition.monotone import dominating_devices
from lilou.latency.composition.overhead import queue_envelope, queue_shares, queue_total
from lilou.latency.kernel_model.precision import PrecisionPath, kernel_unit, precision_path, slower_than_16_bit
from lilou.llm.attention import AttentionCorrection
from lilou.llm.attention import shipped_correction as shipped_attention
from lilou.llm.config import MODELLED_KINDS, LLMConfig, load_config
from lilou.llm.interconnect import all_reduce_ms, extrapolation, link
from lilou.llm.memory import ITEMSIZE, QUANTISED, WEIGHT_ONLY, MemoryFit, max_batch_fitting, memory_fit
from lilou.llm.power import PowerModel
from lilou.llm.steps import HF_EXPERTS_SOURCE, StepKernel, StepShape, remembered_step_kernels

ENGINES = ("vllm", "hf")
DTYPES = ("bf16", "fp16", "fp8", "fp4", "int8", "int4", "fp32")
#: Formats the serving rows measured (llm_energy: FP16, BF16, a few FP8); the others' intervals widen (_widening).
SERVED_DTYPES = frozenset({"fp16", "bf16", "fp8"})
KV_DTYPES = ("bf16", "fp16", "fp8", "fp32")
#: vLLM's own spellings of an FP8 cache (its ``kv_cache_dtype``), taken as fp8: the cache's bytes and the attention's
#: price do not tell E4M3 from E5M2.
KV_ALIASES = {"fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
#: KV lengths at which decode steps are priced (midpoints of equal parts of the output).
DECODE_POINTS = 4
#: The largest tensor-parallel group modelled: one node's GPUs.
MAX_TP = 8
#: How a MIG slice's power note starts (a plan, which shows no power, leaves it out).
SLICE_POWER = "power is the slice's share"


@dataclass(frozen=True)
class Calibration:
    """Fitted constants shipped in ``calibration.json`` (written by ``scripts/bench_llm.py``).

    Per engine, a decode step takes ``itl_scale x (GPU time of its kernels) + itl_step_ms + itl_per_seq_ms x
    batch``: the scale corrects the kernels' efficiency inside the engine, the host terms are the scheduler's,
    sampler's and detokeniser's time per step and the time per running sequence that the GPU waits for (vLLM
    replays CUDA graphs: nothing per kernel). An engine with ``itl_launch_gap_ms`` (HF eager) issues every kernel
    from Python: its step is the launch queue of its kernels (:func:`lilou.latency.composition.overhead.queue_total`)
    with that host time per kernel and the GPU times scaled, plus the same host terms: the host's dispatch hides
    behind long kernels and shows between short ones. ``itl_per_launch_ms`` (an additive time per launch) is
    read for calibration files written before the queue. A prefill takes ``ttft_scale x (kernel-model prefill)``.
    """

    itl_scale: dict[str, float]
    ttft_scale: dict[str, float]
    power: PowerModel
    intervals: dict[str, Any]   # 90 % half-widths of log(predicted / measured) per output {"all": h, engine: h}
    itl_step_ms: dict[str, float] = field(default_factory=dict)
    itl_per_seq_ms: dict[str, float] = field(default_factory=dict)
    itl_per_launch_ms: dict[str, float] = field(default_factory=dict)
    itl_launch_gap_ms: dict[str, float] = field(default_factory=dict)
    fitted_on: str = ""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibration:
        return cls(itl_scale=dict(data["itl_scale"]), ttft_scale=dict(data["ttft_scale"]),
                   power=PowerModel(**data["power"]), intervals=dict(data.get("intervals") or {}),
                   itl_step_ms=dict(data.get("itl_step_ms") or {}), itl_per_seq_ms=dict(data.get("itl_per_seq_ms") or {}),
                   itl_per_launch_ms=dict(data.get("itl_per_launch_ms") or {}),
                   itl_launch_gap_ms=dict(data.get("itl_launch_gap_ms") or {}),
                   fitted_on=str(data.get("fitted_on", "")))

    def to_json(self) -> dict[str, Any]:
        return {"itl_scale": self.itl_scale, "itl_step_ms": self.itl_step_ms, "itl_per_seq_ms": self.itl_per_seq_ms,
                "itl_per_launch_ms": self.itl_per_launch_ms, "itl_launch_gap_ms": self.itl_launch_gap_ms,
                "ttft_scale": self.ttft_scale, "power": self.power.to_json(), "intervals": self.intervals,
                "fitted_on": self.fitted_on}

    def interval_half_width(self, quantity: str, engine: str) -> float | None:
        """The 90 % half-width (log) of ``quantity`` for ``engine``: its own where the leave-one-GPU-out residuals
        had enough rows of it, else the pooled one (files before session 10 hold one float per quantity)."""
        half = self.intervals.get(quantity)
        if isinstance(half, dict):
            return half.get(engine, half.get("all"))
        return half

    def itl_ms(self, engine: str, decode: Phase, batch: float) -> float:
        """The decode step: GPU time scaled plus the host terms (see the class docstring). Without a per-launch
        term the step's own time (for HF: the launch queue of the kernel model) is scaled instead."""
        gap, per_launch = self.itl_launch_gap_ms.get(engine), self.itl_per_launch_ms.get(engine)
        scale = self.itl_scale.get(engine, 1.0)
        if gap is not None and decode.queue:
            step = float(np.mean([queue_total(envelope, gap, scale) for envelope in decode.queue]))
        elif per_launch is not None:
            step = scale * decode.gpu_ms + per_launch * decode.launches
        else:
            step = scale * decode.ms
        return step + self.itl_step_ms.get(engine, 0.0) + self.itl_per_seq_ms.get(engine, 0.0) * batch

    def ttft_ms(self, engine: str, prefill: Phase, batch: float) -> float:
        """The first token: the prefill scaled and, for an engine that issues its kernels from Python (HF eager:
        ``itl_launch_gap_ms``), the same per-step host terms as every later token (``generate``'s logits processors,
        sampling and the stopping criteria's sync run for the first token too). No source measured HF's TTFT, so its
        scale is 1; it left them out, and GPT-2's TTFT came out half its ITL (audit ua44a). vLLM's scale was fitted
        on measured TTFTs, its scheduler's step inside it."""
        ttft = prefill.ms * self.ttft_scale.get(engine, 1.0)
        if engine in self.itl_launch_gap_ms:
            ttft += self.itl_step_ms.get(engine, 0.0) + self.itl_per_seq_ms.get(engine, 0.0) * batch
        return ttft


DEFAULT_CALIBRATION = Calibration(itl_scale={"vllm": 1.0, "hf": 1.0}, ttft_scale={"vllm": 1.0, "hf": 1.0},
                                  power=PowerModel(), intervals={})


@functools.cache
def shipped_calibration() -> Calibration:
    try:
        text = resources.files("lilou.llm").joinpath("calibration.json").read_text(encoding="utf-8")
    except FileNotFoundError:
        return DEFAULT_CALIBRATION
    return Calibration.from_json(json.loads(text))


@dataclass(frozen=True)
class Phase:
    """One step of a phase (per GPU): its predicted time and what it moved and computed."""

    ms: float                   # predicted time of one step (before the engine scale)
    flops: float
    bytes: float
    memory_ms: float            # bytes / bandwidth
    compute_ms: float           # sum of FLOPs / the peak of each kernel's unit
    gpu_ms: float = 0.0         # the kernels' GPU time back to back, no launch gaps (+ all-reduces)
    launches: float = 0.0       # kernels launched per step
    #: per decode point, the launch queue of its kernels in launch order (overhead.queue_envelope of their GPU
    #: times): what an engine that launches every kernel from the host (HF eager) takes at any host time per kernel
    queue: tuple[np.ndarray, ...] = field(default=(), compare=False)  # arrays: == of two results raised
    gemm_share: float = 0.0     # the share of the step's GPU work in its GEMMs (attention aside)
    reduce_ms: float = 0.0      # of ``ms``, the tensor-parallel all-reduces (0 at TP 1)

    @property
    def roofline_ms(self) -> float:
        """The physical floor of the step: max(bytes / bandwidth, FLOPs / peak)."""
        return max(self.memory_ms, self.compute_ms)


def utilisation(parts: list[tuple[Phase, float, float]]) -> tuple[float, float]:
    """(DRAM, compute) utilisation over ``(phase, steps, ms per step)`` parts: roofline time over elapsed time."""
    elapsed = sum(steps * ms for _, steps, ms in parts)
    if elapsed <= 0:
        return 0.0, 0.0
    memory = sum(steps * p.memory_ms for p, steps, _ in parts) / elapsed
    compute = sum(steps * p.compute_ms for p, steps, _ in parts) / elapsed
    return min(memory, 1.0), min(compute, 1.0)


@dataclass
class LLMPrediction:
    """One serving configuration's prediction (:meth:`LLMPredictor.predict`). Times are milliseconds (``ttft_ms``:
    the prefill of the whole batch; ``itl_ms``: one decode step), ``power_w`` watts per GPU, ``memory`` GiB per GPU;
    the latency and power fields are None where the model does not fit (said in ``warnings``). ``intervals`` holds
    the 90 % ``[lo, hi]`` of ``ttft_ms``, ``itl_ms`` and ``power_w`` (None where not calibrated or not predicted).
    :meth:`to_json` is the ``lilou llm --format json`` object."""

    model: str
    gpu: str
    mig: str | None
    tp: int
    batch: int
    input_len: int
    output_len: int
    dtype: str
    kv_dtype: str
    engine: str
    memory: MemoryFit
    max_batch_fitting: int
    ttft_ms: float | None
    itl_ms: float | None
    power_w: float | None
    warnings: list[str] = field(default_factory=list)
    intervals: dict[str, list[float] | None] = field(default_factory=dict)
    prefill: Phase | None = None
    decode: Phase | None = None
    steady: Phase | None = None   # vLLM: a step of a server in steady state (chunked prefill), before calibration
    steady_itl_ms: float | None = None
    steady_interval_ms: list[float] | None = None   # 90 %, with ITL's half-width (the steady rows are scored on it)

    @property
    def steady_tokens_per_s(self) -> float | None:
        """Output tokens/s of a server that keeps ``batch`` requests running (one token per sequence per step)."""
        return None if not self.steady_itl_ms else self.batch * 1000.0 / self.steady_itl_ms

    @property
    def e2e_ms(self) -> float | None:
        if self.ttft_ms is None or self.itl_ms is None:
            return None
        return self.ttft_ms + (self.output_len - 1) * self.itl_ms

    @property
    def tokens_per_s(self) -> float | None:
        """Output tokens/s of the static batch over the whole request, prefill included: batch x O / e2e."""
        e2e = self.e2e_ms
        return None if not e2e else self.batch * self.output_len / (e2e / 1000)

    @property
    def energy_per_token_j(self) -> float | None:
        """Energy of the whole tensor-parallel group per output token."""
        e2e = self.e2e_ms
        if e2e is None or self.power_w is None:
            return None
        return self.power_w * self.tp * (e2e / 1000) / (self.batch * self.output_len)

    def to_json(self) -> dict[str, Any]:
        """The ``lilou llm --format json`` object (DESIGN.md), plus ``intervals`` (90 %)."""
        def r(value: float | None, digits: int = 4) -> float | None:
            return None if value is None else round(float(value), digits)

        return {"model": self.model, "gpu": self.gpu, "mig": self.mig, "tp": self.tp, "batch": self.batch,
                "input_len": self.input_len, "output_len": self.output_len, "dtype": self.dtype,
                "precision": self.dtype, "kv_dtype": self.kv_dtype, "engine": self.engine,
                "ttft_ms": r(self.ttft_ms), "itl_ms": r(self.itl_ms), "e2e_ms": r(self.e2e_ms),
                # power_w has its interval's digits: at 1 decimal a MIG slice's 155.5556 W (the slice's share of the
                # TDP, its bound too) read 155.6, above both (session 42)
                "tokens_per_s": r(self.tokens_per_s, 2), "power_w": r(self.power_w),
                "energy_per_token_j": r(self.energy_per_token_j, 5), "memory": self.memory.to_json(),
                "max_batch_fitting": self.max_batch_fitting, "warnings": list(self.warnings),
                "intervals": {k: (None if v is None else [r(v[0]), r(v[1])]) for k, v in self.intervals.items()},
                "steady_state": None if self.steady_itl_ms is None else {
                    "itl_ms": r(self.steady_itl_ms), "tokens_per_s": r(self.steady_tokens_per_s, 2),
                    "interval_ms": None if self.steady_interval_ms is None else
                    [r(v) for v in self.steady_interval_ms]}}


# ------------------------------------------------------------------------------------------ checks


#: The largest batch or length taken, as an ONNX model's --batch (lilou.graph.shapes.MAX_DIM): a 400-digit batch was
#: an internal error (OverflowError: the float arithmetic of memory and time cannot hold it; audit ua46).
MAX_COUNT = 1 << 40


def _positive(name: str, value: int, most: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise LilouInputError(f"{name} must be a positive integer, got {value!r:.60}")
    if most is not None and value > most:
        raise LilouInputError(f"{name} {shown_integer(value)} is above 2^40, not a real one; use a realistic {name}")
    return int(value)


def shown_integer(value: int) -> str:
    """An integer as an error shows it: one of 400 digits (JSON and Python have no bound) by its first digits and its
    length."""
    text = str(int(value))
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text.lstrip('-'))} digits)"


def _choice(name: str, value: str | None, allowed: tuple[str, ...]) -> str | None:
    if value is None:
        return None
    wanted = str(value).strip().lower()
    if wanted not in allowed:
        raise LilouInputError(f"unknown {name} {value!r}; use one of {', '.join(allowed)}")
    return wanted


#: vLLM's default ``max_num_seqs`` in most releases (the V1 server raises it on some GPUs): a batch above it waits.
VLLM_MAX_NUM_SEQS = 256


def _unit_tflops(family: str, path: PrecisionPath, device: Device) -> float:
    """The peak of the unit a kernel of ``family`` runs on along ``path`` (the FP32 CUDA cores when none)."""
    unit = kernel_unit(family, path, device)
    return (device.peak_tflops.get(unit) if unit else None) or device.fp32_tflops


def auto_dtype(stored: str, device: Device) -> tuple[str, str]:
    """The type a config without --dtype is served in, and the warning that says so: vLLM's ``--dtype auto`` (and
    transformers 5's default): a BF16 checkpoint in BF16 (in FP16 on a GPU without BF16, which vLLM casts it to) and
    an FP16 one in FP16; an FP32 checkpoint, or one whose config names no type, in the widest half precision the GPU
    runs. Before, every config took that widest type, so an FP16 checkpoint was priced and labelled BF16."""
    widest = "bf16" if _runs_bf16(device) else "fp16"
    if stored == "fp16" or stored == "bf16" and widest == "bf16":
        return stored, f"no --dtype given: {stored.upper()}, the checkpoint's own (its torch_dtype), as vLLM serves it"
    if stored == "bf16":
        return "fp16", (f"no --dtype given: FP16; the checkpoint is BF16 (its torch_dtype), which {device.gpu} does "
                        "not run: vLLM casts it to FP16")
    stored_note = "; the checkpoint is FP32 (its torch_dtype)" if stored == "fp32" else ""
    return widest, f"no --dtype given: {widest.upper()} (the widest half precision {device.gpu} runs){stored_note}"


def _runs_bf16(device: Device) -> bool:
    return bool(device.peak_tflops.get("bf16_tensor") or device.peak_tflops.get("bf16"))


def attention_dtype(dtype: str, device: Device) -> str:
    """The type the attention kernels compute in: the model's own where it is a 16- or 32-bit float, else (INT8,
    FP8, INT4, FP4 weights) the 16-bit activations, BF16 where the GPU has it, as the attention correction
    (lilou.llm.attention) was fitted; never the weights' format, which only the projections read (an FP8 KV cache
    is dequantised into the same 16-bit math). Before, an INT8 Llama-3.1-8B's 131,072-token prefill on an H100
    implied 4,100 TFLOPS, twice its INT8 peak."""
    if dtype in ("fp32", "fp16", "bf16"):
        return dtype
    return "bf16" if _runs_bf16(device) else "fp16"


#: vLLM serves an FP8 checkpoint on a GPU without FP8 tensor cores from this compute capability on, weight-only
#: (W8A16) with its FP8-Marlin kernels (docs.vllm.ai features/quantization/fp8: "FP8 models will run on compute
#: capability >= 7.5 (Turing) as weight-only W8A16, utilizing FP8 Marlin"; vllm-project/vllm#5975).
FP8_WEIGHT_ONLY_CAPABILITY = 7.5


def fp8_weight_only(dtype: str, device: Device) -> bool:
    """``dtype`` is FP8 on a GPU that has no FP8 tensor cores but runs vLLM's weight-only FP8 (W8A16, FP8-Marlin):
    8-bit weights dequantised inside 16-bit tensor-core GEMMs, as the INT4 weight-only path is priced."""
    peaks = device.peak_tflops
    return (dtype == "fp8" and not peaks.get("fp8_tensor") and bool(peaks.get("fp16_tensor"))
            and float(device.compute_capability) >= FP8_WEIGHT_ONLY_CAPABILITY)


def _check_dtype(dtype: str, device: Device, what: str) -> None:
    peaks = device.peak_tflops
    if dtype == "fp8" and not peaks.get("fp8_tensor") and not fp8_weight_only(dtype, device):
        instead = "bf16 or fp16" if _runs_bf16(device) else "fp16"
        raise LilouInputError(f"{device.gpu} (compute capability {device.compute_capability}) has no FP8 tensor "
                              f"cores (FP8 needs compute capability 8.9 or newer: Ada, Hopper, Blackwell), nor runs "
                              f"vLLM's weight-only FP8 (W8A16, FP8-Marlin: {FP8_WEIGHT_ONLY_CAPABILITY} or newer); use "
                              f"{what} {instead}")
    if dtype == "bf16" and not _runs_bf16(device):
        raise LilouInputError(f"{device.gpu} (compute capability {device.compute_capability}) has no BF16 "
                              f"arithmetic (it needs compute capability 8.0 or newer); use {what} fp16")
    if dtype == "fp4" and not peaks.get("fp4_tensor"):
        raise LilouInputError(f"{device.gpu} (compute capability {device.compute_capability}) has no FP4 tensor cores "
                              f"(NVFP4 needs Blackwell, compute capability 10.0 or newer); use {what} fp8 or bf16")
    if dtype == "int8" and (not peaks.get("int8_tensor") or float(device.compute_capability) < 7.5):
        raise LilouInputError(f"{device.gpu} (compute capability {device.compute_capability}) has no INT8 tensor "
                              f"cores for vLLM's W8A8 kernels (they need 7.5 or newer); use {what} fp16")
    if dtype == "int4" and (not peaks.get("fp16_tensor") or float(device.compute_capability) < 7.5):
        raise LilouInputError(f"{device.gpu} (compute capability {device.compute_capability}) cannot run vLLM's INT4 "
                              f"weight-only kernels (AWQ and GPTQ need 7.5 or newer); use {what} fp16")
    if dtype == "fp16" and not (peaks.get("fp16_tensor") or peaks.get("fp16")):
        raise LilouInputError(f"{device.gpu} has no native FP16 arithmetic; use {what} fp32")


def _check_kv_engine(kv_dtype: str, dtype: str, engine: str) -> None:
    """A KV-cache type the engine cannot store. transformers' DynamicCache keeps keys and values in the model's own
    dtype (its quantised caches, quanto and HQQ, are int2/int4/int8 and dequantise every step): no FP8 cache. vLLM's
    ``kv_cache_dtype`` is ``auto`` (the model's dtype) or an FP8 variant (fp8, fp8_e4m3, fp8_e5m2; docs.vllm.ai
    engine arguments, features/quantization/quantized_kvcache): an FP32 cache only as an FP32 model's own."""
    if engine == "hf" and kv_dtype == "fp8":
        raise LilouInputError("--kv-dtype fp8 --engine hf: transformers' DynamicCache stores keys and values in the "
                              "model's dtype and has no FP8 cache; use --engine vllm or leave --kv-dtype out")
    if engine == "vllm" and kv_dtype == "fp32" and dtype != "fp32":
        raise LilouInputError(f"--kv-dtype fp32 with --dtype {dtype}: vLLM's kv_cache_dtype is auto (the model's own "
                              "dtype) or fp8 (fp8_e4m3, fp8_e5m2); use --kv-dtype fp8 or leave it out")


def _check_tp(config: LLMConfig, tp: int, mig: str | None) -> None:
    if tp > MAX_TP:
        raise LilouInputError(f"--tp {tp}: tensor parallelism is modelled within one node of at most {MAX_TP} GPUs")
    if tp > 1 and mig is not None:
        raise LilouInputError("tensor parallelism across MIG slices is not supported (MIG instances have no "
                              "peer-to-peer path for NCCL); drop --mig or use --tp 1")
    if config.heads % tp:
        raise LilouInputError(f"--tp {tp} does not divide the {config.heads} attention heads of {config.name}")
    if config.kv_heads % tp and tp % config.kv_heads:
        raise LilouInputError(f"--tp {tp} does not divide the {config.kv_heads} KV heads of {config.name} (nor do "
                              "they divide it, which vLLM needs to replicate them)")
    for what, width in _sharded_widths(config):  # vLLM's parallel linear layers split each evenly
        if width % tp:
            raise LilouInputError(f"--tp {tp} does not divide the {what} of {config.name} ({width}): vLLM splits "
                                  "it evenly over the GPUs and refuses to load the model")


def _sharded_widths(config: LLMConfig) -> list[tuple[str, int]]:
    """The widths tensor parallelism splits in the quantised linear layers, with what they are: each rank holds
    ``width / tp`` of them (a column-parallel output and the row-parallel input after it)."""
    widths = []
    if not config.mla:
        widths.append(("attention width (heads x head_dim)", config.heads * config.head_dim))
    if not config.moe or config.dense_layers:
        widths.append(("intermediate_size", config.intermediate))
    if config.moe:
        widths.append(("expert width (moe_intermediate_size)", config.expert_width))
    if config.shared_expert_intermediate:
        widths.append(("shared expert width", config.shared_expert_intermediate))
    return widths


def _blocks_misfit(config: LLMConfig, tp: int) -> tuple[str, int] | None:
    block = config.quantization_block
    for what, width in _sharded_widths(config):
        if width % tp or (width // tp) % block:
            return what, width
    return None


def _check_blocks(config: LLMConfig, tp: int, dtype: str) -> None:
    """A group- or block-quantised checkpoint loaded as it is (``dtype`` its own) splits over ``tp`` GPUs only where
    every rank's share of each quantised width is whole groups: vLLM refuses it at load otherwise ("... is not
    divisible by weight quantization block_n = 128", vllm-project/vllm#17569; "input_size_per_partition = 14784 is
    not divisible by min_thread_k = 128", vllm#13640). Before, Qwen3-235B-A22B-FP8 at TP 8 (1536 / 8 = 192 wide
    experts in 128-blocks) was predicted as if it loaded."""
    block = config.quantization_block
    if tp <= 1 or not block or dtype != config.quantization:
        return
    misfit = _blocks_misfit(config, tp)
    if misfit is None:
        return
    what, width = misfit
    working = [t for t in (1, 2, 4, 8) if t <= MAX_TP and not config.heads % t and not (config.kv_heads % t and
                                                                                      t % config.kv_heads)
               and _blocks_misfit(config, t) is None]
    largest = max([t for t in working if t < tp] or [1])
    expert = " or expert parallelism (vLLM --enable-expert-parallel, not modelled by Lilou)" if config.moe else ""
    raise LilouInputError(f"--tp {tp}: {config.name}'s {config.quantization_note} checkpoint quantises in groups of "
                          f"{block}, and its {what} {width} / {tp} = {width / tp:g} per GPU is not a whole number of "
                          f"them, so vLLM cannot load it; use --tp {largest}{expert}")


# --------------------------------------------------------------------------------------- predictor


class LLMPredictor:
    """Loads the Predictor (kernel model, launch overhead) once; predicts any LLM serving configuration."""

    def __init__(self, predictor: Any = None, calibration: Calibration | None = None,
                 attention: AttentionCorrection | None = None) -> None:
        if predictor is None:
            from lilou.api import Predictor

            predictor = Predictor(backend="eager")
        elif isinstance(predictor, (str, bytes, int, float, os.PathLike, dict, list, tuple)):
            # "eager" was accepted and failed at the first predict with an AttributeError
            raise LilouInputError(f"predictor must be a lilou.Predictor, not {type(predictor).__name__}")
        self.predictor = predictor
        self.calibration = calibration or shipped_calibration()
        self.attention = shipped_attention() if attention is None else attention

    def predict(self, model: str | os.PathLike[str], gpu: str, *, mig: str | None = None, tp: int = 1,
                batch: int = 1, input_len: int, output_len: int, dtype: str | None = None,
                kv_dtype: str | None = None, engine: str | None = "vllm") -> LLMPrediction:
        """Predict serving ``model`` on ``gpu``: latency, memory and power of a batch of requests.

        ``model`` is a built-in name (``lilou llm --list``, any case, organisation optional) or the path of a
        Hugging Face ``config.json`` (or of its folder); ``gpu`` a GPU of the database (``"h100-sxm"``, ``"l4"``),
        ``mig`` a MIG profile of it (``"1g.10gb"``). ``tp`` GPUs in tensor parallel; ``batch`` concurrent
        requests of ``input_len`` prompt tokens generating ``output_len`` tokens each (positive integers).
        ``dtype``: the weights' and compute's format, one of bf16, fp16, fp8, fp4, int8, int4, fp32 (None: the
        checkpoint's quantization, else its 16-bit torch_dtype as vLLM serves it (:func:`auto_dtype`), else the
        widest half precision the GPU runs); ``kv_dtype``: the KV cache's,
        one of bf16, fp16, fp8 (or vLLM's fp8_e4m3, fp8_e5m2), fp32 (None: the activations' 16-bit type; FP8 not
        under hf, FP32 under vllm only with an FP32 model); ``engine``: vllm (None: vllm) or hf (transformers eager).

        Returns an :class:`LLMPrediction`: ``ttft_ms`` and ``itl_ms`` in milliseconds, ``power_w`` in watts per
        GPU, ``memory`` in GiB per GPU, with warnings; a configuration that does not fit has None latency and power.
        Bad input (unknown model or GPU, a config that is not a transformer decoder, TP that does not divide the
        heads, a format the GPU lacks) raises :class:`lilou.errors.LilouInputError`.
        """
        batch, input_len, output_len = (_positive(n, v, MAX_COUNT) for n, v in (
            ("batch", batch), ("input length", input_len), ("output length", output_len)))
        tp = _positive("tp", tp)
        engine = _choice("engine", engine, ENGINES) or ENGINES[0]  # None: the default engine, vLLM
        if kv_dtype is not None:
            kv_dtype = KV_ALIASES.get(str(kv_dtype).strip().lower(), kv_dtype)
        dtype, kv_dtype = _choice("dtype", dtype, DTYPES), _choice("KV-cache dtype", kv_dtype, KV_DTYPES)
        device = resolve_device(gpu, mig)
        config = load_config(model)
        if config.kind not in MODELLED_KINDS:
            raise LilouInputError(f"{config.name} has {config.kind} layers; Lilou models transformer decoders only")
        _check_tp(config, tp, device.mig)
        if config.mla and engine == "hf":
            raise LilouInputError(f"{config.name}: multi-head latent attention is modelled as vLLM runs it; "
                                  "transformers expands the latent cache into whole keys and values, which --engine hf "
                                  "does not model (use --engine vllm)")
        if engine == "hf" and tp > 1:
            raise LilouInputError(f"--engine hf --tp {tp}: transformers has no tensor parallelism of its own; "
                                  "device_map='auto' places whole layers on the GPUs one after another (one GPU busy "
                                  "at a time), which Lilou does not model; use --engine vllm or --tp 1")
        warnings: list[str] = []
        from lilou.caveats import ambiguity_notes

        warnings += ambiguity_notes([gpu])
        if dtype is None and config.quantization:
            dtype = config.quantization
            warnings.append(f"no --dtype given: {dtype.upper()}, the checkpoint's own ({config.quantization_note}, "
                            "its quantization_config)")
        elif dtype is None:
            dtype, note = auto_dtype(config.stored_dtype, device)
            warnings.append(note)
        if config.quantization_note and not config.quantization and dtype in ("bf16", "fp16", "fp32"):
            # it was a clause at the end of the --dtype line ("... is not a format Lilou prices"), easy to miss
            bits = round(8 * ITEMSIZE[dtype])
            overstated = (f", so the weights' memory is overstated about {bits / config.unpriced_bits:.1f}x (the "
                          f"checkpoint stores about {config.unpriced_bits:.3g} bits a weight) and max_batch_fitting "
                          "understated" if config.unpriced_bits else "")
            warnings.append(f"the checkpoint's quantization_config ({config.quantization_note}) is not a format Lilou "
                            f"prices: its weights are priced at {bits} bits ({dtype.upper()}){overstated}; the GEMMs "
                            f"read {bits}-bit weights")
        elif config.quantization and dtype != config.quantization:
            warnings.append(f"--dtype {dtype}: the checkpoint stores {config.quantization.upper()} weights "
                            f"({config.quantization_note}); priced as asked, as if requantised")
        _check_dtype(dtype, device, "--dtype")
        weight_only = fp8_weight_only(dtype, device)
        if weight_only and engine == "hf":
            raise LilouInputError(f"--dtype fp8 --engine hf: {device.gpu} (compute capability "
                                  f"{device.compute_capability}) has no FP8 tensor cores, and transformers' FP8 "
                                  "quantizer then dequantises the checkpoint to BF16; use --dtype "
                                  f"{'bf16' if _runs_bf16(device) else 'fp16'} or --engine vllm (weight-only FP8)")
        if weight_only:
            warnings.append(self._weight_only_note(config, device))
        _check_blocks(config, tp, dtype)
        warnings += slower_than_16_bit(dtype, [device])
        if engine == "vllm" and batch > VLLM_MAX_NUM_SEQS:
            warnings.append(f"batch {batch}: vLLM runs at most max_num_seqs sequences at once ({VLLM_MAX_NUM_SEQS} by "
                            f"default in most releases); the prediction assumes the server sets it to {batch} or more")
        if kv_dtype is None:  # a quantised model keeps a 16-bit cache: FP16 where the GPU has no BF16 (INT8, T4)
            kv_dtype = QUANTISED.get(dtype, dtype)
            if kv_dtype == "bf16" and not _runs_bf16(device):
                kv_dtype = "fp16"
        elif kv_dtype == "fp8" and int(device.compute_capability.split(".")[0]) < 8:
            raise LilouInputError(f"an FP8 KV cache needs compute capability 8.0 or newer; {device.gpu} has "
                                  f"{device.compute_capability}")
        elif kv_dtype != "fp8":
            _check_dtype(kv_dtype, device, "--kv-dtype")
        _check_kv_engine(kv_dtype, dtype, engine)
        if kv_dtype == "fp8":
            warnings.append("FP8 KV cache: its attention is priced with the correction fitted on vLLM's BF16-cache "
                            "kernels (reading the cache's 8-bit bytes), and no serving row measured an FP8 cache")
        sizes = dict(dtype=dtype, kv_dtype=kv_dtype, tp=tp, engine=engine)
        fit = memory_fit(config, device.memory_gib, batch=batch, input_len=input_len, output_len=output_len, **sizes)
        fitting = max_batch_fitting(config, device.memory_gib, input_len=input_len, output_len=output_len, **sizes)
        where = device.name + (f" x {tp} (TP)" if tp > 1 else "")
        result = LLMPrediction(model=config.name, gpu=device.gpu, mig=device.mig, tp=tp, batch=batch,
                               input_len=input_len, output_len=output_len, dtype=dtype, kv_dtype=kv_dtype,
                               engine=engine, memory=fit, max_batch_fitting=fitting, ttft_ms=None, itl_ms=None,
                               power_w=None, warnings=warnings,
                               intervals={"ttft_ms": None, "itl_ms": None, "power_w": None})
        notes = self._notes(config, device, dtype, tp, engine, input_len + output_len, output_len)
        extrapolated = extrapolation(device, tp)
        link_factor = extrapolated[1] if extrapolated else 0.0
        if not fit.fits:
            # the model's own notes (a context past its limit ...) too: before, a context the model cannot serve was
            # only said once the batch was cut to fit; the fit line stays last (the plan quotes warnings[-1])
            notes.append(f"does not fit on {where}: {fit.total_gb:.1f} GiB needed per GPU (weights "
                         f"{fit.weights_gb:.1f} + KV cache {fit.kv_cache_gb:.1f} + activations "
                         f"{fit.activations_gb:.1f}) > {fit.budget_gb:.1f} GiB usable of {round(fit.device_gb, 2):g}; "
                         f"at most {fitting} {'sequence fits' if fitting == 1 else 'sequences fit'} at these "
                         "lengths; no latency is predicted")
            warnings.extend(notes)
            return result
        prefill, decode, steady = self._phases(config, device, batch, input_len, output_len, **sizes)
        calibration = self.calibration
        result.ttft_ms = calibration.ttft_ms(engine, prefill, batch)
        result.itl_ms = calibration.itl_ms(engine, decode, batch)
        result.prefill, result.decode, result.steady = prefill, decode, steady
        if steady is not None:
            result.steady_itl_ms = calibration.itl_ms(engine, steady, batch)
            result.steady_interval_ms = self._interval("itl_ms", result.steady_itl_ms, engine,
                                                       self._step_widening(_band_dtype(dtype, device), steady,
                                                                           link_factor))
        u_mem, u_compute = utilisation([(prefill, 1, result.ttft_ms), (decode, output_len - 1, result.itl_ms)])
        result.power_w = device.sm_fraction * calibration.power.power_w(device.board_power_w, u_mem, u_compute)
        result.intervals = self._intervals(result, device.sm_fraction * device.board_power_w, link_factor,
                                           _band_dtype(dtype, device))
        warnings.extend(notes)
        return result

    # ---------------------------------------------------------------------------------- internals

    def _phases(self, config: LLMConfig, device: Device, batch: int, input_len: int, output_len: int, *,
                dtype: str, kv_dtype: str, tp: int, engine: str) -> tuple[Phase, Phase, Phase | None]:
        """The prefill, the mean decode step of a static batch and (vLLM) the mean step of a server in steady
        state, where the prompts of arriving requests ride in the decode steps (chunked prefill)."""
        span = max(output_len - 1, 1)
        kv_lens = [input_len + 1 + int((j + 0.5) * span / DECODE_POINTS) for j in range(DECODE_POINTS)]
        steps = [StepShape(batch, input_len, input_len, causal=True)]
        steps += [StepShape(batch, 1, kv, causal=False) for kv in kv_lens]
        # steady state: each sequence's prompt is prefilled once in its ``output_len`` steps, so a step carries
        # batch x input / output prompt tokens besides its decodes; its running sequences are spread over every
        # position of the output, one attention kernel over all of them: priced at their mean KV length
        chunk = max(1, round(batch * input_len / output_len)) if engine == "vllm" else 0
        if chunk:
            steps.append(StepShape(batch, 1, input_len + 1 + span // 2, causal=False, prefill_tokens=chunk,
                                   prefill_len=input_len))
        weight_only = fp8_weight_only(dtype, device)  # W8A16: no cast of the activations before each GEMM
        moe_loop = _hf_expert_loop(config, device, engine)
        kernels = [remembered_step_kernels(config, s, dtype=dtype, kv_dtype=kv_dtype, tp=tp, engine=engine,
                                           weight_only=weight_only, moe_loop=moe_loop) for s in steps]
        flat = [k for step in kernels for k in step]
        attention = attention_dtype(dtype, device)
        work = self._work(flat, device, dtype, batch, attention)
        if engine == "vllm":  # measured vLLM attention kernels depart from the fused-attention price
            correction = self.attention
            # ms per FLOP at the peak of the attention's unit
            floor = 1.0 / (_unit_tflops("gemm", precision_path(attention, device, None, "off"), device) * 1e9)
            # The correction reads work items per SM, one feature monotone in the SM count: it is taken at the
            # device's and at every device that dominates it (a slice's whole GPU, an L40's L40S), the larger kept, so
            # that no device is priced below one with more of everything (lilou.latency.composition.monotone; the
            # decode correction grows with the SMs, and Llama-3.1-8B's step on an A100-80GB's 7g.80gb slice came out
            # 0.003 ms below the whole GPU's, on an RTX 5090 0.08 % below an RTX PRO 6000's)
            sm_counts = {device.sms} | {other.sms for other in dominating_devices(device)}
            for i, k in enumerate(flat):
                if k.attention is not None:
                    # never above the unit's peak: the correction's log-KV-length term, fitted up to 32k tokens,
                    # priced a 131,072-token BF16 prefill on an H100 at 1,099 TFLOPS (peak 989)
                    work[i] = max(max(correction.apply(float(work[i]), k.attention, k.causal, sms) for sms in sm_counts),
                                  k.spec.flops * floor)
        offsets = np.cumsum([0] + [len(step) for step in kernels])
        priced = [(step, work[offsets[i]:offsets[i + 1]]) for i, step in enumerate(kernels)]
        itemsize = ITEMSIZE[QUANTISED.get(dtype, dtype)]  # the 16-bit activations all-reduced
        reduce_prefill = 2 * config.layers * all_reduce_ms(batch * input_len * config.hidden * itemsize, tp, device)
        reduce_decode = 2 * config.layers * all_reduce_ms(batch * config.hidden * itemsize, tp, device)
        overhead = self.predictor.model.overhead
        prefill_ms = float(overhead.kernel_ms(_sequence(*priced[0])).sum()) + reduce_prefill
        decoding = priced[1:1 + DECODE_POINTS]
        gpu_each = [float(sum(k.count * w for k, w in zip(step, w_))) * overhead.scale for step, w_ in decoding]
        if engine == "vllm":  # CUDA graphs: no launch gap
            decode_each, queue = gpu_each, ()
        else:  # each step's kernels in launch order, through the launch queue
            sequences = [overhead.gpu_ms(_sequence(step, w_)) for step, w_ in decoding]
            decode_each = [float(queue_shares(gpu, overhead.gap_ms).sum()) for gpu in sequences]
            queue = tuple(queue_envelope(np.append(gpu, reduce_decode)) for gpu in sequences)
        decode_ms = float(np.mean(decode_each)) + reduce_decode
        decode_gpu_ms = float(np.mean(gpu_each)) + reduce_decode
        launches = float(np.mean([sum(k.count for k in step) for step in kernels[1:1 + DECODE_POINTS]]))
        decode = self._phase([k for step in kernels[1:1 + DECODE_POINTS] for k in step], decode_ms, device, dtype,
                             weight=1 / DECODE_POINTS, gpu_ms=decode_gpu_ms, launches=launches, queue=queue,
                             gemm_share=_gemm_share(decoding), reduce_ms=reduce_decode)
        steady = None
        if chunk:
            step, step_work = priced[-1]
            reduce_mixed = 2 * config.layers * all_reduce_ms((batch + chunk) * config.hidden * itemsize, tp, device)
            mixed_ms = _floored_mixed_gpu(step, step_work, decoding) * overhead.scale + reduce_mixed
            steady = self._phase(step, mixed_ms, device, dtype, launches=launches,
                                 gemm_share=_gemm_share([priced[-1]]), reduce_ms=reduce_mixed)
        return (self._phase(priced[0][0], prefill_ms, device, dtype, gemm_share=_gemm_share(priced[:1]),
                            reduce_ms=reduce_prefill), decode, steady)

    def _work(self, kernels: list[StepKernel], device: Device, dtype: str, batch: int | None = None,
              attention: str | None = None) -> np.ndarray:
        """GPU work (ms) of each kernel on ``device``, through the Predictor's kernel-model path; ``batch`` (each
        kernel's independent work is proportional to it) sets the size ladder, so that no kernel, and no step, is
        priced below the same step at a smaller batch (None: kernels of several batches, the ladder x1 .. x16).
        ``attention``: the dtype the attention kernels compute in (:func:`attention_dtype`), when not ``dtype``."""
        if attention is not None and attention != dtype:
            work = self._work(kernels, device, dtype, batch)
            rows = [i for i, k in enumerate(kernels) if k.attention is not None]
            if rows:
                work[rows] = self._work([kernels[i] for i in rows], device, attention, batch)
            return work
        from lilou.latency.composition.end_to_end import GraphKernels
        from lilou.latency.composition.fallback import uses_fallback

        position: dict[tuple, int] = {}
        index = np.fromiter((position.setdefault((k.spec, k.fixed_bytes), len(position)) for k in kernels),
                            dtype=np.int64, count=len(kernels))
        unique = [spec for spec, _ in position]
        graph_kernels = GraphKernels(
            nodes=[(k.name,) for k in kernels], specs=[k.spec for k in kernels], unique=unique,
            unique_fallback=np.array([uses_fallback(s) for s in unique], dtype=bool),
            unique_fixed_bytes=np.array([fixed for _, fixed in position], dtype=np.float64), index=index)
        # as an option: every GEMM on the path of the serving dtype, whatever its activations' type (BF16 beside FP8
        # weights), as the engine constants were fitted (kernel_path)
        path = precision_path(dtype, device, dtype, "off")
        # the ladder of every batch up to 16, then 32 and 64 (lilou.latency.composition.monotone): before session 36
        # it was the five rungs x1 .. x16 of an unknown batch, and Llama-3.1-8B's decode step on an L4 was priced
        # 58.2 ms at batch 1 and 56.5 ms at batch 3 (the rungs of batch 1 are 2, 4, 8, 16; 3 is none of them)
        # Without the kernels' measured floors: the engines' constants were fitted on measured steps unfloored, and
        # with floors (refitted) the leave-one-GPU-out medians moved both ways: ITL 16.01 -> 15.48 %, end to end
        # 6.70 -> 8.03 %, TTFT 10.88 -> 10.94, power 26.05 -> 25.82 (session 44, docs/llm.md)
        work = self.predictor.model.kernel_work(graph_kernels, [device], batch, lambda _: path, floored=False)
        return np.array(work.work_ms[:, 0], dtype=np.float64)

    def _phase(self, kernels: Sequence[StepKernel], ms: float, device: Device, dtype: str,
               weight: float = 1.0, gpu_ms: float | None = None, launches: float = 0.0,
               queue: tuple[np.ndarray, ...] = (), gemm_share: float = 0.0, reduce_ms: float = 0.0) -> Phase:
        path = precision_path(dtype, device, None, "off")
        flops = nbytes = compute_ms = 0.0
        for k in kernels:
            peak = _unit_tflops(k.spec.family, path, device)
            flops += weight * k.count * k.spec.flops
            nbytes += weight * k.count * k.spec.bytes
            compute_ms += weight * k.count * k.spec.flops / (peak * 1e9)
        return Phase(ms=ms, flops=flops, bytes=nbytes, memory_ms=nbytes / (device.memory_bandwidth_gbs * 1e6),
                     compute_ms=compute_ms, gpu_ms=ms if gpu_ms is None else gpu_ms, launches=launches, queue=queue,
                     gemm_share=gemm_share, reduce_ms=reduce_ms)

    def _interval(self, quantity: str, value: float | None, engine: str, widening: float = 0.0
                  ) -> list[float] | None:
        """The 90 % interval of ``value`` with the calibrated half-width of ``quantity`` for ``engine``, widened in
        quadrature by ``widening`` (:meth:`_widening`)."""
        half = self.calibration.interval_half_width(quantity, engine)
        if half is None or value is None:
            return None
        half = math.hypot(half, widening)
        return [value * math.exp(-half), value * math.exp(half)]

    @staticmethod
    def _widening(dtype: str, gemm_share: float) -> float:
        """The log half-width a step adds when its GEMMs run a format no serving row measured (INT8, INT4, FP4,
        FP32): the kernel calibration's GEMM band of that format beyond the BF16 band the serving residuals already
        carry, times the GEMMs' share of the step (lilou/plan/calibration.json, ``make calibrate``)."""
        if dtype in SERVED_DTYPES:
            return 0.0
        from lilou.plan.calibration import Calibration

        calibration = Calibration.shipped()
        served = calibration.pooled_band("gemm", "bf16") if calibration is not None else None
        if served is None:
            return 0.0
        own = calibration.pooled_band("gemm", dtype) or calibration.widest("gemm", dtype)
        return gemm_share * math.sqrt(max(0.0, own.hi ** 2 - served.hi ** 2))

    @classmethod
    def _step_widening(cls, dtype: str, phase: Phase, link_factor: float) -> float:
        """A step's widening: its format's (:meth:`_widening`) and, in quadrature, its all-reduces' share of the step
        times the log factor by which an unmeasured link may be off (:func:`lilou.llm.interconnect.extrapolation`):
        a step that is 20 % all-reduce on a link that may be 2x off widens by 0.2 ln 2."""
        share = phase.reduce_ms / phase.ms if phase.ms > 0 else 0.0
        return math.hypot(cls._widening(dtype, phase.gemm_share), min(share, 1.0) * link_factor)

    def _intervals(self, result: LLMPrediction, max_power_w: float, link_factor: float = 0.0,
                   band_dtype: str | None = None) -> dict[str, list[float] | None]:
        band_dtype = band_dtype or result.dtype
        widen = {"ttft_ms": self._step_widening(band_dtype, result.prefill, link_factor),
                 "itl_ms": self._step_widening(band_dtype, result.decode, link_factor)}
        out = {key: self._interval(key, value, result.engine, widen.get(key, 0.0))
               for key, value in (("ttft_ms", result.ttft_ms), ("itl_ms", result.itl_ms), ("power_w", result.power_w))}
        if out.get("power_w"):  # a board never draws more than its TDP (a slice: its share of it)
            out["power_w"] = [min(out["power_w"][0], max_power_w), min(out["power_w"][1], max_power_w)]
        return out

    @staticmethod
    def _weight_only_note(config: LLMConfig, device: Device) -> str:
        """What an FP8 model on a GPU without FP8 tensor cores is priced as (:func:`fp8_weight_only`)."""
        compute = attention_dtype("fp8", device).upper()
        moe = (" The routed experts run vLLM's fused Marlin MoE kernel with FP8 weights (vLLM 0.9 and later, "
               "vllm-project/vllm#18026; older releases refuse FP8 MoE there)." if config.moe else "")
        return (f"FP8 on {device.gpu} (compute capability {device.compute_capability}, no FP8 tensor cores): vLLM serves "
                f"it weight-only, W8A16 with its FP8-Marlin kernels: weights FP8, compute {compute} (GEMMs on the "
                "16-bit tensor cores reading 8-bit weights, dequantised in the kernel, priced as the INT4 weight-only "
                f"path is; the embedding and LM head in BF16).{moe} No serving or kernel row measured W8A16: the TTFT "
                "and ITL intervals are widened by the weight-only (INT4) GEMM band")

    def _notes(self, config: LLMConfig, device: Device, dtype: str, tp: int, engine: str, context: int,
               output_len: int = 2) -> list[str]:
        notes = list(config.notes)  # what the config holds that the steps leave out or approximate
        source = config.context_source or "max_position_embeddings"
        if config.max_context and context > config.max_context and config.learned_positions:
            notes.append(f"{context} tokens of context pass {config.name}'s {config.max_context} ({source}): its "
                         "positions are learned embeddings of that many rows, so no engine can run such a context; "
                         "priced as asked")
        elif config.max_context and context > config.max_context:
            notes.append(f"{context} tokens of context pass {config.name}'s {config.max_context} "
                         f"({source}): beyond what it was trained on, and vLLM refuses such a "
                         "max_model_len unless told to allow it; priced as asked")
        elif not config.max_context:
            notes.append(f"{config.name}'s context limit is not known to Lilou (no max_position_embeddings in its "
                         f"config or Lilou's table): {context} tokens of context are priced as asked; check that the "
                         "model takes them")
        if config.windowed_layers and context > config.sliding_window:
            notes.append(f"{config.windowed_layers} of {config.layers} layers attend over a sliding window of "
                         f"{config.sliding_window} tokens (the config's sliding_window): their attention and KV cache "
                         f"cover at most {config.sliding_window} of the {context} tokens")
        if config.attention_softcap and engine == "hf":
            notes.append(f"attention logits are soft-capped at {config.attention_softcap:g} (attn_logit_softcapping): "
                         "transformers runs that attention eagerly, as separate kernels; it is priced as one fused "
                         "kernel")
        model = self.predictor.model
        has_units = getattr(model, "tensor_model", None) is not None or model.kernel_model.uses_units
        if dtype != "fp32" and not has_units:
            notes.append(f"the kernel model has FP32 measurements only: {dtype.upper()} GEMMs and attention are "
                         "priced at FP32 CUDA-core rates (prefill and large batches several times too slow)")
        if tp > 1:
            chosen = link(device, tp)
            notes.append(f"TP {tp}: two all-reduces per layer over {chosen.name} ({chosen.gbs:g} GB/s per direction, "
                         "lilou/llm/interconnect.py; not in the GPU database)")
            extrapolated = extrapolation(device, tp)
            if extrapolated:
                notes.append(extrapolated[0])
        if config.mla:
            notes.append(f"multi-head latent attention: the KV cache holds one latent of {config.latent_width} per "
                         "token and layer, whole on every GPU; a decode attends over the latents as vLLM's MLA kernels "
                         "do, a prefill over the keys and values expanded from them; no MLA kernel is measured, so "
                         "their attention is priced with the correction fitted on vLLM's FlashAttention kernels")
        elif config.kv_heads < tp:
            notes.append(f"{config.kv_heads} KV heads over TP {tp}: each KV head is replicated on {tp // config.kv_heads}"
                         " GPUs, as vLLM does")
        if device.mig is not None:
            notes.append(f"{SLICE_POWER} ({device.sm_fraction:.2f} of the SMs) of the board's power: the slices "
                         "share one board, whose draw no slice can read alone")
        if dtype not in SERVED_DTYPES:
            notes.append(f"no serving row is {dtype.upper()} (the measured runs are FP16, BF16 and a few FP8): the "
                         f"figures rest on the kernel model, and the TTFT and ITL intervals are widened by its "
                         f"{dtype.upper()} GEMM band (lilou/plan/calibration.json) over the GEMMs' share of each step")
        if dtype == "fp4":
            notes.append("NVFP4 (W4A4): the layers' linear weights at 4 bits with an FP8 scale per 16, the embedding and "
                         "LM head in BF16; each GEMM quantises its activations and runs on the FP4 tensor cores")
        if dtype == "int8":
            notes.append("INT8 W8A8 (SmoothQuant-style): each GEMM quantises its 16-bit activations and runs on the "
                         "INT8 tensor cores")
        if dtype in WEIGHT_ONLY:
            own = dtype == config.quantization
            groups = ("an 8-bit scale per 32 weights (MXFP4)" if own and config.quantization_group_bytes and
                      not config.quantization_group else
                      f"group size {config.quantization_group}: its scales counted at {config.quantization_group}, "
                      "its GEMMs priced as at 128" if own and config.quantization_group else "groups of 128")
            notes.append(f"INT4 weight-only (AWQ/GPTQ, {groups}): the layers' linear weights at 4 bits with their "
                         "group scales, the embedding and LM head in FP16; GEMMs on the 16-bit tensor cores reading "
                         "4-bit weights (such GEMMs are measured on the A100 only, by AIConfigurator)")
        if config.moe:
            notes.append("routed experts are priced as a grouped GEMM over the experts the step's tokens reach under "
                         "uniform routing")
        if config.moe and engine == "hf":
            per_expert = _hf_expert_loop(config, device, engine)
            notes.append(f"transformers' MoE block is priced from its code ({HF_EXPERTS_SOURCE}, the default experts "
                         "implementation), not measured: the router, top-k, sort, gathers, "
                         + ("one GEMM per expert hit for each projection (grouped_mm needs compute capability 8.0; "
                            f"{device.gpu} has {device.compute_capability}), " if per_expert else
                            "two grouped GEMMs over the experts hit, ")
                         + "scatter back, each a launch of its own; transformers 4.x (or experts_implementation="
                         "'eager') loops in Python over the experts hit, about 9 launches each, which is slower than "
                         "priced")
        if output_len == 1:
            notes.append("output length 1: the request ends with its first token and has no decode step; the ITL "
                         "shown is the step a second token would take, and E2E is the TTFT" + (
                             "; the steady-state server prefills its whole batch's prompts every step"
                             if engine == "vllm" else ""))
        if not self.calibration.intervals:
            notes.append("no calibration file: intervals are unavailable (run `make bench-llm`)")
        return notes


def _hf_expert_loop(config: LLMConfig, device: Device, engine: str) -> bool:
    """transformers' experts run one GEMM per expert hit (its ``_grouped_mm_fallback``): ``torch.nn.functional.
    grouped_mm`` needs compute capability 8.0 (``transformers.integrations.moe._can_use_grouped_mm``)."""
    return engine == "hf" and bool(config.moe) and float(device.compute_capability) < 8.0


def _band_dtype(dtype: str, device: Device) -> str:
    """The format whose GEMM band widens the intervals: a weight-only FP8 model's is the weight-only (INT4) GEMMs'
    (the kernel table's only weight-only rows, AIConfigurator's int4_wo), not the W8A8 FP8 serving rows'."""
    return "int4" if fp8_weight_only(dtype, device) else dtype


def _floored_mixed_gpu(step: Sequence[StepKernel], step_work: np.ndarray,
                       decoding: Sequence[tuple[Sequence[StepKernel], np.ndarray]]) -> float:
    """The steady (mixed) step's GPU work, each of its kernels (by name: a projection, a norm, the decode attention)
    at least the mean decode step's kernel of that name: it runs the same work plus the chunk's prompt tokens.
    Its token-wise kernels have batch + chunk rows but took the decode batch's size ladder
    (:mod:`lilou.latency.composition.monotone`), whose rungs (x1 .. x16, 32, 64 of batch + chunk rows) reach sizes the
    decode step's do not, where the kernel model dips: Llama-3.1-8B's steady step on an L40S at batch 1 (1,024 in,
    256 out) ran its 5-row down projection and norms 9 % and 34 % below the 1-row decode ones, and its ITL 2 % below
    the static batch's (22.58 ms against 23.02; 73 of 988 cases, session 42)."""
    decoded: dict[str, float] = {}
    for kernels, work in decoding:
        for k, w in zip(kernels, work):
            decoded[k.name] = decoded.get(k.name, 0.0) + k.count * float(w) / len(decoding)
    mixed: dict[str, float] = {}
    for k, w in zip(step, step_work):
        mixed[k.name] = mixed.get(k.name, 0.0) + k.count * float(w)
    return sum(max(mixed.get(name, 0.0), decoded.get(name, 0.0)) for name in dict.fromkeys([*mixed, *decoded]))


def _gemm_share(priced: Sequence[tuple[Sequence[StepKernel], np.ndarray]]) -> float:
    """The share of the steps' GPU work spent in GEMMs (attention kernels aside, whose band is their own)."""
    total = gemm = 0.0
    for kernels, work in priced:
        for k, w in zip(kernels, work):
            total += k.count * float(w)
            if k.spec.family == "gemm" and k.attention is None:
                gemm += k.count * float(w)
    return gemm / total if total > 0 else 0.0


def _sequence(kernels: Sequence[StepKernel], work: np.ndarray) -> np.ndarray:
    """Work of a step's kernels in launch order: head, the layers one after another, tail."""
    layer = [(k, w) for k, w in zip(kernels, work) if k.layer]
    once = [(k, w) for k, w in zip(kernels, work) if not k.layer]
    head = [w for k, w in once if k.name == "embedding"]
    tail = [w for k, w in once if k.name != "embedding"]
    # every per-layer count is a multiple of the repeats (a KV-cache concat of K and V runs twice per layer):
    # their greatest common divisor, so the sequence holds each kernel exactly ``count`` times
    layers = math.gcd(*(k.count for k, _ in layer)) or 1
    per_layer: list[float] = []
    for k, w in layer:
        per_layer.extend([w] * (k.count // layers))
    return np.asarray(head + per_layer * layers + tail, dtype=np.float64)
