"""Devices: the effective resources the latency model sees, a whole GPU or one MIG slice.

A MIG slice is its parent GPU with the slice's share of SMs, L2 cache and DRAM bandwidth.
Clock and architecture are the parent's; peak FLOPS (every unit and dtype) scale with the share of SMs.

Memory comes twice: ``memory_gb``, the nominal size (the name's "24 GB", a profile's "1g.18gb"), and
``memory_gib``, what a process on the device sees and what every fit is judged against: the total `nvidia-smi`
reports (``nvidia-smi mig -lgip`` for a slice) where a public printout gives it, else the nominal size read as GiB
(``memory_gib_source`` says which).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from lilou.errors import LilouInputError
from lilou.hardware.database import GPUSpec, MIGProfile, all_gpus, check_name_length, find_gpu, name_family
from lilou.hardware.names import mig_key, split_mig


@dataclass(frozen=True)
class Device:
    """A GPU or MIG slice as the latency model sees it."""

    name: str  # "a100-sxm4-80gb", or "a100-sxm4-80gb/1g.10gb" for a MIG slice
    gpu: str  # canonical name of the parent GPU
    mig: str | None  # MIG profile name, None for the whole GPU
    architecture: str
    compute_capability: str
    sms: int
    memory_gb: float  # nominal; memory_gib is what fits are judged against
    memory_bandwidth_gbs: float
    l2_mb: float
    boost_clock_mhz: int
    fp32_tflops: float
    fp16_tflops: float | None  # None: no native FP16 arithmetic (Maxwell)
    tensor_tflops: float | None  # None: no tensor cores
    sm_fraction: float  # share of the parent's SMs (1.0 for a whole GPU)
    l2_fraction: float
    bandwidth_fraction: float
    board_power_w: float  # the board's TDP; a MIG slice keeps its parent's (the slices share one board)
    # Dense peak per unit and dtype (the keys of GPUSpec.peak_tflops), scaled by sm_fraction; None where
    # the unit or dtype does not exist. Left out of the hash (a dict is unhashable); it still takes part in ==.
    peak_tflops: dict[str, float | None] = field(hash=False)
    fp32_lanes_per_sm: int
    int32_shares_fp32_datapath: bool
    tensor_core_generation: int | None
    memory_gib: float  # what a process sees: fits are judged against it (module docstring)
    memory_gib_source: str  # the public nvidia-smi listing it comes from, or "nominal"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve_device(gpu: str, mig: str | None = None) -> Device:
    """The device for a GPU name (any alias) and an optional MIG profile name; ``gpu`` may name the slice itself as
    ``GPU/PROFILE`` (how rankings print it: ``a100-sxm4-80gb/3g.40gb``), or as CUDA and GPU feature discovery name a
    slice's device (``NVIDIA A100-SXM4-80GB MIG 1g.10gb``, ``NVIDIA-H100-80GB-HBM3-MIG-1g.10gb``).

    Raises :class:`lilou.errors.LilouInputError` for an unknown GPU or a profile it lacks.
    """
    if not isinstance(gpu, str) or not (mig is None or isinstance(mig, str)):
        raise LilouInputError(f"a GPU is named by a string such as 'a10g' or 'a100-80gb/1g.10gb' (MIG profile: "
                              f"'1g.10gb'), not {gpu if not isinstance(gpu, str) else mig!r:.40}")
    check_name_length(gpu)  # before the regular expressions and suggestions, whose work grows with its square
    if mig is not None:
        check_name_length(mig, "MIG profile")
    name, slash, profile = gpu.partition("/")
    named = None if slash else split_mig(gpu)  # "NVIDIA A100-SXM4-80GB MIG 1g.10gb", as CUDA names a slice's device
    if named:
        (name, profile), slash = named, "/"
    if slash:
        if not profile.strip():
            raise LilouInputError(f"{gpu!r}: no MIG profile after the '/'; name the whole GPU as {name.strip()!r} or "
                                  f"one slice as GPU/PROFILE, e.g. a100-80gb/1g.10gb (see `lilou gpus`)")
        if mig is not None and mig_key(mig) != mig_key(profile):
            raise LilouInputError(f"{gpu!r} names MIG profile {profile.strip()!r} and --mig names {mig!r}; give one")
        gpu, mig = name.strip(), profile.strip()
    spec = find_gpu(gpu)
    if mig is None:
        return whole_gpu(spec)
    try:
        profile = spec.mig_profile(mig)
    except LilouInputError as error:
        having = [other for other in name_family(gpu) if other != spec.name and _has_profile(other, mig)]
        if not having:
            raise
        raise LilouInputError(f"{error}; '{gpu}' means {spec.name} here, and {', '.join(having)} "
                              f"{'has' if len(having) == 1 else 'have'} {mig}: pass the full name") from None
    return mig_slice(spec, profile)


def _has_profile(gpu: str, mig: str) -> bool:
    try:
        find_gpu(gpu).mig_profile(mig)
    except LilouInputError:
        return False
    return True


def all_devices() -> list[Device]:
    """Every GPU, each followed by its MIG slices (all profiles, ``+me`` ones included)."""
    devices: list[Device] = []
    for spec in all_gpus():
        devices.append(whole_gpu(spec))
        devices.extend(mig_slice(spec, profile) for profile in spec.mig_profiles)
    return devices


def whole_gpu(spec: GPUSpec) -> Device:
    """The device for a whole GPU, not partitioned."""
    visible = None if spec.memory_total_mib is None else spec.memory_total_mib / 1024
    return _device(spec, name=spec.name, mig=None, sms=spec.sms, memory_gb=spec.memory_gb,
                   memory_gib=(visible, spec.memory_total_source), sm_fraction=1.0, l2_fraction=1.0,
                   bandwidth_fraction=1.0)


def mig_slice(spec: GPUSpec, profile: MIGProfile) -> Device:
    """The device for one MIG instance of ``profile`` on ``spec``."""
    return _device(spec, name=f"{spec.name}/{profile.name}", mig=profile.name, sms=profile.sms,
                   memory_gb=profile.memory_gb, memory_gib=(profile.memory_gib, profile.memory_source),
                   sm_fraction=profile.sms / spec.sms,
                   l2_fraction=profile.l2_fraction, bandwidth_fraction=profile.bandwidth_fraction)


def _device(spec: GPUSpec, *, name: str, mig: str | None, sms: int, memory_gb: float,
            memory_gib: tuple[float | None, str | None], sm_fraction: float, l2_fraction: float,
            bandwidth_fraction: float) -> Device:
    visible, source = memory_gib
    tensor = spec.tensor_tflops
    return Device(
        name=name,
        gpu=spec.name,
        mig=mig,
        architecture=spec.architecture,
        compute_capability=spec.compute_capability,
        sms=sms,
        memory_gb=memory_gb,
        memory_gib=memory_gb if visible is None else visible,
        memory_gib_source="nominal" if visible is None else str(source),
        memory_bandwidth_gbs=spec.memory_bandwidth_gbs * bandwidth_fraction,
        l2_mb=spec.l2_mb * l2_fraction,
        boost_clock_mhz=spec.boost_clock_mhz,
        fp32_tflops=spec.fp32_tflops * sm_fraction,
        fp16_tflops=None if spec.fp16_tflops is None else spec.fp16_tflops * sm_fraction,
        tensor_tflops=None if tensor is None else tensor * sm_fraction,
        sm_fraction=sm_fraction,
        l2_fraction=l2_fraction,
        bandwidth_fraction=bandwidth_fraction,
        board_power_w=float(spec.tdp_w),
        peak_tflops={key: None if peak is None else peak * sm_fraction for key, peak in spec.peak_tflops.items()},
        fp32_lanes_per_sm=spec.fp32_lanes_per_sm,
        int32_shares_fp32_datapath=spec.int32_shares_fp32_datapath,
        tensor_core_generation=spec.tensor_core_generation,
    )
