"""Extrapolation flags: does a kernel lie inside the measured range for GPUs of its class and dtype?

A kernel is described by four numbers that decide how a GPU runs it: log2 FLOPs, log2 bytes, log2
arithmetic intensity (FLOPs per byte) and log2 waves of thread blocks over the device's SMs (output
tiles of 128 x 128 for GEMMs and convolutions, blocks of 512 elements for elementwise kernels, one row
per block for norms and softmax, as :mod:`lilou.latency.kernel_model.features` counts them). The calibration file
stores, per (architecture class, dtype, family), the range of each over the rows of the kernel table
(:mod:`lilou.data.kernel_table`; H100 and L4 rows are held back from it). A kernel is *extrapolated*
when its architecture class has no row of that dtype and family, or any of its four numbers falls
outside the stored range. Kernels on the memory-bound fallback have no measured kind at all and are
always extrapolated, and so are grouped (depthwise), 3-D and dilated convolutions: no source of the kernel table
measured one.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from lilou.latency.kernel_model.features import ELEMENTWISE_BLOCK, KernelBatch
from lilou.latency.kernel_model.kernel import FAMILIES, KernelSpec

#: The features whose measured range is checked, in column order.
RANGE_FEATURES: tuple[str, ...] = ("log2_flops", "log2_bytes", "log2_intensity", "log2_waves")
#: GEMM / implicit-GEMM output tile used to count waves.
WAVE_TILE = (128, 128)
_ROW_FAMILIES = frozenset({FAMILIES.index("layernorm"), FAMILIES.index("softmax"), FAMILIES.index("reduction")})
_GEMM_FAMILIES = frozenset({FAMILIES.index("gemm"), FAMILIES.index("conv")})


def range_features(kernels: KernelBatch, sms: np.ndarray | float) -> np.ndarray:
    """float64 [len(kernels), 4]: the :data:`RANGE_FEATURES` of each kernel on a device with ``sms`` SMs
    (one value, or one per kernel)."""
    k = kernels
    sms = np.broadcast_to(np.asarray(sms, dtype=np.float64), (len(k),))
    return np.stack([np.log2(k.flops + 1.0), np.log2(k.bytes + 1.0),
                     np.log2((k.flops + 1.0) / (k.bytes + 1.0)), log2_waves(thread_blocks(k), sms)], axis=1)


def thread_blocks(kernels: KernelBatch) -> np.ndarray:
    """float64 per kernel: the thread blocks its waves are counted in (GEMM tiles, rows, elementwise blocks)."""
    k = kernels
    gemm_blocks = np.maximum(k.gemm_batch, 1.0) * np.ceil(k.gemm_m / WAVE_TILE[0]) * np.ceil(k.gemm_n / WAVE_TILE[1])
    element_blocks = np.ceil(k.out_elements / ELEMENTWISE_BLOCK)
    family = k.family
    return np.where(np.isin(family, list(_GEMM_FAMILIES)), gemm_blocks,
                    np.where(np.isin(family, list(_ROW_FAMILIES)), k.rows, element_blocks))


def log2_waves(blocks: np.ndarray, sms: np.ndarray | float) -> np.ndarray:
    """The ``log2_waves`` column of :func:`range_features` from :func:`thread_blocks`."""
    return np.log2(blocks / sms + 1e-6)


def unmeasured_shapes(kernels: KernelBatch) -> np.ndarray:
    """bool per kernel: kinds of kernel whose family was measured but never in this form, so that the
    measured range says nothing about them: grouped and depthwise convolutions (every convolution of the
    kernel table has one group; MobileNet's, EfficientNet's and ConvNeXt's depthwise ones are memory-bound
    where the measured ones are compute-bound, and go to the memory-bound fallback:
    :func:`lilou.latency.composition.fallback.depthwise`)."""
    return (kernels.family == FAMILIES.index("conv")) & (kernels.conv_groups > 1)


def unmeasured_conv_forms(specs: Sequence[KernelSpec]) -> np.ndarray:
    """bool per kernel: 3-D or dilated convolutions (:attr:`KernelSpec.conv_form`). Every convolution of the kernel
    table is 2-D without dilation (NeuSight's 3x3 ones, DeepBench's of every filter and stride), so the measured
    range says nothing about how cuDNN's 3-D or dilated kernels run."""
    return np.array([bool(spec.conv_form) for spec in specs], dtype=bool)


def fused_attention(specs: Sequence[KernelSpec]) -> np.ndarray:
    """bool per kernel: two matrix products with a softmax in one kernel, what eager runs for
    ``F.scaled_dot_product_attention`` (:func:`lilou.fusion.export_names.fused_call_nodes`). It is priced as a GEMM
    of its first product carrying the FLOPs of both and the softmax, reading Q, K and V once; no eager attention
    kernel was measured, so the GEMM rows' range says nothing about it. An ONNX ``Attention`` node (opset 23, what
    the exporter writes for the same call there) is the same kernel."""
    return np.array([(spec.ops.count("MatMul") >= 2 and "Softmax" in spec.ops) or "Attention" in spec.ops
                     for spec in specs], dtype=bool)


def range_key(architecture: str, dtype: str, family: str) -> str:
    return f"{architecture}|{dtype}|{family}"


def measured_ranges(features: np.ndarray, keys: Sequence[str]) -> dict[str, dict[str, list[float]]]:
    """``{key: {feature: [min, max]}}`` over the rows of each key (what the calibration file stores)."""
    keys = np.asarray(keys, dtype=object)
    out = {}
    for key in sorted(set(keys)):
        rows = features[keys == key]
        out[str(key)] = {name: [round(float(rows[:, i].min()), 4), round(float(rows[:, i].max()), 4)]
                         for i, name in enumerate(RANGE_FEATURES)}
        out[str(key)]["rows"] = int(len(rows))
    return out


def outside(features: np.ndarray, family_names: Sequence[str], architecture: str, dtype: str,
            ranges: Mapping[str, Mapping[str, Sequence[float]]]) -> np.ndarray:
    """bool per kernel (rows of ``features``): outside the measured range of (architecture, dtype, family),
    or no measured row of it at all."""
    out = np.ones(len(features), dtype=bool)
    families = np.asarray(family_names, dtype=object)
    for family in set(families):
        entry = ranges.get(range_key(architecture, dtype, family))
        if entry is None:
            continue
        rows = families == family
        inside = np.ones(int(rows.sum()), dtype=bool)
        for i, name in enumerate(RANGE_FEATURES):
            low, high = entry[name]
            values = features[rows, i]
            inside &= (values >= low - 1e-9) & (values <= high + 1e-9)
        out[rows] = ~inside
    return out
