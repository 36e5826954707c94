"""Launch overhead: how per-kernel GPU work adds up to end-to-end time in eager mode.

In eager PyTorch the host issues kernels one after another, asynchronously: issuing
one takes the host ``gap_ms``, and the GPU runs the queued kernels in order. While
the queue holds work the host's issue time hides behind it; when kernels are
shorter than the issue time the GPU idles, waiting for the host. With kernel ``i``
issued at ``(i + 1) * gap_ms`` and taking ``g_i = scale * work_i`` on the GPU,

    end_i = max(end_{i-1}, (i + 1) * gap_ms) + g_i

and the end-to-end latency is the last kernel's end. Each kernel's share of it is
its GPU time plus the GPU's wait for the host just before it, so the shares add up
to the total. A model of long kernels costs the sum of its GPU work (the host runs
ahead); one of tiny kernels costs ``gap_ms`` per kernel (the host is the bottleneck). A kernel may stand for
several back-to-back launches (a Loop or Scan left as one node, launched by eager once per iteration): each is
issued ``gap_ms`` after the one before (:func:`queue_shares`).

- ``gap_ms`` is the host's issue time per kernel. It is read from the real
  per-kernel rows, not from end-to-end labels: an op timed alone with CUDA events
  (as NeuSight did) takes the dispatch time when the kernel itself is tiny, so
  ``gap_ms`` is the median, over the training GPUs, of the median latency of
  elementwise calls whose DRAM traffic takes under 1 µs. The end-to-end labels
  (large transformers whose big kernels keep the queue full) cannot pin it down.
- ``scale`` corrects the per-kernel model's bias when its kernels run back to back
  in real models; it is fitted on the end-to-end labels of the training GPUs by
  minimising the mean absolute percentage error.

Low-power boards (P4, T4, L4) running compute below their spec-sheet peak are the
per-kernel model's business (``power_limited`` in :mod:`lilou.latency.kernel_model.model`): their
kernel rows show it, so it is learned there, not here.

``make fit-e2e`` (:mod:`lilou.latency.composition.calibrate`) fits the scale and writes
``checkpoints/e2e_overhead``.
"""
from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from lilou.checkpoints import E2E_OVERHEAD  # noqa: F401 - re-exported: the checkpoint folder name
from lilou.errors import LilouInputError

#: Elementwise calls whose bytes / bandwidth is below this (ms) are floor-bound.
FLOOR_BOUND_MS = 1e-3


#: The launch gap's range on other hosts, as factors of the fitted gap (session 41). Nothing measured a whole model's
#: launch waits: the fitted gap is the median over NeuSight's five training hosts of their floor-bound elementwise
#: calls' median time (``dispatch_gap_ms``: 29.9 us on the A100's and T4's hosts, 30.2 P4, 36.8 V100, 48.7 P100).
#: The range is the hull of those hosts' 5th and 95th percentiles of the same calls (``train`` split: 25.4 us on the
#: T4's host, 57.6 on the P100's), over the shipped gap: what the five 2023 hosts spread over, not a conformal
#: quantile (five hosts cannot make one). A faster host (a recent CPU, CUDA graphs, TensorRT) is below it: its
#: gap is for ``--launch-gap-us``. ``tests/test_intervals.py`` recomputes it from the rows.
LAUNCH_GAP_PERCENTILES = (5.0, 95.0)
LAUNCH_GAP_RANGE = (0.02542304 / 0.03020160049200058, 0.05761536 / 0.03020160049200058)
#: The range of a gap given for the caller's own host (``--launch-gap-us``), as factors of it: the widest spread of one
#: host's floor-bound call times around its median, the 5th and 95th percentiles over the median of each of the five
#: hosts, hulled (the P100's host 0.65, the T4's 1.27). A gap measured on one host still varies this much call to call.
LAUNCH_GAP_RANGE_GIVEN = (0.6545239493601306, 1.2736278952784699)


#: Range of the overhead ``scale`` searched when fitting.
GRID_LOW, GRID_HIGH = 0.1, 10.0


@dataclass(frozen=True)
class OverheadModel:
    scale: float
    gap_ms: float

    def kernel_ms(self, work_ms: np.ndarray, host_waits: np.ndarray | None = None,
                  launches: np.ndarray | None = None) -> np.ndarray:
        """Each kernel's share of the end-to-end time (the shape of ``work_ms``: [kernels] in execution
        order, or [kernels, devices]); the shares sum to the total. ``host_waits``: bool per kernel, the host
        waits for the GPU after it; ``launches``: per kernel, its back-to-back launches (:func:`queue_shares`)."""
        return queue_shares(self.gpu_ms(work_ms), self.gap_ms, host_waits, launches)

    def gpu_ms(self, work_ms: np.ndarray) -> np.ndarray:
        """Each kernel's time on the GPU in a running model: its work, scaled."""
        return self.scale * np.asarray(work_ms, dtype=np.float64)

    def total_ms(self, work_ms: np.ndarray) -> float:
        return float(self.kernel_ms(work_ms).sum())

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def queue_shares(gpu_ms: np.ndarray, issue_ms: float, host_waits: np.ndarray | None = None,
                 launches: np.ndarray | None = None) -> np.ndarray:
    """Each kernel's GPU time plus the GPU's wait for the host before it (see the module docstring).

    ``end_i = max over k <= i of ((k + 1) * issue_ms + sum(gpu_ms[k..i]))``, computed with prefix sums
    along axis 0; the shares are the increments of ``end``.

    ``launches``: per kernel, the launches it is made of (default 1): a Loop or Scan left as one node, which eager
    runs as its body's kernels once per iteration (:mod:`lilou.latency.composition.eager_calls`), is ``L_k``
    back-to-back launches of ``gpu_k / L_k`` each, issued ``issue_ms`` apart. The queue of those launches, with
    ``C_k`` the launches through kernel ``k`` (``C_0 = 0``), ends kernel ``i`` at

        end_i = max over k <= i of max((C_{k-1} + 1) g + sum(gpu[k..i]), C_k g + gpu_k / L_k + sum(gpu[k+1..i]))

    the launch queue's own ``max over launches m <= the last of i of (m g + the GPU time from m on)`` taken over
    kernel ``k``'s launches ``m = C_{k-1} + j``: ``(C_{k-1} + j) g + (L_k - j + 1) gpu_k / L_k`` is linear in ``j``,
    so its maximum is at the first launch or the last. With every ``L_k = 1`` both are the first term, the formula
    above (and the result is the same to the bit: the second term is not computed there).

    ``host_waits``: bool per kernel, the host waits for the GPU to finish it before issuing the next one (a
    device-to-host copy that synchronises: ``torch.nonzero``'s count, :mod:`lilou.latency.composition.eager_calls`).
    The queue drains there: the host issues the next kernel ``issue_ms`` after that end, so the kernels after it
    form a queue of their own, started at that end.
    """
    if host_waits is not None and np.any(host_waits):
        cuts = np.flatnonzero(np.asarray(host_waits, dtype=bool)[:-1]) + 1
        parts = np.split(np.asarray(gpu_ms), cuts)
        counts = np.split(np.asarray(launches), cuts) if launches is not None else [None] * len(parts)
        return np.concatenate([queue_shares(part, issue_ms, launches=count) for part, count in zip(parts, counts)],
                              axis=0)
    gpu = np.asarray(gpu_ms, dtype=np.float64)
    shape = (-1,) + (1,) * (gpu.ndim - 1)
    count = np.ones(len(gpu)) if launches is None else np.asarray(launches, dtype=np.float64).reshape(len(gpu))
    through = np.cumsum(count)  # C_k: launches issued through kernel k
    issued = ((through - count + 1) * issue_ms).reshape(shape)  # kernel k's first launch
    done = np.cumsum(gpu, axis=0)
    start = issued - (done - gpu)
    repeated = (count > 1).reshape(shape)
    if repeated.any():  # kernel k's last launch: issued at C_k g, then gpu_k / L_k on the GPU
        last = (through * issue_ms).reshape(shape) + gpu / count.reshape(shape) - done
        start = np.where(repeated, np.maximum(start, last), start)
    end = done + np.maximum.accumulate(start, axis=0)
    return np.diff(end, axis=0, prepend=np.zeros((1,) + gpu.shape[1:]))


def queue_envelope(gpu_ms: np.ndarray) -> np.ndarray:
    """The queue's total as a function of the issue time ``g`` and a GPU-time scale ``s``, for fitting them.

    The total of :func:`queue_shares` is ``max over k of ((k + 1) g + s * sum(gpu_ms[k:]))``: one line per kernel.
    For ``g, s >= 0`` only the vertices of the upper convex hull of the points ``(k + 1, sum(gpu_ms[k:]))`` can be
    the maximum; they are returned as rows ``(issued kernels, GPU ms from there on)``, a handful for a whole step.
    One launch per kernel: what it is fitted and used on (the end-to-end labels' transformers, ``lilou llm``'s steps)
    holds no Loop or Scan, the only kernels of more (:func:`queue_shares`'s ``launches``).
    """
    gpu = np.asarray(gpu_ms, dtype=np.float64)
    if len(gpu) == 0:
        return np.zeros((1, 2))
    suffix = np.cumsum(gpu[::-1])[::-1]
    hull: list[tuple[float, float]] = []
    for point in zip(np.arange(1, len(gpu) + 1, dtype=np.float64), suffix):
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (point[1] - y1) - (y2 - y1) * (point[0] - x1) >= 0:  # hull[-1] is not above the chord
                hull.pop()
            else:
                break
        hull.append(point)
    return np.asarray(hull, dtype=np.float64)


def queue_total(envelope: np.ndarray, issue_ms: float, scale: float = 1.0) -> float:
    """The queue's total time from :func:`queue_envelope` at issue time ``issue_ms`` and GPU-time ``scale``."""
    return float(np.max(envelope[:, 0] * issue_ms + envelope[:, 1] * scale))


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


def fit_overhead(work: Sequence[np.ndarray], labels_ms: Sequence[float], gap_ms: float) -> OverheadModel:
    """The ``scale`` minimising the MAPE of the queue's total times (one work array per label) against
    the labels."""
    scale, _ = _best_scale(work, np.asarray(labels_ms, dtype=np.float64), gap_ms)
    return OverheadModel(scale, gap_ms)


def _best_scale(work: Sequence[np.ndarray], labels: np.ndarray, gap_ms: float) -> tuple[float, float]:
    """The ``scale`` minimising the MAPE of the queue's total time (``queue_shares(scale * work).sum()``)
    against the labels, and that MAPE."""
    # The total is max over k of ((k + 1) * gap + scale * (work from kernel k on)): lines in the scale.
    # Only kernels where the GPU can wait for the host (issued after all the work before them could
    # finish at the smallest scale tried) can set the maximum besides the first one.
    lines = []
    for w in work:
        w = np.asarray(w, dtype=np.float64)
        remaining = np.cumsum(w[::-1])[::-1]
        issued = np.arange(1, len(w) + 1) * gap_ms
        keep = issued - GRID_LOW * (remaining[0] - remaining) > gap_ms - 1e-12
        keep[0] = True
        lines.append((issued[keep], remaining[keep]))

    def errors(scales: np.ndarray) -> np.ndarray:
        totals = np.empty((len(lines), len(scales)))
        for i, (issued, remaining) in enumerate(lines):
            totals[i] = np.max(issued[:, None] + remaining[:, None] * scales[None, :], axis=0)
        return 100 * np.mean(np.abs(totals - labels[:, None]) / labels[:, None], axis=0)

    # The MAPE is piecewise linear in the scale and may have several local minima: a coarse grid, then a
    # fine one around each of its three best local minima.
    coarse = np.exp(np.linspace(np.log(GRID_LOW), np.log(GRID_HIGH), 801))
    e = errors(coarse)
    padded = np.concatenate([[np.inf], e, [np.inf]])
    minima = np.flatnonzero((padded[1:-1] <= padded[:-2]) & (padded[1:-1] <= padded[2:]))
    best, best_error = float(coarse[np.argmin(e)]), float(np.min(e))
    for i in minima[np.argsort(e[minima])][:3]:
        fine = np.linspace(coarse[max(i - 1, 0)], coarse[min(i + 1, len(coarse) - 1)], 201)
        f = errors(fine)
        if f.min() < best_error:
            best, best_error = float(fine[np.argmin(f)]), float(f.min())
    return best, best_error


def mape(predicted: Sequence[float], labels: Sequence[float]) -> float:
    predicted, labels = np.asarray(predicted, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    return float(100 * np.mean(np.abs(predicted - labels) / labels))


class StaleOverheadWarning(UserWarning):
    """The end-to-end constants were fitted on another kernel model than the one loaded beside them."""


def load_overhead(folder: str | os.PathLike[str], kernel_folder: str | os.PathLike[str] | None = None) -> dict:
    """The fitted parameters of ``checkpoints/e2e_overhead`` (``model.json``).

    ``kernel_folder``: the kernel checkpoint they will be used with; when the fit recorded the fingerprint of the
    kernel model it was fitted on (config.json ``kernel_fingerprint``) and this one's differs, a
    :class:`StaleOverheadWarning` says so (a retrained kernel model used the old constants silently)."""
    if Path(folder).exists() and not Path(folder).is_dir():
        raise LilouInputError(f"no end-to-end overhead checkpoint in {folder}: it is a file, not a checkpoint's folder")
    path = Path(folder) / "model.json"
    try:
        params = json.loads(path.read_text())
    except FileNotFoundError:
        raise LilouInputError(f"no end-to-end overhead checkpoint at {path}; fit one with `make fit-e2e`") from None
    if kernel_folder is not None:
        stale = stale_kernel_note(folder, kernel_folder)
        if stale:
            warnings.warn(stale, StaleOverheadWarning, stacklevel=2)
    return params


def stale_kernel_note(folder: str | os.PathLike[str], kernel_folder: str | os.PathLike[str]) -> str | None:
    """Why the constants in ``folder`` do not belong to the kernel model in ``kernel_folder``, or None: they do, or
    the fit recorded no fingerprint (fits before it did), or a file is missing (the loaders say so)."""
    from lilou.runs import weights_fingerprint

    try:
        recorded = json.loads((Path(folder) / "config.json").read_text()).get("kernel_fingerprint")
        if not recorded:
            return None
        loaded = weights_fingerprint(kernel_folder)
    except (OSError, ValueError, AttributeError):
        return None
    if loaded == recorded:
        return None
    return (f"end-to-end constants {folder} were fitted on a kernel model of fingerprint {recorded}, not on the one "
            f"loaded ({kernel_folder}, {loaded}): refit them on it (make fit-e2e, or python -m lilou.train "
            "experiment=e2e_calibration) before trusting end-to-end figures")
