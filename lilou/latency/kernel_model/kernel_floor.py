"""The smallest GPU time of a kernel, per family: measured, not learned.

The kernel model prices GPU work as roofline x slowdown, which nothing keeps above what a GPU takes to start a grid,
schedule its blocks and retire them: it priced the smallest FP16 GEMMs and convolutions of a batch-1 model at tens
of nanoseconds on Hopper and Blackwell. Behind the default launch gap (tens of microseconds per kernel) such a kernel
hides; with ``--launch-gap-us 0`` (CUDA-graph replay) it set the total, 0.5 us per kernel for BERT-base on a B200.
The floor of each family is the fastest launch-free measurement of it on any GPU (``kernel_floor.json``, written by
``scripts/kernel_floors.py``: AIConfigurator's graph-replayed GEMMs, 1.48 us; Vidur's profiled element-wise kernels,
1 us, the floor of every family measured at no small size).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources

import numpy as np

from lilou.latency.kernel_model.kernel import FAMILIES, KernelSpec

PARAMETERS_FILE = "kernel_floor.json"


@lru_cache(maxsize=1)
def family_floors_ms() -> dict[str, float]:
    """Family -> its floor in ms (``kernel_floor.json``)."""
    data = json.loads(resources.files("lilou.latency.kernel_model").joinpath(PARAMETERS_FILE).read_text())
    return {family: float(data["floors"][family]["floor_us"]) / 1000.0 for family in FAMILIES}


def kernel_floor_ms(specs: Sequence[KernelSpec]) -> np.ndarray:
    """Each kernel's floor in ms, one launch's."""
    floors = family_floors_ms()
    return np.array([floors[spec.family] for spec in specs], dtype=np.float64)
