"""Split-conformal bounds on log residuals, and the coverage of intervals (numpy only).

A residual is ``log(measured / predicted)``. For a target coverage ``1 - alpha`` the interval of a
new prediction ``p`` is ``[p * exp(lo), p * exp(hi)]`` with ``lo`` and ``hi`` the conformal
quantiles of the calibration residuals: the ``ceil((n + 1) * alpha / 2)``-th smallest and the
``ceil((n + 1) * (1 - alpha / 2))``-th smallest (:func:`conformal_bounds`), or symmetric bounds from the
quantile of ``|r|`` (:func:`symmetric_bounds`), or the two-level band of a new GPU's bias and its rows' spread around it
(:func:`two_level_bounds`). Two one-sided bounds keep a model that is biased the same way
on every GPU where its errors are; the shipped calibration (:mod:`lilou.plan.fit`) uses symmetric bounds,
because on GPUs it never saw the model is biased both ways (docs/intervals.md).

Residuals of one held-out GPU are not exchangeable with those of another: a fold's rows share that
GPU's bias. ``weights`` let every GPU (or every end-to-end workload) count once, whatever its row
count; the weighted quantile is then the smallest residual whose cumulative weight reaches the level,
with the (n + 1) correction applied to the effective number of groups.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: The coverage Lilou's intervals are calibrated for.
COVERAGE = 0.9


def conformal_bounds(residuals: Sequence[float] | np.ndarray, coverage: float = COVERAGE,
                     weights: Sequence[float] | np.ndarray | None = None) -> tuple[float, float]:
    """(lo, hi) log bounds covering ``coverage`` of new residuals like these (split-conformal).

    ``weights`` (same length, > 0): relative weight of each residual; the finite-sample correction uses
    the number of residuals when unweighted. Raises ValueError when there are too few residuals for the
    level (fewer than ``ceil(1 / (alpha / 2)) - 1``): the interval would be unbounded.
    """
    r, w = _checked(residuals, coverage, weights, "conformal_bounds")
    alpha = 1.0 - coverage
    low_rank = math.ceil((len(r) + 1) * alpha / 2)
    high_rank = math.ceil((len(r) + 1) * (1 - alpha / 2))
    return _order_statistic(r, w, low_rank, coverage), _order_statistic(r, w, high_rank, coverage)


def symmetric_bounds(residuals: Sequence[float] | np.ndarray, coverage: float = COVERAGE,
                     weights: Sequence[float] | np.ndarray | None = None) -> tuple[float, float]:
    """(-q, q): ``q`` the split-conformal ``coverage`` quantile of ``|residual|`` (the
    ``ceil((n + 1) * coverage)``-th smallest, weighted as :func:`conformal_bounds` does).

    For pools whose groups are biased in different directions: a held-out GPU may be fast where the
    calibration GPUs were slow, and two one-sided bounds fitted on the others then miss it on the side they
    never saw (the end-to-end labels: the V100 fold's residuals are all below the other four GPUs' 5th
    percentile but one)."""
    r, w = _checked(residuals, coverage, weights, "symmetric_bounds")
    q = _order_statistic(np.abs(r), w, math.ceil((len(r) + 1) * coverage), coverage)
    return -q, q


def two_level_bounds(residuals: Sequence[float] | np.ndarray, groups: Sequence[object] | np.ndarray,
                     coverage: float = COVERAGE) -> tuple[float, float]:
    """(-q, q): ``q`` the ``coverage`` quantile of ``|b + e|``, a held-out GPU's bias ``b`` and a row's spread ``e``
    around its own GPU's bias drawn independently.

    Two levels: each group's bias is the median of its residuals (one per GPU, each weight 1 / groups) and its rows'
    spread is their residuals minus that median (each group's rows together weight 1 / groups). The quantile is of
    their sum by convolution, every (bias, spread) pair weighted by the product, ranked as :func:`symmetric_bounds`
    ranks (``ceil((n + 1) * coverage)`` over the n pairs). A sum of the two quantiles would assume the largest
    bias meets the largest spread and covers more than ``coverage``; the convolution is the distribution of a new
    GPU's residual if the two are independent. With one group the pairs are its residuals: the symmetric band."""
    r, _ = _checked(residuals, coverage, None, "two_level_bounds")
    keys = np.asarray(groups, dtype=object).astype(str)
    if keys.shape != r.shape:
        raise ValueError("groups must name one group per residual")
    names, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    bias = np.array([np.median(r[inverse == g]) for g in range(len(names))])
    spread = r - bias[inverse]
    spread_weight = 1.0 / (len(names) * counts[inverse])
    pairs = np.abs(bias[:, None] + spread[None, :]).ravel()
    weights = np.broadcast_to(spread_weight / len(names), (len(names), len(r))).ravel()
    q = _order_statistic(pairs, weights, math.ceil((len(pairs) + 1) * coverage), coverage)
    return -q, q


def _checked(residuals, coverage: float, weights, caller: str) -> tuple[np.ndarray, np.ndarray | None]:
    r = np.asarray(residuals, dtype=np.float64)
    if r.ndim != 1 or len(r) == 0 or not np.isfinite(r).all():
        raise ValueError(f"{caller} needs a non-empty 1-D array of finite residuals")
    if not 0.0 < coverage < 1.0:
        raise ValueError(f"coverage must lie in (0, 1), not {coverage}")
    if weights is None:
        return r, None
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != r.shape or not (w > 0).all():
        raise ValueError("weights must be positive, one per residual")
    return r, w


def _order_statistic(values: np.ndarray, weights: np.ndarray | None, rank: int, coverage: float) -> float:
    """The ``rank``-th smallest of ``values`` (1-based); weighted, the smallest value whose cumulative weight
    reaches ``rank / n`` (the unweighted rule when weights are equal). A rank outside 1..n is ValueError."""
    n = len(values)
    if rank < 1 or rank > n:
        raise ValueError(f"{n} residuals are too few for a {100 * coverage:g} % conformal interval")
    if weights is None:
        return float(np.sort(values)[rank - 1])
    order = np.argsort(values, kind="mergesort")
    cumulative = np.cumsum(weights[order]) / weights.sum()
    return float(values[order[min(np.searchsorted(cumulative, rank / n - 1e-12), n - 1)]])


def group_weights(groups: Sequence[object] | np.ndarray) -> np.ndarray:
    """Weight 1 / (rows of its group) per row: every group (GPU, workload) counts once."""
    keys = np.asarray(groups, dtype=object)
    _, inverse, counts = np.unique(keys.astype(str), return_inverse=True, return_counts=True)
    return 1.0 / counts[inverse]


def log_residuals(predicted: Sequence[float] | np.ndarray, measured: Sequence[float] | np.ndarray) -> np.ndarray:
    """``log(measured / predicted)``; both must be positive."""
    p, m = np.asarray(predicted, dtype=np.float64), np.asarray(measured, dtype=np.float64)
    if (p <= 0).any() or (m <= 0).any():
        raise ValueError("log residuals need positive predicted and measured times")
    return np.log(m / p)


def covered(predicted: np.ndarray, measured: np.ndarray, lo: float | np.ndarray, hi: float | np.ndarray) -> np.ndarray:
    """bool per row: ``measured`` lies inside ``[predicted * exp(lo), predicted * exp(hi)]``."""
    r = log_residuals(predicted, measured)
    return (r >= lo) & (r <= hi)


def coverage(predicted: np.ndarray, measured: np.ndarray, lo: float | np.ndarray, hi: float | np.ndarray,
             weights: np.ndarray | None = None) -> float:
    """Share (0..1) of ``measured`` inside the intervals, weighted when ``weights`` are given."""
    inside = covered(predicted, measured, lo, hi).astype(np.float64)
    return float(np.average(inside, weights=weights))


def median_width(lo: float | np.ndarray, hi: float | np.ndarray) -> float:
    """Median relative width of intervals ``[p e^lo, p e^hi]``: ``e^hi - e^lo`` (0.3 = 30 % of the estimate)."""
    return float(np.median(np.exp(np.asarray(hi, dtype=np.float64)) - np.exp(np.asarray(lo, dtype=np.float64))))
