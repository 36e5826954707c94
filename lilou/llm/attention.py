"""How measured attention kernels depart from the fused-attention pricing of :mod:`lilou.llm.steps`.

The kernel model prices attention as the two batched GEMMs and the softmax of a flash-attention kernel; against
AIConfigurator's CUDA-graph replays of vLLM's attention kernels (``lilou.data.kernel_table``, families
``attention-prefill`` / ``attention-decode``) that is 2-5x too fast for prefill and 4-19x for decode. Per phase,
the measured time is taken as

    t = floor_ms + work_ms x exp(w . f)

``work_ms`` is the kernel model's price, ``floor_ms`` a per-kernel floor (launch-free: CUDA-graph replay), and
``f`` device-normalised features of the kernel: log of the work items (sequences x KV heads x query tiles) per SM,
log KV length, log query heads per KV head, log(head dim / 128). The coefficients are fitted by
``scripts/bench_llm.py`` (leave-one-GPU-out over the AIConfigurator GPUs, H100/L4 never in the table) and shipped
in ``attention.json``; applying them is numpy only.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from importlib import resources

import numpy as np

#: Query rows one CTA of a flash-attention kernel handles (the tile used to count work items).
QUERY_TILE = 64
FEATURES = ("log_items_per_sm", "log_kv_len", "log_group", "log_head_dim")


@dataclass(frozen=True)
class AttentionShape:
    """One attention kernel: ``seqs`` sequences of ``q_len`` queries over ``kv_len`` keys, per GPU."""

    seqs: int
    q_len: int
    kv_len: int
    heads: int
    kv_heads: int
    head_dim: int


def features(shape: AttentionShape, sms: int) -> np.ndarray:
    """The device-normalised features of :data:`FEATURES` (see the module docstring)."""
    group = max(1, shape.heads // max(shape.kv_heads, 1))
    tiles = math.ceil(group * shape.q_len / QUERY_TILE)
    items = shape.seqs * max(shape.kv_heads, 1) * tiles
    return np.array([math.log(items / sms), math.log(max(shape.kv_len, 1)), math.log(group),
                     math.log(shape.head_dim / 128)])


@dataclass(frozen=True)
class PhaseCorrection:
    floor_ms: float
    bias: float
    weights: tuple[float, ...]

    def apply(self, work_ms: float, f: np.ndarray) -> float:
        return float(self.floor_ms + work_ms * math.exp(self.bias + float(np.dot(self.weights, f))))

    def to_json(self) -> dict:
        return {"floor_ms": self.floor_ms, "bias": self.bias, "weights": dict(zip(FEATURES, self.weights))}

    @classmethod
    def from_json(cls, data: dict) -> PhaseCorrection:
        return cls(float(data["floor_ms"]), float(data["bias"]),
                   tuple(float(data["weights"][name]) for name in FEATURES))


@dataclass(frozen=True)
class AttentionCorrection:
    """One :class:`PhaseCorrection` per phase (``prefill``: causal, ``decode``: one query per sequence)."""

    prefill: PhaseCorrection | None = None
    decode: PhaseCorrection | None = None

    def apply(self, work_ms: float, shape: AttentionShape, causal: bool, sms: int) -> float:
        phase = self.prefill if causal else self.decode
        return work_ms if phase is None else phase.apply(work_ms, features(shape, sms))

    def to_json(self) -> dict:
        return {phase: getattr(self, phase).to_json() for phase in ("prefill", "decode") if getattr(self, phase)}


@functools.lru_cache(maxsize=1)
def shipped_correction() -> AttentionCorrection:
    """The correction in ``attention.json`` (none if the file is missing: attention keeps the kernel price)."""
    try:
        text = resources.files("lilou.llm").joinpath("attention.json").read_text()
    except FileNotFoundError:
        return AttentionCorrection()
    data = json.loads(text)
    return AttentionCorrection(**{p: PhaseCorrection.from_json(data[p]) for p in ("prefill", "decode") if p in data})


def fit_phase(work_ms: np.ndarray, f: np.ndarray, measured_ms: np.ndarray) -> PhaseCorrection:
    """Least squares on log(predicted / measured) (the fit side; scipy is imported only here)."""
    from scipy.optimize import least_squares

    work_ms, f, measured_ms = (np.asarray(a, dtype=np.float64) for a in (work_ms, f, measured_ms))
    log_m = np.log(measured_ms)

    def residual(x):
        return np.log(np.exp(x[0]) + work_ms * np.exp(x[1] + f @ x[2:])) - log_m

    x0 = np.concatenate([[math.log(max(float(np.quantile(measured_ms, 0.02)), 1e-4)) - 0.5,
                          float(np.median(log_m - np.log(work_ms)))], np.zeros(f.shape[1])])
    solved = least_squares(residual, x0, loss="soft_l1", f_scale=0.2)
    x = solved.x
    return PhaseCorrection(float(math.exp(x[0])), float(x[1]), tuple(float(v) for v in x[2:]))
