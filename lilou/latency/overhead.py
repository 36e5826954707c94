"""Launch/gap overhead: how per-kernel GPU work adds up to end-to-end time in eager mode.

In eager PyTorch the host issues one kernel after another. While kernels are
longer than the time the host needs to dispatch an op, launches hide behind the
running kernel and the GPU is never idle; when they are shorter, the GPU waits
for the host. Each kernel therefore occupies

    kernel_ms = max(scale * work_ms, gap_ms)

of the end-to-end time, and the end-to-end latency is the sum over kernels.

- ``gap_ms`` is the host's dispatch time per op. It is read from the real
  per-kernel rows, not from end-to-end labels: an op timed alone with CUDA events
  (as NeuSight did) takes the dispatch time when the kernel itself is tiny, so
  ``gap_ms`` is the median, over the training GPUs, of the median latency of
  elementwise calls whose DRAM traffic takes under 1 µs. The end-to-end labels
  (large transformers, kernels of milliseconds) cannot pin it down.
- ``scale`` corrects the per-kernel model's bias when its kernels run back to back
  in real models; it is fitted on the end-to-end labels of the training GPUs by
  minimising the mean absolute percentage error.

``make fit-e2e`` (:mod:`lilou.latency.calibrate`) fits both and writes
``checkpoints/e2e_overhead``.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from lilou.errors import LilouInputError

#: Checkpoint folder name (under ``checkpoints/``).
E2E_OVERHEAD = "e2e_overhead"
#: Elementwise calls whose bytes / bandwidth is below this (ms) are floor-bound.
FLOOR_BOUND_MS = 1e-3


@dataclass(frozen=True)
class OverheadModel:
    scale: float
    gap_ms: float

    def kernel_ms(self, work_ms: np.ndarray) -> np.ndarray:
        """Each kernel's share of the end-to-end time (same shape as ``work_ms``)."""
        return np.maximum(self.scale * np.asarray(work_ms), self.gap_ms)

    def total_ms(self, work_ms: np.ndarray) -> float:
        return float(self.kernel_ms(work_ms).sum())

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def dispatch_gap_ms(latency_ms: np.ndarray, memory_ms: np.ndarray, gpu: np.ndarray) -> float:
    """Median over GPUs of the median latency of floor-bound calls (see the module docstring)."""
    medians = []
    for name in np.unique(gpu):
        rows = (gpu == name) & (memory_ms < FLOOR_BOUND_MS)
        if rows.any():
            medians.append(float(np.median(latency_ms[rows])))
    if not medians:
        raise ValueError("no floor-bound elementwise rows to read the dispatch gap from")
    return float(np.median(medians))


def fit_scale(work: Sequence[np.ndarray], labels_ms: Sequence[float], gap_ms: float) -> float:
    """The ``scale`` minimising the MAPE of ``sum(max(scale * work, gap))`` against the labels."""
    labels = np.asarray(labels_ms, dtype=np.float64)
    grid = np.exp(np.linspace(np.log(0.1), np.log(10.0), 801))
    best, best_error = 1.0, np.inf
    for _ in range(2):  # coarse grid, then a fine one around the best point
        errors = [mape([OverheadModel(s, gap_ms).total_ms(w) for w in work], labels) for s in grid]
        i = int(np.argmin(errors))
        if errors[i] < best_error:
            best, best_error = float(grid[i]), errors[i]
        grid = np.linspace(grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)], 201)
    return best


def mape(predicted: Sequence[float], labels: Sequence[float]) -> float:
    predicted, labels = np.asarray(predicted, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    return float(100 * np.mean(np.abs(predicted - labels) / labels))


def load_overhead(folder: str | os.PathLike[str]) -> dict:
    """The fitted parameters of ``checkpoints/e2e_overhead`` (``model.json``)."""
    path = Path(folder) / "model.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise LilouInputError(f"no end-to-end overhead checkpoint at {path}; fit one with `make fit-e2e`") from None
