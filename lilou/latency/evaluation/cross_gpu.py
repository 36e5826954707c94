"""How the same measured kernels scale from one GPU to another, against the spec ratios a model would use.

A memory-bound kernel priced by its bytes moves from GPU A to GPU B by the ratio of their bandwidths; one limited
by its instructions moves by their SM throughput (SMs x clock). Pairing the rows a source measured with the same
op, subset and shape on two GPUs says which of the two a kernel follows, without any model in between
(docs/kernel_model.md, "Session 25"). Reads the kernel table (numpy and the table's engine only).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class OpScaling:
    """One op's measured time on GPU B over its time on GPU A, median over the paired shapes."""

    op: str
    family: str
    pairs: int
    median_ratio: float      # time on B / time on A
    q10: float
    q90: float


def spec_ratios(gpu_a: str, gpu_b: str) -> dict[str, float]:
    """What a kernel's time on B over its time on A would be if it followed one resource of A over B."""
    from lilou.hardware import resolve_device

    a, b = resolve_device(gpu_a), resolve_device(gpu_b)
    return {"bandwidth": a.memory_bandwidth_gbs / b.memory_bandwidth_gbs,
            "sm_throughput": (a.sms * a.boost_clock_mhz) / (b.sms * b.boost_clock_mhz),
            "fp32_peak": a.peak_tflops["fp32"] / b.peak_tflops["fp32"]}


def paired_times(rows_a: list[tuple], rows_b: list[tuple]) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """``{(op, family): [(time on A, time on B), ...]}`` over the keys measured on both GPUs.

    A row is ``(op, family, key, latency_ms)``, ``key`` anything that names the shape (subset and shape JSON);
    a key measured twice on one GPU (a source's boundary rows) keeps its first time."""
    first_a: dict[tuple, float] = {}
    for op, family, key, ms in rows_a:
        first_a.setdefault((op, family, key), ms)
    seen: set[tuple] = set()
    out: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for op, family, key, ms in rows_b:
        name = (op, family, key)
        if name in first_a and name not in seen:
            seen.add(name)
            out[(op, family)].append((first_a[name], ms))
    return dict(out)


def op_scalings(pairs: dict[tuple[str, str], list[tuple[float, float]]], min_ms: float = 0.05,
                min_pairs: int = 20) -> list[OpScaling]:
    """Per op, the ratio time on B / time on A over pairs whose time on A is at least ``min_ms`` (below it the
    launch floor, not the resource, sets the time); ops with fewer than ``min_pairs`` such pairs are left out."""
    out = []
    for (op, family), values in sorted(pairs.items()):
        times = np.array([(a, b) for a, b in values if a >= min_ms and b > 0], dtype=np.float64)
        if len(times) < min_pairs:
            continue
        ratio = times[:, 1] / times[:, 0]
        out.append(OpScaling(op, family, len(ratio), float(np.median(ratio)), float(np.quantile(ratio, 0.1)),
                             float(np.quantile(ratio, 0.9))))
    return out


def table_rows(source: str, gpu: str, families: tuple[str, ...], tp: int | None = 1,
               data_dir: str | None = None) -> list[tuple]:
    """``(op, family, key, latency_ms)`` of one source and GPU from the kernel table; with ``tp``, only rows of
    that tensor-parallel degree (a row without one counts as 1)."""
    import json

    from lilou.data.kernel_table import kernel_table

    family_list = ", ".join(f"'{f}'" for f in families)
    relation = kernel_table([source], data_dir=data_dir).filter(f"gpu = '{gpu}' AND family IN ({family_list})")
    out = []
    for op, family, subset, shape, ms in relation.project("op, family, subset, shape, latency_ms").fetchall():
        parsed = json.loads(shape) if shape else {}
        if tp is not None and int(parsed.get("tp") or 1) != tp:
            continue
        out.append((op, family, (subset, shape), float(ms)))
    return out


@dataclass(frozen=True)
class PeakShare:
    """The median share of a unit's spec peak that one GPU's large GEMMs reach, and the error of pricing them at the
    other GPUs' mean share (what a model that knows only spec peaks can do at best on these rows)."""

    gpu: str
    rows: int
    median_share: float
    others_mean_share: float
    mape_at_others_share: float   # % over the GPU's rows


def peak_shares(source: str, dtype: str, unit: str, min_dim: int = 4096,
                data_dir: str | None = None) -> list[PeakShare]:
    """Large GEMMs (M, N and K all >= ``min_dim``: far from launch floors and tile quantisation) of one source and
    dtype: per GPU, FLOPs / (time x the spec peak of ``unit``), and the MAPE of pricing each GPU's rows at the mean
    of the other GPUs' median shares (leave-one-GPU-out, no model)."""
    from lilou.data.kernel_table import kernel_table
    from lilou.hardware import resolve_device

    relation = kernel_table([source], data_dir=data_dir).filter(
        f"family = 'gemm' AND dtype = '{dtype}' AND m >= {min_dim} AND n >= {min_dim} AND k >= {min_dim}")
    peaks: dict[str, float | None] = {}   # one database look-up per GPU, not per row
    collected: dict[str, list[float]] = {}
    for gpu, m, n, k, ms in relation.project("gpu, m, n, k, latency_ms").fetchall():
        if gpu not in peaks:
            peaks[gpu] = resolve_device(gpu).peak_tflops.get(unit)
        if peaks[gpu]:
            collected.setdefault(gpu, []).append(2.0 * m * n * k / (ms * 1e-3) / (peaks[gpu] * 1e12))
    shares = {gpu: np.asarray(values) for gpu, values in collected.items()}
    medians = {gpu: float(np.median(values)) for gpu, values in shares.items()}
    out = []
    for gpu in sorted(shares):
        others = [medians[g] for g in medians if g != gpu]
        if not others:
            continue
        guess = float(np.mean(others))
        # time at share s is FLOPs / (s x peak): relative error of pricing at ``guess`` is share / guess - 1
        mape = float(np.mean(np.abs(shares[gpu] / guess - 1.0)) * 100)
        out.append(PeakShare(gpu, len(shares[gpu]), medians[gpu], guess, mape))
    return out
