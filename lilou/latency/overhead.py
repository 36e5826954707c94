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

- ``power_exponent`` slows compute on low-power boards under sustained load. The
  per-kernel rows were timed in short bursts; a whole model keeps the GPU busy for
  seconds, and the 70–75 W inference boards (P4, T4) then run under their power limit
  at lower clocks: their end-to-end labels are 1.4–1.6x the summed kernel predictions,
  against 0.9–1.1x on the 250 W boards. On a board of power ``P`` below
  ``reference_power_w`` (150 W, between the two classes the labels cover) compute runs
  at peak / f with ``f = (reference_power_w / P) ** power_exponent``; at or above it,
  f = 1. A kernel whose compute time is r times its memory time takes
  ``max(f r, 1) / max(r, 1)`` times its work: f when compute-bound, about 1 when far
  from it, never decreasing as a kernel grows. A MIG slice keeps its board's power.
  The exponent is fitted with ``scale`` on the end-to-end labels; it stays 0 when no
  labelled board is below the reference.

``make fit-e2e`` (:mod:`lilou.latency.calibrate`) fits them and writes
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


#: Boards below this power (W) slow down under sustained compute; see the module docstring.
REFERENCE_POWER_W = 150.0
#: Exponents tried when fitting; 0 (no slowdown) comes first, so it wins ties.
POWER_EXPONENTS = np.round(np.arange(0.0, 2.0 + 1e-9, 0.01), 2)


def sustained_slowdown(compute_ratio: np.ndarray, board_power_w: np.ndarray | float, exponent: float,
                       reference_power_w: float = REFERENCE_POWER_W) -> np.ndarray:
    """Factor (>= 1) on each kernel's work under sustained load; shapes broadcast as numpy does.

    ``compute_ratio`` is the kernel's FLOPs / peak over its bytes / bandwidth on the device.
    """
    limited = compute_slowdown(board_power_w, exponent, reference_power_w)
    ratio = np.asarray(compute_ratio, dtype=np.float64)
    return np.maximum(limited * ratio, 1.0) / np.maximum(ratio, 1.0)


def compute_slowdown(board_power_w: np.ndarray | float, exponent: float,
                     reference_power_w: float = REFERENCE_POWER_W) -> np.ndarray:
    """f = (reference / power) ** exponent below the reference power, else 1: how much slower a
    compute-bound kernel runs under sustained load."""
    power = np.asarray(board_power_w, dtype=np.float64)
    return (reference_power_w / np.minimum(power, reference_power_w)) ** exponent


@dataclass(frozen=True)
class GraphWork:
    """One graph's per-kernel work on one device, with what the overhead model needs of it."""

    work_ms: np.ndarray        # [kernels]
    compute_ratio: np.ndarray  # [kernels] FLOPs / peak over bytes / bandwidth
    board_power_w: float


@dataclass(frozen=True)
class OverheadModel:
    scale: float
    gap_ms: float
    power_exponent: float = 0.0
    reference_power_w: float = REFERENCE_POWER_W

    def kernel_ms(self, work_ms: np.ndarray, compute_ratio: np.ndarray,
                  board_power_w: np.ndarray | float) -> np.ndarray:
        """Each kernel's share of the end-to-end time (the shape of ``work_ms``: [kernels] or
        [kernels, devices] with ``board_power_w`` per device)."""
        slowdown = sustained_slowdown(compute_ratio, board_power_w, self.power_exponent, self.reference_power_w)
        return np.maximum(self.scale * np.asarray(work_ms) * slowdown, self.gap_ms)

    def total_ms(self, graph: GraphWork) -> float:
        return float(self.kernel_ms(graph.work_ms, graph.compute_ratio, graph.board_power_w).sum())

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


def fit_overhead(graphs: Sequence[GraphWork], labels_ms: Sequence[float], gap_ms: float,
                 fit_power: bool = True) -> OverheadModel:
    """``scale`` and ``power_exponent`` minimising the MAPE of the summed kernel times against the labels
    (a grid over the exponent, each with its best scale); ``fit_power=False`` keeps the exponent at 0."""
    labels = np.asarray(labels_ms, dtype=np.float64)
    best, best_error = OverheadModel(1.0, gap_ms), np.inf
    for exponent in POWER_EXPONENTS if fit_power else POWER_EXPONENTS[:1]:
        work = [g.work_ms * sustained_slowdown(g.compute_ratio, g.board_power_w, float(exponent)) for g in graphs]
        scale, error = _best_scale(work, labels, gap_ms)
        if error < best_error - 1e-9:
            best, best_error = OverheadModel(scale, gap_ms, float(exponent)), error
    return best


def _best_scale(work: Sequence[np.ndarray], labels: np.ndarray, gap_ms: float) -> tuple[float, float]:
    """The ``scale`` minimising the MAPE of ``sum(max(scale * work, gap))``, and that MAPE."""
    # sum(max(s w, gap)) = gap * #(w <= gap / s) + s * sum(w > gap / s): one search per scale.
    ordered = [np.sort(np.asarray(w, dtype=np.float64)) for w in work]
    tails = [np.concatenate([np.cumsum(w[::-1])[::-1], [0.0]]) for w in ordered]

    def errors(scales: np.ndarray) -> np.ndarray:
        totals = np.empty((len(ordered), len(scales)))
        for i, (w, tail) in enumerate(zip(ordered, tails)):
            below = np.searchsorted(w, gap_ms / scales, side="right")
            totals[i] = gap_ms * below + scales * tail[below]
        return 100 * np.mean(np.abs(totals - labels[:, None]) / labels[:, None], axis=0)

    grid = np.exp(np.linspace(np.log(0.1), np.log(10.0), 801))
    best, best_error = 1.0, np.inf
    for _ in range(2):  # coarse grid, then a fine one around the best point
        e = errors(grid)
        i = int(np.argmin(e))
        if e[i] < best_error:
            best, best_error = float(grid[i]), float(e[i])
        grid = np.linspace(grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)], 201)
    return best, best_error


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
