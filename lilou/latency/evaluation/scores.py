"""How a prediction is scored against a measurement: absolute percentage error, and how well predictions order
GPUs (Spearman's rho and Kendall's tau-b over average ranks, written out so that `lilou eval` needs no scipy; the
tests check them against scipy's)."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def ape(predicted: float, measured: float) -> float:
    """Absolute percentage error (%)."""
    return 100.0 * abs(predicted - measured) / measured


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks, ties sharing the mean of their positions."""
    x = np.asarray(values, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson correlation of the average ranks (nan when undefined)."""
    if len(x) != len(y):
        raise ValueError("spearman: x and y differ in length")
    if len(x) < 2:
        return math.nan
    rx, ry = average_ranks(x), average_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / denominator) if denominator else math.nan


def kendall(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b (ties corrected; nan when undefined)."""
    if len(x) != len(y):
        raise ValueError("kendall: x and y differ in length")
    n = len(x)
    concordant = discordant = ties_x = ties_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif dx == dy:
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denominator if denominator else math.nan
