"""Memory-bound fallback for kernels whose kind the measurements never covered.

The per-kernel model was trained on NeuSight's real rows, which cover GEMMs
(``linear``, ``bmm``), 3x3 convolutions, elementwise arithmetic/activations,
LayerNorm and Softmax. Nothing was measured for embeddings (``Gather``), copies
(``Transpose``, ``Concat``, ``Cast``, ``Slice`` ...), pooling and other
reductions, ``BatchNormalization``, ``Resize`` and the like, nor for ops without a
cost formula; and no source measured a depthwise convolution, a memory pass unlike the
compute-bound convolutions the models learned (:func:`depthwise`), nor a matrix-vector product (``A @ v`` with a
1-D ``v``: eager's ``mv``, cuBLAS's GEMV, a pass over the matrix; the GEMM model, which saw only matrices, priced a
64 MB one at 12 % of the DRAM bandwidth on every GPU). Such kernels get this model instead of an extrapolation:

    work_ms = max(bytes / (efficiency * bandwidth), flops / fp32_peak)

a pass over its bytes at the DRAM bandwidth that real elementwise kernels
achieve, never faster than the FP32 roofline. ``efficiency`` is fitted on the
NeuSight elementwise rows of the training GPUs whose DRAM time (bytes / bandwidth)
is at least :data:`FIT_MIN_MEMORY_MS`, as ``latency = floor + bytes / (efficiency *
bandwidth)`` by relative least squares: below that size a kernel's share of
end-to-end time is the dispatch gap (:mod:`lilou.latency.composition.overhead`), not its work,
and the launch floor would dominate the fit (all rows give 0.91, these 0.78; large
copies reach 0.76 to 0.95 of spec bandwidth). ``floor_ms`` of that fit is the time such a
kernel takes alone, reported like the model's floor. These kernels are listed by
``lilou infer`` with the share of predicted time they carry.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from lilou.graph.costs import VIEW_OPS
from lilou.latency.kernel_model.features import DeviceColumns, KernelBatch, roofline_ms
from lilou.latency.kernel_model.kernel import KernelSpec

#: Kernel families with real training rows (the main node of the group decides the family).
COVERED_FAMILIES = frozenset({"gemm", "conv", "elementwise", "layernorm", "softmax"})

FALLBACK_TYPE = "memory_fallback"
#: Rows used to fit the efficiency: DRAM time at spec bandwidth of at least 10 µs.
FIT_MIN_MEMORY_MS = 0.01


def uses_fallback(spec: KernelSpec, unsupported_ops: frozenset[str] = frozenset()) -> bool:
    """True when the per-kernel model has no data for this kernel's kind.

    That is when its family (that of its main node: a ``BatchNormalization`` or
    ``Transpose`` kernel is ``memory``, pooling is ``reduction``) was never measured,
    when it holds an op without a cost formula, whose FLOPs the features lack, or when it
    is a depthwise convolution (:func:`depthwise`).
    """
    if spec.recurrent is not None:
        return False  # an LSTM/GRU/RNN layer: lilou.latency.kernel_model.recurrent prices it
    return (spec.family not in COVERED_FAMILIES or any(op in unsupported_ops for op in spec.ops) or depthwise(spec)
            or spec.matvec)


def depthwise(spec: KernelSpec) -> bool:
    """A convolution with one input channel per group (MobileNet's, EfficientNet's, ConvNeXt's).

    No source of the kernel table measured a grouped convolution, and a depthwise one is a different kind of
    kernel from the dense ones the convolution models learned: 2 x window FLOPs per output element against
    hundreds, so it is bound by memory where every measured convolution is bound by compute, and PyTorch runs
    it (FP32, NCHW) in its own direct kernel (``CudaDepthwise2d``), not in cuDNN on tensor cores. Priced by the
    convolution models it came out at 3-6x its DRAM time; the fallback prices it as the memory pass it is.
    """
    if spec.family != "conv" or spec.conv is None or spec.gemm is None:
        return False
    window, _, groups = spec.conv
    return groups > 1 and spec.gemm[3] == window  # implicit GEMM k = input channels per group x window


def fallback_ops(spec: KernelSpec) -> list[str]:
    """The ops of a fallback kernel worth naming (views left out); a depthwise convolution says so."""
    ops = [op for op in spec.ops if op not in VIEW_OPS] or list(spec.ops)
    if depthwise(spec):
        ops = [f"{op} (depthwise)" if op in ("Conv", "ConvTranspose") else op for op in ops]
    if spec.matvec:
        ops = [f"{op} (matrix-vector)" if op == "MatMul" else op for op in ops]
    return list(dict.fromkeys(ops))


@dataclass(frozen=True)
class FallbackModel:
    efficiency: float  # achieved share of DRAM bandwidth
    floor_ms: float    # time of a tiny kernel launched alone

    def work_ms(self, kernels: KernelBatch, devices: DeviceColumns) -> np.ndarray:
        compute, memory = roofline_ms(kernels, devices)
        return np.maximum(memory / self.efficiency, compute)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def fit_fallback(bytes_moved: Sequence[float], bandwidth_gbs: Sequence[float],
                 latency_ms: Sequence[float]) -> FallbackModel:
    """Fit ``latency = floor + bytes / (efficiency * bandwidth)`` minimising squared relative error."""
    x = np.asarray(bytes_moved, dtype=np.float64) / (np.asarray(bandwidth_gbs, dtype=np.float64) * 1e6)
    y = np.asarray(latency_ms, dtype=np.float64)
    design = np.stack([np.ones_like(x), x], axis=1) / y[:, None]
    (floor, inverse_efficiency), *_ = np.linalg.lstsq(design, np.ones_like(y), rcond=None)
    return FallbackModel(efficiency=float(1.0 / inverse_efficiency), floor_ms=float(floor))


def fallback_mape(model: FallbackModel, bytes_moved, bandwidth_gbs, latency_ms) -> float:
    x = np.asarray(bytes_moved, dtype=np.float64) / (np.asarray(bandwidth_gbs, dtype=np.float64) * 1e6)
    y = np.asarray(latency_ms, dtype=np.float64)
    predicted = model.floor_ms + x / model.efficiency
    return float(100 * np.mean(np.abs(predicted - y) / y))

