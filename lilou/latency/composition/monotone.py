"""Monotonicity by construction: bigger problems and smaller MIG slices are never predicted faster.

Two physical facts the per-kernel model does not know by itself:

**Size.** A kernel never takes longer than the same kernel with *more independent
work* (twice the output rows, twice the GEMM batch, twice the elements): the larger
problem contains the smaller one, and a library could run the smaller one with the
larger one's schedule. The model extrapolates poorly to tiny problems (a 3x3 conv
on a 7x7 map at batch 1 has M = 49 output pixels; the measured convs had far more)
and can predict such a kernel *slower* than its batch-2 twin. So each kernel's work
is the minimum of the model's prediction over a ladder of scaled copies
(:func:`ladder_factors`). A larger batch scales exactly that dimension (GEMM rows
for ``Linear`` and conv, GEMM batch for attention ``bmm``, rows for norms, elements
for elementwise ops), so the copies of a batch-``b`` kernel are the same kernel at
batches ``b, b+1, ..., 16`` and 32 and 64: the ladder of a larger batch ``c <= 16``
is a subset of that of ``b``, and the end-to-end latency at ``c`` can never be
below that at ``b``. Above batch 16 the ladder is ``b, 2b, 4b``, and the work is the largest of
its minimum and those of the ladders of ``b / 2``, ``b / 4`` ... (:func:`ladder_levels`): exact along
doublings. Without a known batch it is 1, 2, 4, 8, 16 times the work. A rung is priced only where its
roofline is under the kernel's own price (a rung above it cannot be the minimum; ``LADDER_BOUND_MARGIN`` in
:mod:`lilou.latency.composition.end_to_end`).

**MIG.** A slice is a subset of its parent's SMs, L2 slices and memory controllers
at the same clock, so any schedule of a kernel on a smaller slice also runs on a
slice with at least as many of each: a kernel is never faster on the smaller one.
Each kernel's work on a device is raised to the largest work predicted on any
device of the same GPU whose SMs, bandwidth and L2 are all at least as large
(:func:`dominating_devices`; the whole GPU dominates every slice).

**Boards.** The same holds across boards of one compute capability where one has at least every
resource of the other: SMs, clock, DRAM bandwidth, L2, board power and every unit's peak (the L40S of
the L40, the A40 of the A10G, the Titan RTX of the T4; :func:`board_dominates`). The kernel model
reads each resource apart and priced Llama-3.1-8B's decode step 1-4 % slower on the L40S than on the
L40 (session 38); a board's work is raised to its dominators' too, and a slice's to its whole GPU's.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from lilou.hardware import Device, all_gpus, find_gpu
from lilou.hardware.device import mig_slice, whole_gpu
from lilou.latency.kernel_model.features import KernelBatch
from lilou.latency.kernel_model.kernel import FAMILIES

#: Every batch up to this one is on the ladder of a smaller batch.
DENSE_BATCH = 16
#: Batches above it that are on the ladder of every batch up to it.
FAR_BATCHES: tuple[int, ...] = (32, 64)


def ladder_factors(batch: int | None) -> tuple[float, ...]:
    """Scale factors of the independent work tried for every model-predicted kernel (1 first)."""
    if batch is None or batch <= 0:
        return (1.0, 2.0, 4.0, 8.0, 16.0)
    return tuple(target / batch for target in _ladder_batches(batch))


def _ladder_batches(batch: int) -> tuple[int, ...]:
    """The batches of the size ladder of a kernel at ``batch`` (> 0), ``batch`` first."""
    if batch > DENSE_BATCH:
        return (batch, 2 * batch, 4 * batch)
    return (*range(batch, DENSE_BATCH + 1), *FAR_BATCHES)


def ladder_levels(batch: int | None) -> tuple[tuple[float, ...], ...]:
    """The size ladders of a kernel at ``batch`` and at its halvings, as factors of ``batch``: its work is the
    largest of the ladders' minima.

    Above :data:`DENSE_BATCH` the ladder of ``2b`` (``2b, 4b, 8b``) is not within that of ``b`` (``b, 2b, 4b``),
    so its minimum alone can be lower (ResNet-18's classifier GEMM priced faster at batch 128 than at 16, 32 or 64
    on an RTX PRO 6000 Blackwell). Raising it to the minimum of the ladder of ``b``, which is raised in turn to
    that of ``b / 2``, down to a batch at most :data:`DENSE_BATCH` or odd, makes the work exact along doublings.
    """
    levels = [ladder_factors(batch)]
    level = batch
    while level is not None and level > DENSE_BATCH and level % 2 == 0:
        level //= 2
        levels.append(tuple(target / batch for target in _ladder_batches(level)))
    return tuple(levels)

_GEMM, _CONV = FAMILIES.index("gemm"), FAMILIES.index("conv")


def scaled(kernels: KernelBatch, fixed_bytes: np.ndarray, factor: float) -> KernelBatch:
    """The same kernels with ``factor`` times their independent work.

    GEMMs with a batch > 1 (``bmm``) scale the batch, other GEMMs and convolutions
    scale M (rows / output pixels), row-wise ops their rows. FLOPs, output elements
    and every byte scale, except ``fixed_bytes``: what the kernel reads from weights
    and constants, which a larger batch reads once all the same.
    """
    if factor == 1:
        return kernels
    gemm_like = (kernels.family == _GEMM) | (kernels.family == _CONV)
    by_batch = (kernels.family == _GEMM) & (kernels.gemm_batch > 1)
    by_rows = gemm_like & ~by_batch
    fixed = np.minimum(fixed_bytes, kernels.bytes)
    return replace(
        kernels,
        flops=kernels.flops * factor,
        bytes=fixed + (kernels.bytes - fixed) * factor,
        out_elements=kernels.out_elements * factor,
        gemm_batch=np.where(by_batch, kernels.gemm_batch * factor, kernels.gemm_batch),
        gemm_m=np.where(by_rows, kernels.gemm_m * factor, kernels.gemm_m),
        rows=kernels.rows * factor,
    )


def size_ladder(kernels: KernelBatch, fixed_bytes: np.ndarray, factors: tuple[float, ...]) -> KernelBatch:
    """Copies scaled by each factor, stacked rung-major: ``len(factors) * len(kernels)`` rows."""
    rungs = [scaled(kernels, fixed_bytes, factor) for factor in factors]
    return KernelBatch(**{name: np.concatenate([getattr(r, name) for r in rungs])
                          for name in vars(kernels)})


def dominates(big: Device, small: Device) -> bool:
    """Same GPU, and at least the SMs, DRAM bandwidth and L2 of ``small``; or ``big`` a whole board of the compute
    capability of ``small``'s with at least every resource of ``small``'s whole board (:func:`board_dominates`),
    which holds ``small`` or every slice of it: the relation is transitive, as the envelope needs."""
    if big.gpu == small.gpu:
        return (big.sms >= small.sms and big.memory_bandwidth_gbs >= small.memory_bandwidth_gbs
                and big.l2_mb >= small.l2_mb)
    return board_dominates(big, small if small.mig is None else whole_gpu(find_gpu(small.gpu)))


def board_dominates(big: Device, small: Device) -> bool:
    """Two whole boards of one compute capability, ``big`` with at least the SMs, clock, DRAM bandwidth, L2, board
    power and every unit's peak of ``small``: the same kernels' schedules run on it no slower."""
    if big.mig is not None or small.mig is not None or big.gpu == small.gpu:
        return False
    if big.compute_capability != small.compute_capability:
        return False
    if not (big.sms >= small.sms and big.boost_clock_mhz >= small.boost_clock_mhz
            and big.memory_bandwidth_gbs >= small.memory_bandwidth_gbs and big.l2_mb >= small.l2_mb
            and big.board_power_w >= small.board_power_w):
        return False
    return all((big.peak_tflops.get(unit) or 0) >= peak for unit, peak in small.peak_tflops.items() if peak)


def dominating_devices(device: Device) -> list[Device]:
    """Devices that dominate ``device`` (:func:`dominates`; itself excluded): a slice's larger slices and whole GPU,
    and the boards of its compute capability with at least every resource of its whole GPU (the L40S of an L40)."""
    return list(_dominating(device))


def dominated_devices(device: Device) -> list[Device]:
    """Devices ``device`` dominates (:func:`dominates`; itself excluded): a slice's smaller slices; a whole board's
    slices, and the boards of its compute capability it has every resource of, with their slices."""
    return list(_dominated(device))


@functools.cache
def _dominating(device: Device) -> tuple[Device, ...]:
    # cached: the GPU database is read once, and a ranking asks for every device's relations more than once
    spec = find_gpu(device.gpu)
    own = [whole_gpu(spec), *(mig_slice(spec, profile) for profile in spec.mig_profiles)] if device.mig else []
    boards = [whole_gpu(other) for other in all_gpus() if other.name != spec.name
              and other.compute_capability == spec.compute_capability]
    return tuple(other for other in own + boards if other.name != device.name and dominates(other, device))


@functools.cache
def _dominated(device: Device) -> tuple[Device, ...]:
    spec = find_gpu(device.gpu)
    specs = [spec] if device.mig else [other for other in all_gpus()
                                       if other.compute_capability == spec.compute_capability]
    candidates = [candidate for other in specs
                  for candidate in ([] if device.mig else [whole_gpu(other)])
                  + [mig_slice(other, profile) for profile in other.mig_profiles]]
    return tuple(other for other in candidates if other.name != device.name and dominates(device, other))


def mig_envelope(work: np.ndarray, devices: list[Device], wanted: list[Device],
                 dominators: Mapping[str, list[Device]]) -> np.ndarray:
    """Work [kernels, len(wanted)]: each wanted device's column raised to the max over its dominators.

    ``work`` has one column per device of ``devices``, which must include the dominators of every wanted one
    (``dominators``: :func:`dominating_devices` of each wanted device, by name; a scan of every pair, which now
    builds a whole board for each slice of another, took 37 ms of a ranking over every device).
    """
    column = {d.name: j for j, d in enumerate(devices)}
    out = work[:, [column[d.name] for d in wanted]].copy()
    for j, device in enumerate(wanted):
        others = [column[o.name] for o in dominators[device.name]]
        if others:
            out[:, j] = np.maximum(out[:, j], work[:, others].max(axis=1))
    return out
