"""90 % intervals and extrapolation flags of one graph's kernels on many devices (numpy only).

Per kernel: its predicted share of the end-to-end time times ``exp`` of the conformal band of its
family, dtype and tier (:mod:`lilou.plan.calibration`), widened when it is extrapolated.

End to end, the kernel bands are **not** summed as if independent (that would shrink the interval
with the number of kernels, while one GPU's errors are shared by all its kernels). The end-to-end
band comes from end-to-end residuals on held-out GPUs, and is widened two ways:

* by the time-weighted ratio of each kernel's tier band to its family's pooled band (>= 1): an
  architecture with no measured GPU gets the wider band its kernels have;
* the share of time on kernels the end-to-end labels never covered (extrapolated kernels, dtypes other
  than FP32) takes its kernels' own bands, added up as fully correlated (bounds summed), not in
  quadrature.

The bands go on each kernel's GPU work, and the launch queue is run again at the ends of the bands: the host's
launch waits are not widened by the kernels' errors (:func:`_queued_bounds`). They carry the launch gap's own range
instead (``gap_range``: :data:`lilou.latency.composition.overhead.LAUNCH_GAP_RANGE`, the spread of NeuSight's five
hosts), per kernel as end to end.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
import dataclasses
from dataclasses import dataclass

import numpy as np

from lilou.hardware import Device
from lilou.hardware.database import architecture_class
from lilou.latency.composition.end_to_end import GraphKernels
from lilou.latency.composition.monotone import dominated_devices, dominating_devices
from lilou.latency.kernel_model.features import KernelBatch
from lilou.plan.calibration import FALLBACK_FAMILY, TRANSPOSED_FAMILY, Calibration
from lilou.plan.extrapolation import (fused_attention, log2_waves, outside, range_features, thread_blocks,
                                      unmeasured_conv_forms, unmeasured_shapes)

#: Dtypes the end-to-end labels measured (NeuSight: FP32 PyTorch eager).
E2E_DTYPES = frozenset({"fp32"})


@dataclass(frozen=True)
class Intervals:
    """Per kernel (rows) and device (columns), and per device."""

    kernel_lo: np.ndarray     # ms
    kernel_hi: np.ndarray
    extrapolated: np.ndarray  # bool
    total_lo: np.ndarray      # ms per device
    total_hi: np.ndarray
    extrapolated_share: np.ndarray  # 0..1 per device: share of the predicted time on extrapolated kernels
    uncalibrated: list[str]   # "family dtype" pairs with no held-out residuals (widest band used), every device
    dtypes: list[str]         # each device's precision
    widened: np.ndarray | None = None      # bool per device: the extrapolation flags widened the end-to-end bounds
    wait_share: np.ndarray | None = None   # 0..1 per device: share of the estimate waiting for the host's launches
    uncalibrated_by_device: list[list[str]] | None = None  # ``uncalibrated`` of each device's own kernels

    def uncalibrated_of(self, column: int) -> list[str]:
        """The "family dtype" pairs of device ``column``'s own kernels with no held-out residuals (all of
        ``uncalibrated`` where they were not kept per device): a prediction priced beside an FP8 GPU was told its
        "fp8" kernels had none (session 42)."""
        return self.uncalibrated if self.uncalibrated_by_device is None else self.uncalibrated_by_device[column]

    def interval(self, column: int) -> tuple[float, float]:
        return float(self.total_lo[column]), float(self.total_hi[column])

    def first(self, count: int) -> Intervals:
        """The intervals of the first ``count`` devices (``uncalibrated``: theirs, not the related devices')."""
        by_device = None if self.uncalibrated_by_device is None else self.uncalibrated_by_device[:count]
        return Intervals(kernel_lo=self.kernel_lo[:, :count], kernel_hi=self.kernel_hi[:, :count],
                         extrapolated=self.extrapolated[:, :count], total_lo=self.total_lo[:count],
                         total_hi=self.total_hi[:count], extrapolated_share=self.extrapolated_share[:count],
                         uncalibrated=self.uncalibrated if by_device is None else sorted({p for ps in by_device for p in ps}),
                         dtypes=self.dtypes[:count],
                         widened=None if self.widened is None else self.widened[:count],
                         wait_share=None if self.wait_share is None else self.wait_share[:count],
                         uncalibrated_by_device=by_device)

    def ordered_by_dominance(self, devices: Sequence[Device]) -> Intervals:
        """End-to-end bounds that keep the order of ``devices`` a dominating device never runs slower on
        (:func:`lilou.latency.composition.monotone.dominates`: a slice's whole GPU, an L40's L40S): a device's upper
        bound is at most that of every device of ``devices`` it dominates, its lower bound at least that of every
        one dominating it. Both hold with the same 90 %: the bigger device's time is at most the smaller's.

        The bands of twin boards differ where one was measured and the other not (the A100-PCIE-40GB's narrower
        than the A100-SXM4-40GB's): ResNet-50 at batch 1 had an upper bound 11 % higher on the SXM4 board, at the
        same estimate. Set-independent only when ``devices`` holds every device related to the ones read
        (:func:`with_related_devices`)."""
        lo, hi = self.total_lo.copy(), self.total_hi.copy()
        column = {device.name: j for j, device in enumerate(devices)}
        for j, device in enumerate(devices):
            below = [column[o.name] for o in dominated_devices(device) if o.name in column]
            above = [column[o.name] for o in dominating_devices(device) if o.name in column]
            if below:
                hi[j] = min(hi[j], float(self.total_hi[below].min()))
            if above:
                lo[j] = max(lo[j], float(self.total_lo[above].max()))
        return dataclasses.replace(self, total_lo=lo, total_hi=hi)


def with_related_devices(devices: Sequence[Device]) -> list[Device]:
    """``devices``, then every device that dominates or is dominated by one of them (once each): what
    :meth:`Intervals.ordered_by_dominance` needs for bounds that do not depend on which devices were asked for."""
    asked = {device.name for device in devices}
    extra: dict[str, Device] = {}
    for device in devices:
        for other in (*dominating_devices(device), *dominated_devices(device)):
            if other.name not in asked:
                extra.setdefault(other.name, other)
    return [*devices, *extra.values()]


def device_tier(device: Device, trained_on: Sequence[str], trained_archs: frozenset[str] | None = None) -> str:
    """``trained`` (this very GPU, whole, is in the kernel model's data), ``arch_seen`` or ``arch_unseen``
    (``trained_archs``: the architecture classes of ``trained_on``, when the caller has them).

    A MIG slice is ``arch_unseen`` (since session 41; it was its GPU's ``arch_seen``): no source measured a slice,
    and a 1g slice (1/7 of the SMs, 1/8 of the bandwidth and L2) is a regime no whole board of its architecture
    stands for; the farthest tier, whose folds hold out whole architectures, is the widest band that has residuals."""
    if device.mig is not None:
        return "arch_unseen"
    if device.gpu in trained_on:
        return "trained"
    seen = trained_archs if trained_archs is not None else {architecture_class(g) for g in trained_on}
    return "arch_seen" if architecture_class(device.gpu) in seen else "arch_unseen"


def compute_intervals(kernels: GraphKernels, shares: np.ndarray, devices: Sequence[Device], dtypes: Sequence[str],
                      calibration: Calibration, trained_on: Sequence[str],
                      requeued: Callable[[np.ndarray, float], np.ndarray], unmeasured: np.ndarray | None = None,
                      kernel_dtypes: np.ndarray | None = None, gpu_ms: np.ndarray | None = None,
                      gap_range: tuple[float, float] = (1.0, 1.0)) -> Intervals:
    """Intervals of every kernel share ``shares`` [kernels, devices] (ms) on ``devices``; ``dtypes``: each
    device's precision (the prediction's path). ``unmeasured`` (bool [distinct kernels, devices]): kernels that
    run on a unit no source measured (FP32 GEMMs and convolutions in TF32), always extrapolated.
    ``kernel_dtypes`` (str [distinct kernels, devices]): the precision each kernel is priced in where a graph mixes
    them (:func:`lilou.latency.kernel_model.precision.kernel_path`); its band and measured range are that
    precision's. Default: the device's. ``requeued``: the shares the launch queue gives when each kernel's GPU
    work is scaled by a factor ([kernels, devices]): the end-to-end bounds put each kernel's band on its GPU work,
    not on the host's launch waits (:func:`_queued_bounds`)."""
    unique = kernels.unique
    batch = KernelBatch.from_specs(unique)
    families = np.array([FALLBACK_FAMILY if fb else spec.family for spec, fb in zip(unique, kernels.unique_fallback)],
                        dtype=object)
    # the measured range is the family's (a transposed convolution is described as a forward one); the band is its own
    band_families = np.array([TRANSPOSED_FAMILY if spec.transposed and not fb else family
                              for spec, fb, family in zip(unique, kernels.unique_fallback, families)], dtype=object)
    n_unique, d = len(unique), len(devices)
    lo_log = np.zeros((n_unique, d))
    hi_log = np.zeros((n_unique, d))
    lo_in_log = np.zeros((n_unique, d))  # the bands the kernels would have in range (what the flags widen)
    hi_in_log = np.zeros((n_unique, d))
    ratio = np.ones((n_unique, d))
    flags = np.zeros((n_unique, d), dtype=bool)
    key_uncalibrated: dict[tuple[str, str, str], set[str]] = {}  # (architecture, dtype, tier) -> its pairs
    own_uncalibrated: list[set[str]] = [set() for _ in devices]  # each device's, of the families it runs in a dtype
    shape_features = range_features(batch, 1.0)
    blocks = thread_blocks(batch)
    outside_memo: dict[tuple, np.ndarray] = {}  # MIG slices and boards of one architecture share SM counts
    unusual = unmeasured_shapes(batch) | unmeasured_conv_forms(unique) | fused_attention(unique)
    trained_archs = frozenset(architecture_class(g) for g in trained_on)
    bands: dict[tuple[str, str, str], tuple[np.ndarray, ...]] = {}  # (architecture, dtype, tier) -> per kernel
    for j, device in enumerate(devices):
        architecture = architecture_class(device.gpu)
        tier = device_tier(device, trained_on, trained_archs)
        features = shape_features.copy()
        features[:, 3] = log2_waves(blocks, float(device.sms))
        column = (np.full(n_unique, dtypes[j], dtype=object) if kernel_dtypes is None
                  else np.asarray(kernel_dtypes[:, j], dtype=object))
        for dtype in sorted(set(column)):
            rows = column == dtype
            key = (architecture, dtype, tier)
            if key not in bands:
                key_uncalibrated[key] = set()
                bands[key] = _family_bands(band_families, dtype, tier, calibration, key_uncalibrated[key])
            lo_in, hi_in, lo_out, hi_out, width_ratio = (band[rows] for band in bands[key])
            own_uncalibrated[j] |= {f"{family} {dtype}" for family in set(band_families[rows])} & key_uncalibrated[key]
            memo_key = (architecture, dtype, float(device.sms), rows.tobytes())
            if memo_key not in outside_memo:
                outside_memo[memo_key] = outside(features[rows], families[rows], architecture, dtype,
                                                 calibration.ranges)
            flag = outside_memo[memo_key] | kernels.unique_fallback[rows] | unusual[rows]
            if unmeasured is not None:
                flag |= unmeasured[rows, j]
            flags[rows, j] = flag
            lo_log[rows, j], hi_log[rows, j] = np.where(flag, lo_out, lo_in), np.where(flag, hi_out, hi_in)
            lo_in_log[rows, j], hi_in_log[rows, j] = lo_in, hi_in
            ratio[rows, j] = width_ratio
    rows = kernels.index
    gpu = shares if gpu_ms is None else np.minimum(gpu_ms, shares)
    wait = shares - gpu
    gap_lo, gap_hi = gap_range
    lo, hi = wait * gap_lo + gpu * np.exp(lo_log[rows]), wait * gap_hi + gpu * np.exp(hi_log[rows])
    extrapolated = flags[rows]
    e2e_dtype = np.array([[dt in E2E_DTYPES for dt in dtypes]], dtype=bool)
    in_e2e = ~extrapolated & e2e_dtype
    total = shares.sum(axis=0)
    covered_ms = np.where(in_e2e, shares, 0.0).sum(axis=0)
    weight = np.where(in_e2e, shares, 0.0)
    widen = np.divide((weight * ratio[rows]).sum(axis=0), covered_ms, out=np.ones(d), where=covered_ms > 0)
    e2e = calibration.e2e
    centre, half = (e2e.lo + e2e.hi) / 2, (e2e.hi - e2e.lo) / 2
    base_lo, base_hi = np.exp(centre - half * widen), np.exp(centre + half * widen)
    total_lo, total_hi = _queued_bounds(requeued, in_e2e, base_lo, base_hi, lo_log[rows], hi_log[rows], gap_range)
    # the same bounds with no kernel flagged: whether the flags widened anything (the warning says so, or not); with
    # none flagged they are the bounds themselves, and the queue is not run again
    widened = np.zeros(d, dtype=bool)
    if extrapolated.any():
        in_lo, in_hi = _queued_bounds(requeued, e2e_dtype & np.ones_like(in_e2e), base_lo, base_hi, lo_in_log[rows],
                                      hi_in_log[rows], gap_range)
        widened = (total_hi > in_hi * (1 + 1e-9)) | (total_lo < in_lo * (1 - 1e-9))
    share = np.divide(np.where(extrapolated, shares, 0.0).sum(axis=0), total, out=np.zeros(d), where=total > 0)
    wait_share = np.divide(wait.sum(axis=0), total, out=np.zeros(d), where=total > 0)
    return Intervals(kernel_lo=lo, kernel_hi=hi, extrapolated=extrapolated, total_lo=total_lo, total_hi=total_hi,
                     extrapolated_share=share, uncalibrated=sorted(set().union(*own_uncalibrated)), dtypes=list(dtypes),
                     widened=widened, wait_share=wait_share, uncalibrated_by_device=[sorted(o) for o in own_uncalibrated])


def _queued_bounds(requeued: Callable[[np.ndarray, float], np.ndarray], in_e2e: np.ndarray, base_lo: np.ndarray,
                   base_hi: np.ndarray, lo_log: np.ndarray, hi_log: np.ndarray,
                   gap_range: tuple[float, float] = (1.0, 1.0)) -> tuple[np.ndarray, np.ndarray]:
    """End-to-end bounds with every kernel's GPU work at the end of its band and the host's launch gap at the end of
    its range, run through the launch queue again. A kernel the end-to-end labels covered takes the end-to-end band;
    any other the hull of its own band and the end-to-end band (the end to end band is the narrowest a whole model
    gets: it was a floor of the total, ``total * e^band``, before session 41).

    Where the GPU is busy the queue adds the works up: the bound is the sum of every kernel's share at the end of
    its band, as it was before session 38. Where the GPU waits for the host's launches it is not: a kernel that
    would take three times its predicted 5 us still waits for the 30 us launch behind it, and the bands put on its
    share (mostly that wait) made the bound of a launch-bound device several times its point estimate (BERT-base
    FP8 on an A100: 6.3 ms, upper bound 21.8, above that of a 1g.20gb slice, 17.7). The waits take the launch gap's
    range instead (session 41): the floor ``total * e^band`` held a launch-bound device at the end-to-end band, learned
    on GPU-bound labels, whatever the host, and its lower bound fell below its own launch floor."""
    gap_lo, gap_hi = gap_range
    lo_factor = np.where(in_e2e, base_lo[None, :], np.minimum(np.exp(lo_log), base_lo[None, :]))
    hi_factor = np.where(in_e2e, base_hi[None, :], np.maximum(np.exp(hi_log), base_hi[None, :]))
    return requeued(lo_factor, gap_lo).sum(axis=0), requeued(hi_factor, gap_hi).sum(axis=0)


def _family_bands(families: np.ndarray, dtype: str, tier: str, calibration: Calibration,
                  uncalibrated: set[str]) -> tuple[np.ndarray, ...]:
    """Per kernel: (lo, hi) inside the measured range, (lo, hi) extrapolated, and the width ratio of its band to
    its family's pooled band (>= 1); each family is looked up once."""
    found = {}
    for family in set(families):
        inside, extrapolated = (calibration.kernel_band(family, dtype, tier, flag) for flag in (False, True))
        if not inside.calibrated:
            uncalibrated.add(f"{family} {dtype}")
        pooled = calibration.pooled_band(family, dtype)
        ratio = max(inside.width / pooled.width, 1.0) if pooled is not None and pooled.width > 0 else 1.0
        found[family] = (inside.lo, inside.hi, extrapolated.lo, extrapolated.hi, ratio)
    columns = np.array([found[f] for f in families], dtype=np.float64).reshape(len(families), 5)
    return tuple(columns[:, i] for i in range(5))


def no_intervals(shares: np.ndarray, dtypes: Sequence[str]) -> Intervals:
    """Intervals collapsed to the estimates, for when no calibration file exists (the caller warns)."""
    total = shares.sum(axis=0)
    return Intervals(kernel_lo=shares.copy(), kernel_hi=shares.copy(), extrapolated=np.zeros(shares.shape, dtype=bool),
                     total_lo=total.copy(), total_hi=total.copy(), extrapolated_share=np.zeros(shares.shape[1]),
                     uncalibrated=[], dtypes=list(dtypes), widened=np.zeros(shares.shape[1], dtype=bool))
