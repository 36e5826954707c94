"""The shipped interval calibration (``calibration.json`` beside this module) and its lookups.

The file is written by ``make calibrate`` (:mod:`lilou.plan.fit`); reading it needs numpy only. It
holds, for a 90 % coverage:

* ``kernel``: conformal log bands ``{"lo", "hi"}`` per ``family|dtype|tier`` (tier: ``trained`` = the
  GPU itself is in the kernel model's training data, ``arch_seen`` = another GPU of its architecture
  class is, ``arch_unseen`` = none is; ``any`` pools the unseen tiers);
* ``extrapolated``: per family, the band of held-out kernels outside the range their model trained on;
* ``e2e``: the band of end-to-end predictions on held-out GPUs;
* ``ranges``: the measured feature ranges per ``architecture|dtype|family`` (lilou.plan.extrapolation).
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lilou.errors import MissingDataError
from lilou.runs import weights_fingerprint

CALIBRATION_FILE = Path(__file__).resolve().parent / "calibration.json"
#: Where a tier looks when its own pool is missing, widest last.
_FALLBACK_TIERS = {"trained": ("trained", "arch_seen", "any", "arch_unseen"),
                   "arch_seen": ("arch_seen", "any", "arch_unseen"),
                   "arch_unseen": ("arch_unseen", "any")}
#: Tiers from the nearest to the farthest from the measured GPUs.
_TIER_ORDER = ("trained", "arch_seen", "arch_unseen")
#: Kernel kinds without measurements run on the memory-bound fallback, fitted on elementwise rows.
FALLBACK_FAMILY = "elementwise"
#: Transposed convolutions (ConvTranspose: lilou.latency.kernel_model.transposed) have bands of their own, from
#: DeepBench's backward-data rows; a calibration file without them gives them the convolutions' band.
TRANSPOSED_FAMILY = "conv_transposed"
_STAND_IN_FAMILY = {TRANSPOSED_FAMILY: "conv"}
#: Families whose residuals are pooled per dtype when one family alone has too few held-out GPUs.
BAND_CLASS = {family: "memory-bound" for family in ("elementwise", "layernorm", "softmax", "reduction", "memory")}


@dataclass(frozen=True)
class Band:
    """Log bounds: a prediction ``p`` has the interval ``[p * exp(lo), p * exp(hi)]``."""

    lo: float
    hi: float
    calibrated: bool = True   # False: no held-out residual of this family and dtype; the family's widest band

    @property
    def width(self) -> float:
        return self.hi - self.lo

    def hull(self, other: Band) -> Band:
        return Band(min(self.lo, other.lo), max(self.hi, other.hi), self.calibrated and other.calibrated)


class Calibration:
    """Lookups over the calibration file's bands and ranges."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.coverage = float(data["coverage"])
        self.ranges: dict[str, dict[str, Any]] = data["ranges"]
        self._kernel = {key: Band(v["lo"], v["hi"]) for key, v in data["kernel"].items()}
        self._extrapolated = {key: Band(v["lo"], v["hi"]) for key, v in data["extrapolated"].items()}
        self.e2e = Band(data["e2e"]["lo"], data["e2e"]["hi"])
        self._cache: dict[tuple[str, str, str, bool], Band] = {}

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None) -> Calibration:
        return _load(str(path or CALIBRATION_FILE))

    @classmethod
    def shipped(cls) -> Calibration | None:
        """The shipped calibration, or None when its file is missing (intervals then collapse to the estimate,
        and a warning says so)."""
        try:
            return cls.load()
        except MissingDataError:
            return None

    @property
    def fingerprint(self) -> str:
        return self.data["kernel_model"]["fingerprint"]

    @property
    def trained_on(self) -> list[str]:
        return list(self.data["kernel_model"]["trained_on"])

    def kernel_band(self, family: str, dtype: str, tier: str, extrapolated: bool = False) -> Band:
        """The band of one kernel: its family, dtype and tier, widened when it is outside the measured range to the
        hull of the widest band of its family and dtype (every tier) and the extrapolated pool's."""
        key = (family, dtype, tier, extrapolated)
        if key not in self._cache:
            self._cache[key] = self._kernel_band(*key)
        return self._cache[key]

    def _known(self, family: str) -> str:
        """``family``, or the family whose bands stand in for it when the file has none of its own."""
        while not any(k.startswith(f"{family}|") for k in self._kernel):
            family = _STAND_IN_FAMILY.get(family, FALLBACK_FAMILY)
            if family == FALLBACK_FAMILY:
                break
        return family

    def _kernel_band(self, family: str, dtype: str, tier: str, extrapolated: bool) -> Band:
        family = self._known(family)
        # A tier farther from the measured GPUs is never narrower than a nearer one: with two or three held-out
        # GPUs per pool, a pool of near GPUs can come out wider (the P4's quirks), and the hull keeps the order.
        found = None
        for nearer in _TIER_ORDER[:_TIER_ORDER.index(tier) + 1]:
            band = next((self._kernel[f"{family}|{dtype}|{t}"] for t in _FALLBACK_TIERS[nearer]
                         if f"{family}|{dtype}|{t}" in self._kernel), None)
            if band is not None:
                found = band if found is None else found.hull(band)
        if found is None:  # too few held-out GPUs of this family and dtype: the sparse pools' hull
            sparse = [self._kernel[key] for key in (f"{family}|{dtype}|one_gpu", f"{BAND_CLASS.get(family)}|{dtype}|any")
                      if key in self._kernel]
            for band in sparse:
                found = band if found is None else found.hull(band)
        if found is None:  # no held-out residual of this dtype: the widest band the family has
            bands = [b for k, b in self._kernel.items() if k.startswith(f"{family}|")]
            found = Band(min(b.lo for b in bands), max(b.hi for b in bands), calibrated=False)
        if extrapolated:
            # at least the widest band of the family and dtype, and the extrapolated pool's where there is one. The
            # pool alone (before session 41) was narrower than the in-range bands it was hulled with (softmax +-0.07
            # from two folds against +-0.60), so an extrapolated FP32 kernel kept its in-range band.
            found = found.hull(self.widest(family, dtype))
            if family in self._extrapolated:
                found = found.hull(self._extrapolated[family])
        return found

    def widest(self, family: str, dtype: str) -> Band:
        bands = [b for k, b in self._kernel.items() if k.startswith(f"{family}|{dtype}|")] or \
                [b for k, b in self._kernel.items() if k.startswith(f"{family}|")]
        return Band(min(b.lo for b in bands), max(b.hi for b in bands))

    def pooled_band(self, family: str, dtype: str) -> Band | None:
        """The band over every unseen tier of a family and dtype (what the end-to-end band is set against)."""
        return self._kernel.get(f"{self._known(family)}|{dtype}|any")


@functools.cache
def _load(path: str) -> Calibration:
    file = Path(path)
    if not file.exists():
        from lilou.checkpoints import in_checkout

        remedy = "regenerate it with `make calibrate`" if in_checkout() else "reinstall lilou"
        raise MissingDataError(f"interval calibration {file} not found; {remedy}")
    return Calibration(json.loads(file.read_text()))


@functools.cache
def checkpoint_fingerprint(folder: str) -> str:
    """sha256 (16 hex) of a kernel checkpoint's weights, as :mod:`lilou.plan.fit` records it. The weights
    alone: config.json also records where the training code lived, which a refactor may move."""
    return weights_fingerprint(folder)
