"""What limits the kernel model on an unseen GPU: two measured diagnostics.

1. **Per-machine constants.** :func:`oracle_offset_scale` fits, *in hindsight on the
   held-out GPU's own rows*, the launch offset ``a`` and speed scale ``b`` that minimise
   the MAPE of ``b * predicted + a``. If that MAPE is far below the model's, the error is
   mostly two constants of the machine (its host launch floor, its achieved fraction of
   the spec bandwidth) that no spec sheet gives. These are diagnostics, never a result:
   they use the test labels.
2. **Sustained throttling.** :func:`gemm_efficiency_by_duration` bins large GEMMs by
   their ideal time at peak and reports the median fraction of peak reached. A board that
   throttles under sustained load (for heat or power) shows the fraction falling with duration.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from lilou.latency.kernel_model.dataset import KernelDataset
from lilou.latency.kernel_model.metrics import gpu_family_masks
from lilou.latency.kernel_model.features import roofline_ms

#: Offsets (ms) the oracle tries: -100 to +100 microseconds in 0.5 microsecond steps.
OFFSET_GRID_MS = np.linspace(-0.1, 0.1, 401)


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cumulative, 0.5 * cumulative[-1])])


def _best_scale(predicted: np.ndarray, measured: np.ndarray, offset: float) -> tuple[float, float]:
    """(MAPE %, scale) of the best ``scale * predicted + offset``.

    sum |b p + a - y| / y = sum (p / y) |b - (y - a) / p|: a weighted median gives the exact b.
    """
    scale = _weighted_median((measured - offset) / predicted, predicted / measured)
    scale = max(scale, 0.0)
    return float(100 * np.mean(np.abs(scale * predicted + offset - measured) / measured)), scale


def oracle_offset_scale(predicted_ms: np.ndarray, measured_ms: np.ndarray,
                        offsets_ms: np.ndarray = OFFSET_GRID_MS) -> dict[str, float]:
    """MAPE % after the best scale alone, and after the best offset and scale, with the constants."""
    predicted = np.asarray(predicted_ms, dtype=np.float64)
    measured = np.asarray(measured_ms, dtype=np.float64)
    scale_mape, scale = _best_scale(predicted, measured, 0.0)
    fits = [(*_best_scale(predicted, measured, float(a)), float(a)) for a in offsets_ms]
    both_mape, both_scale, offset = min(fits)
    return {"scale_oracle_mape": scale_mape, "scale_oracle": scale,
            "offset_scale_oracle_mape": both_mape, "offset_oracle_us": 1000 * offset,
            "offset_scale_oracle_scale": both_scale}


def limits_table(data: KernelDataset, predicted_ms: np.ndarray) -> list[dict[str, Any]]:
    """One row per (gpu, family): the model's MAPE and the two oracle MAPEs of :func:`oracle_offset_scale`."""
    rows = []
    for gpu, family, mask in gpu_family_masks(data):
        measured, predicted = data.latency_ms[mask], predicted_ms[mask]
        rows.append({"gpu": gpu, "family": family, "n": int(mask.sum()),
                     "mape": float(100 * np.mean(np.abs(predicted - measured) / measured)),
                     **oracle_offset_scale(predicted, measured)})
    return rows


def gemm_efficiency_by_duration(data: KernelDataset, min_dim: int = 512) -> list[dict[str, Any]]:
    """Median percentage of FP32 peak reached by GEMMs with every dimension >= ``min_dim``,
    per GPU and per half-decade of ideal time at peak (``log10_ideal_ms`` is the bin's lower edge)."""
    k = data.kernels
    large = (data.family == "gemm") & (np.minimum(np.minimum(k.gemm_m, k.gemm_n), k.gemm_k) >= min_dim)
    ideal_ms, _ = roofline_ms(k, data.devices)
    rows = []
    for gpu in np.unique(data.gpu[large]):
        mask = large & (data.gpu == gpu)
        bins = np.floor(2 * np.log10(ideal_ms[mask])) / 2
        efficiency = ideal_ms[mask] / data.latency_ms[mask]
        for lower in np.unique(bins):
            picked = bins == lower
            rows.append({"gpu": str(gpu), "log10_ideal_ms": float(lower), "n": int(picked.sum()),
                         "median_percent_of_peak": float(100 * np.median(efficiency[picked]))})
    return rows
