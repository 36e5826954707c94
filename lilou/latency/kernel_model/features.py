"""Feature matrix of (kernel, device) pairs for the latency and kernel-type models.

With only five training GPUs, raw spec columns act like a GPU identifier, so most
features are *normalised by the device*: roofline times (FLOPs / peak, bytes /
bandwidth), waves of thread blocks over the SMs under plausible tile sizes, and
bytes relative to L2. Features come in named groups so ablations can drop one.
Everything is vectorised with numpy: 10 000 kernels take milliseconds.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from lilou.hardware import Device
from lilou.latency.kernel_model.kernel import FAMILIES, KernelSpec

# Output tiles cuBLAS / cuDNN SIMT kernels use (rows x cols of C per thread block).
GEMM_TILES: tuple[tuple[int, int], ...] = ((128, 128), (128, 64), (64, 64), (128, 32), (32, 32))
# PyTorch's vectorized elementwise kernels: 128 threads x 4 elements per block.
ELEMENTWISE_BLOCK = 512
# A small floor so empty kernels (views) keep finite logs: 1 ns.
MIN_TIME_MS = 1e-6

FEATURE_GROUPS = ("family", "shape", "roofline", "waves", "cache", "gpu", "precision", "arch", "algorithm", "ridge",
                  "balance")


@dataclass(frozen=True)
class KernelBatch:
    """Columns of many :class:`KernelSpec` (int64/float64 numpy arrays of one length)."""

    family: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    out_elements: np.ndarray
    gemm_batch: np.ndarray
    gemm_m: np.ndarray
    gemm_n: np.ndarray
    gemm_k: np.ndarray
    conv_window: np.ndarray
    conv_stride: np.ndarray
    conv_groups: np.ndarray
    conv_winograd_shape: np.ndarray  # 1.0 for a 2-D 3x3 filter without dilation (KernelSpec.winograd_shape)
    rows: np.ndarray
    cols: np.ndarray

    def __len__(self) -> int:
        return len(self.family)

    @classmethod
    def from_specs(cls, specs: Sequence[KernelSpec]) -> KernelBatch:
        def column(values) -> np.ndarray:
            return np.fromiter(values, dtype=np.float64, count=len(specs))

        gemm = [s.gemm or (0, 0, 0, 0) for s in specs]
        conv = [s.conv or (0, 0, 0) for s in specs]
        return cls(
            family=np.fromiter((FAMILIES.index(s.family) for s in specs), dtype=np.int64, count=len(specs)),
            flops=column(s.flops for s in specs),
            bytes=column(s.bytes for s in specs),
            out_elements=column(s.out_elements for s in specs),
            gemm_batch=column(g[0] for g in gemm), gemm_m=column(g[1] for g in gemm),
            gemm_n=column(g[2] for g in gemm), gemm_k=column(g[3] for g in gemm),
            conv_window=column(c[0] for c in conv), conv_stride=column(c[1] for c in conv),
            conv_groups=column(c[2] for c in conv),
            conv_winograd_shape=column(float(s.winograd_shape) for s in specs),
            rows=column(s.rows for s in specs), cols=column(s.cols for s in specs),
        )

    def take(self, index: np.ndarray) -> KernelBatch:
        return KernelBatch(**{f.name: getattr(self, f.name)[index] for f in fields(self)})


#: Units whose peak can bound a kernel's math (keys of the GPU database's ``peak_tflops``), in one-hot order.
UNITS: tuple[str, ...] = ("fp32", "fp16", "int8", "tf32_tensor", "fp16_tensor", "bf16_tensor", "fp8_tensor",
                          "int8_tensor", "int4_tensor", "fp4_tensor")


#: Units a model sees as another unit's one-hot column and launch floor, with their own peak (roofline,
#: ``log_unit_over_fp32_peak``). Both run on the 16-bit tensor cores' MMA pipeline (NVIDIA's Ampere, Ada, Hopper
#: and Blackwell whitepapers):
#:
#: - TF32, at half the FP16 rate: no source of the kernel table measured it, so its column was never set.
#: - BF16, at the FP16 rate on every GPU of the database that has BF16 tensor cores (one without them, a V100 or
#:   T4, runs BF16 on the FP32 CUDA cores: :meth:`DeviceColumns.from_devices`). With a column of its own, learned
#:   from AIConfigurator's BF16 rows while the FP16 column learned from Vidur's, each absorbed its sources' bias:
#:   a 64x1024x1024 GEMM on an A100 was priced 55 % slower in BF16 than in FP16, and ``lilou llm``'s FP16
#:   inter-token latency on an L4 11 % above BF16's. One column, one price for one rate.
UNIT_STAND_INS: dict[str, str] = {"tf32_tensor": "fp16_tensor", "bf16_tensor": "fp16_tensor"}
#: The one-hot column each unit sets: its own, or its stand-in's.
_ONE_HOT_COLUMN = np.array([UNITS.index(UNIT_STAND_INS.get(unit, unit)) for unit in UNITS])


@dataclass(frozen=True)
class DeviceColumns:
    """Device figures per row (or one row broadcast to all).

    ``compute_tflops`` is the peak of the unit that runs each kernel's math (``unit``, an index
    into :data:`UNITS`): FP32 CUDA cores unless told otherwise, so FP32 rows keep the peak the
    shipped model was trained with; a BF16 GEMM on tensor cores gets the BF16 tensor peak.
    """

    sms: np.ndarray
    bandwidth_gbs: np.ndarray
    clock_mhz: np.ndarray
    l2_mb: np.ndarray
    fp32_tflops: np.ndarray
    board_power_w: np.ndarray
    compute_tflops: np.ndarray
    unit: np.ndarray                   # int64 index into UNITS
    tensor_core_generation: np.ndarray  # 0 without tensor cores
    fp32_lanes_per_sm: np.ndarray
    int32_shared: np.ndarray           # 1.0 where half the FP32 lanes share a datapath with INT32

    @classmethod
    def from_devices(cls, devices: Sequence[Device], units: Sequence[str | None] | None = None) -> DeviceColumns:
        """One row per device; ``units`` (one per row, None = FP32 CUDA cores) picks each row's compute peak.
        A unit the device lacks (BF16 tensor cores on a T4) falls back to the FP32 peak."""
        units = list(units) if units is not None else [None] * len(devices)
        peaks, unit_index = [], []
        for device, unit in zip(devices, units):
            peak = device.peak_tflops.get(unit) if unit else None
            peaks.append(peak if peak else device.fp32_tflops)
            unit_index.append(UNITS.index(unit) if peak and unit in UNITS else 0)
        return cls(
            sms=np.array([d.sms for d in devices], dtype=np.float64),
            bandwidth_gbs=np.array([d.memory_bandwidth_gbs for d in devices], dtype=np.float64),
            clock_mhz=np.array([d.boost_clock_mhz for d in devices], dtype=np.float64),
            l2_mb=np.array([d.l2_mb for d in devices], dtype=np.float64),
            fp32_tflops=np.array([d.fp32_tflops for d in devices], dtype=np.float64),
            board_power_w=np.array([d.board_power_w for d in devices], dtype=np.float64),
            compute_tflops=np.array(peaks, dtype=np.float64),
            unit=np.array(unit_index, dtype=np.int64),
            tensor_core_generation=np.array([d.tensor_core_generation or 0 for d in devices], dtype=np.float64),
            fp32_lanes_per_sm=np.array([d.fp32_lanes_per_sm for d in devices], dtype=np.float64),
            int32_shared=np.array([float(d.int32_shares_fp32_datapath) for d in devices], dtype=np.float64),
        )

    def take(self, index: np.ndarray) -> DeviceColumns:
        return DeviceColumns(**{f.name: getattr(self, f.name)[index] for f in fields(self)})


#: Multiplications a Winograd F(2x2, 3x3) convolution saves over the direct one (36 / 16). cuDNN runs 3x3,
#: stride-1 FP32 convolutions this way when it is faster: 7-23 % of NeuSight's convolutions per GPU measure
#: below FLOPs / FP32 peak, the fastest at 0.445x of it (the V100's; the bound is 1 / 2.25 = 0.444x).
WINOGRAD_GAIN = 2.25


def winograd_eligible(kernels: KernelBatch, devices: DeviceColumns) -> np.ndarray:
    """bool [n]: 3x3 (2-D, undilated), stride-1, ungrouped convolutions on FP32 CUDA cores, which cuDNN may run as
    Winograd (its tensor-core convolutions are implicit GEMMs)."""
    conv = kernels.family == FAMILIES.index("conv")
    shape = (kernels.conv_winograd_shape > 0) & (kernels.conv_stride == 1) & (kernels.conv_groups <= 1)
    return conv & shape & (np.broadcast_to(devices.unit, (len(kernels),)) == 0)


def roofline_ms(kernels: KernelBatch, devices: DeviceColumns, winograd: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(compute time, memory time) in ms at the peak of each kernel's unit and the DRAM bandwidth. With
    ``winograd``, a :func:`winograd_eligible` convolution's compute time is that of its Winograd FLOPs."""
    flops = kernels.flops
    if winograd:
        flops = flops / np.where(winograd_eligible(kernels, devices), WINOGRAD_GAIN, 1.0)
    compute = flops / (devices.compute_tflops * 1e9)   # TFLOP/s = 1e9 FLOP/ms
    memory = kernels.bytes / (devices.bandwidth_gbs * 1e6)  # GB/s = 1e6 B/ms
    return compute, memory


#: The ``ridge`` feature, log2(compute time / memory time), is clipped to +-this: near the device's ridge point it
#: says how far a kernel is from being bound by the other side; far from it (an elementwise kernel, a decode GEMM)
#: an unclipped value would restate the device's FLOPs per byte, a GPU identifier.
RIDGE_CLIP = 2.0


#: Boards below this power (W) may run compute below peak: the model learns how much (see model.py).
REFERENCE_POWER_W = 150.0


def power_factor(board_power_w: np.ndarray | float, exponent: float) -> np.ndarray:
    """(REFERENCE_POWER_W / power) ** exponent below the reference, else 1: how much slower than its
    spec-sheet peak a board computes (the model learns the exponent)."""
    power = np.asarray(board_power_w, dtype=np.float64)
    return (REFERENCE_POWER_W / np.minimum(power, REFERENCE_POWER_W)) ** exponent


def low_power_exponent(compute_ms: np.ndarray | float, exponent: float, duration_exponent: float = 0.0,
                       log_duration_ms: float = 0.0) -> np.ndarray:
    """The exponent of :func:`power_factor` for kernels of this compute time at peak (ms): ``exponent`` plus
    ``duration_exponent`` x softplus(log compute_ms - log_duration_ms), the model's growing slowdown of long
    kernels on low-power boards (``model.power_duration``)."""
    log_compute = np.log(np.maximum(np.asarray(compute_ms, dtype=np.float64), 1e-9))
    return exponent + duration_exponent * np.logaddexp(0.0, log_compute - log_duration_ms)


def floor_units_of(devices: DeviceColumns, n: int) -> np.ndarray:
    """int64 [n]: the unit whose launch floor each row takes (a TF32 MMA takes its FP16 stand-in's)."""
    return _ONE_HOT_COLUMN[np.broadcast_to(devices.unit, (n,))].astype(np.int64)


def floor_index(family, timing=None, unit=None, floor_units: int = 1):
    """Index of each kernel's launch floor: ``(timing * floor_units + unit) * len(FAMILIES) + family``, with
    timing 0 (eager CUDA events) and unit 0 (FP32 CUDA cores) where not given. Works on torch and numpy
    (the model and its numpy runtime share it)."""
    index = family
    if unit is not None:
        index = index + unit * len(FAMILIES)
    if timing is not None:
        index = index + timing * floor_units * len(FAMILIES)
    return index


def roofline_inputs(kernels: KernelBatch, devices: DeviceColumns, winograd: bool = False) -> np.ndarray:
    """float32 [n, 3]: natural logs of the compute time and memory time (ms, floored at 1 ns; ``winograd``: see
    :func:`roofline_ms`) and of max(1, REFERENCE_POWER_W / board power), what the network's roofline is built from."""
    compute, memory = roofline_ms(kernels, devices, winograd)
    columns = [np.log(np.maximum(compute, 1e-9)), np.log(np.maximum(memory, 1e-9)),
               np.log(power_factor(devices.board_power_w, 1.0))]
    return np.stack(np.broadcast_arrays(*columns), axis=1).astype(np.float32)


#: Families whose kernels reduce each row in one block (layer norm, softmax, reductions): the ``balance`` feature.
ROW_WISE_FAMILIES = np.array([FAMILIES.index(f) for f in ("layernorm", "softmax", "reduction")])


def dram_bytes_per_sm_cycle(devices: DeviceColumns) -> np.ndarray:
    """DRAM bandwidth per SM and clock cycle (bytes): by Little's law a kernel that keeps a fixed number of
    bytes in flight per SM (one row per block, a reduction between loads) reaches a smaller share of the
    bandwidth where each SM has more of it to fill (Vidur's RMSNorm: 34 % of the A100-80GB's 13.4 B per SM-cycle,
    60 % of the A40's 4.8)."""
    return devices.bandwidth_gbs * 1e3 / (devices.sms * devices.clock_mhz)


def _log2(values: np.ndarray) -> np.ndarray:
    return np.log2(np.maximum(values, 0.0) + 1.0)


def _waves(blocks: np.ndarray, sms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log2 of waves of blocks over the SMs, and the last wave's fill (1 = full)."""
    waves = blocks / sms
    full = np.maximum(np.ceil(waves), 1.0)
    return np.log2(waves + 1.0), np.where(blocks > 0, waves / full, 0.0)


def feature_names(groups: Sequence[str] = FEATURE_GROUPS) -> list[str]:
    names = {
        "family": [f"family_{f}" for f in FAMILIES],
        "shape": [
            "log_flops", "log_bytes", "log_out_elements", "log_intensity", "log_gemm_batch", "log_gemm_m",
            "log_gemm_n", "log_gemm_k", "log_conv_window", "conv_stride", "log_conv_groups",
            "winograd_eligible", "log_rows", "log_cols"],
        "roofline": ["log_compute_ms", "log_memory_ms", "log_roofline_ms", "compute_minus_memory"],
        "waves": [f"{kind}_{tm}x{tn}" for tm, tn in GEMM_TILES for kind in ("log_waves", "fill")]
                 + ["log_elementwise_waves", "elementwise_fill", "log_row_waves", "row_fill"],
        "cache": ["log_bytes_over_l2", "fits_l2"],
        "gpu": ["log_sms", "log_bandwidth", "log_clock", "log_l2", "log_fp32_peak"],
        "precision": [f"unit_{u}" for u in UNITS] + ["log_unit_over_fp32_peak"],
        "arch": ["tensor_core_generation", "log_fp32_lanes_per_sm", "int32_shares_fp32_datapath"],
        "algorithm": ["winograd_eligible"],
        "ridge": ["log_compute_over_memory"],
        "balance": ["row_log_dram_bytes_per_sm_cycle"],
    }
    return [name for group in groups for name in names[group]]


def kernel_features(kernels: KernelBatch, devices: DeviceColumns,
                    groups: Sequence[str] = FEATURE_GROUPS) -> np.ndarray:
    """float32 matrix [len(kernels), len(feature_names(groups))]."""
    n = len(kernels)
    k = kernels
    columns: list[np.ndarray] = []
    if "family" in groups:
        one_hot = np.zeros((n, len(FAMILIES)))
        one_hot[np.arange(n), k.family] = 1.0
        columns.extend(one_hot.T)
    if "shape" in groups:
        columns += [_log2(k.flops), _log2(k.bytes), _log2(k.out_elements),
                    np.log2((k.flops + 1.0) / (k.bytes + 1.0)),
                    _log2(k.gemm_batch), _log2(k.gemm_m), _log2(k.gemm_n), _log2(k.gemm_k),
                    _log2(k.conv_window), k.conv_stride, _log2(k.conv_groups),
                    ((k.conv_winograd_shape > 0) & (k.conv_stride == 1)).astype(np.float64),
                    _log2(k.rows), _log2(k.cols)]
    compute, memory = roofline_ms(kernels, devices)
    if "roofline" in groups:
        columns += [np.log2(compute + MIN_TIME_MS), np.log2(memory + MIN_TIME_MS),
                    np.log2(np.maximum(compute, memory) + MIN_TIME_MS),
                    np.log2(compute + MIN_TIME_MS) - np.log2(memory + MIN_TIME_MS)]
    sms = np.broadcast_to(devices.sms, (n,))
    if "waves" in groups:
        for tile_m, tile_n in GEMM_TILES:
            blocks = k.gemm_batch * np.ceil(k.gemm_m / tile_m) * np.ceil(k.gemm_n / tile_n)
            columns.extend(_waves(blocks, sms))
        columns.extend(_waves(np.ceil(k.out_elements / ELEMENTWISE_BLOCK), sms))
        columns.extend(_waves(k.rows, sms))
    if "cache" in groups:
        l2_bytes = np.broadcast_to(devices.l2_mb, (n,)) * 2**20
        columns += [np.log2((k.bytes + 1.0) / l2_bytes), (k.bytes <= l2_bytes).astype(np.float64)]
    if "gpu" in groups:
        columns += [np.broadcast_to(np.log2(v), (n,)) for v in (devices.sms, devices.bandwidth_gbs,
                    devices.clock_mhz, devices.l2_mb, devices.fp32_tflops)]
    if "precision" in groups:
        one_hot = np.zeros((n, len(UNITS)))
        one_hot[np.arange(n), _ONE_HOT_COLUMN[np.broadcast_to(devices.unit, (n,))]] = 1.0
        columns.extend(one_hot.T)
        columns.append(np.broadcast_to(np.log2(devices.compute_tflops / devices.fp32_tflops), (n,)))
    if "arch" in groups:
        columns += [np.broadcast_to(devices.tensor_core_generation, (n,)),
                    np.broadcast_to(np.log2(devices.fp32_lanes_per_sm), (n,)),
                    np.broadcast_to(devices.int32_shared, (n,))]
    if "algorithm" in groups:
        columns.append(winograd_eligible(kernels, devices).astype(np.float64))
    if "ridge" in groups:  # at the direct FLOPs: the algorithm group marks the Winograd-eligible rows
        columns.append(np.clip(np.log2(compute + MIN_TIME_MS) - np.log2(memory + MIN_TIME_MS), -RIDGE_CLIP, RIDGE_CLIP))
    if "balance" in groups:  # row-wise kernels only: as a feature of every row it told GPUs apart (FP32 GEMM 21 -> 29 %)
        row_wise = np.isin(k.family, ROW_WISE_FAMILIES).astype(np.float64)
        columns.append(row_wise * np.broadcast_to(np.log2(dram_bytes_per_sm_cycle(devices)), (n,)))
    return np.stack(columns, axis=1).astype(np.float32)
