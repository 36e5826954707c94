"""Error figures of a kernel model on measured rows: MAPE and median APE per GPU and family."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from lilou.latency.kernel_model.dataset import KernelDataset


def gpu_family_masks(data: KernelDataset) -> Iterator[tuple[str, str, np.ndarray]]:
    """(gpu, family, row mask) for every pair present in ``data``, in sorted order."""
    for gpu in np.unique(data.gpu):
        for family in np.unique(data.family):
            mask = (data.gpu == gpu) & (data.family == family)
            if mask.any():
                yield str(gpu), str(family), mask


def error_table(data: KernelDataset, predicted_ms: np.ndarray,
                predicted_type: np.ndarray | None = None) -> list[dict[str, Any]]:
    """One row per (gpu, family): n, MAPE %, median APE %, and kernel-type accuracy %."""
    from lilou.latency.kernel_model.kernel_types import KERNEL_TYPES

    ape = np.abs(predicted_ms - data.latency_ms) / data.latency_ms
    rows = []
    for gpu, family, mask in gpu_family_masks(data):
        row = {"gpu": gpu, "family": family, "n": int(mask.sum()),
               "mape": float(100 * ape[mask].mean()), "median_ape": float(100 * np.median(ape[mask]))}
        if predicted_type is not None:
            truth = np.asarray(KERNEL_TYPES, dtype=object)[data.kernel_type[mask]]
            row["type_accuracy"] = float(100 * np.mean(predicted_type[mask] == truth))
        rows.append(row)
    return rows
