"""Which precision path a prediction takes, and what Lilou can and cannot stand behind there.

The precision comes from the ONNX tensor types (:func:`lilou.graph.precision.model_precision`) or
``--precision``. FP32 follows PyTorch eager's defaults: on compute capability 8.0 and newer,
convolutions run in TF32 (``torch.backends.cudnn.allow_tf32`` defaults to True) and matmuls do not
(``torch.backends.cuda.matmul.allow_tf32`` defaults to False). ``--tf32 on|off|conv`` sets it.

FP32 kernels are priced by the NeuSight-trained kernel model (TF32 off); GEMMs and convolutions on any
other unit (FP16/BF16/FP8/INT8 tensor cores, DP4A ...) by the tensor-core kernel model trained on the
whole kernel table, which says in the warnings where it has no measured neighbour
(:mod:`lilou.latency.kernel_model.coverage`).

FP32 GEMMs and convolutions that run in TF32 go to the TF32 tensor cores: the tensor-core model prices them
at the TF32 peak with their FP32 bytes. No source of the kernel table measured TF32, so the model reads a
TF32 kernel as a 16-bit tensor-core kernel (the same MMA pipeline at half the rate:
:data:`lilou.latency.kernel_model.features.UNIT_STAND_INS`), every such kernel is flagged extrapolated and
the prediction says so. Keeping them at strict-FP32 rates instead would be wrong by the ratio of the two
peaks (8x on an A100) wherever the kernel is compute-bound.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from lilou.docs import doc
from lilou.errors import LilouInputError
from lilou.graph.precision import PRECISIONS
from lilou.hardware import Device
from lilou.hardware.database import ARCHITECTURE_CLASSES, architecture_class
from lilou.latency.kernel_model.coverage import MeasuredCoverage

if TYPE_CHECKING:
    from lilou.latency.kernel_model.kernel import KernelSpec

#: FP64 tensor cores (DMMA, which cuBLAS's DGEMM runs on) at this multiple of the FP64 CUDA cores, by compute
#: capability: GA100 and GH100 (A100 9.7 -> 19.5, A30 5.2 -> 10.3, H100 SXM 33.5 -> 67 TFLOPS; NVIDIA's datasheets).
#: The GPU database lists the CUDA cores' FP64 only; datacenter Blackwell runs both at one rate.
FP64_TENSOR_RATIO = {"8.0": 2.0, "9.0": 2.0}


def fp64_peak_tflops(device: Device) -> float | None:
    """The fastest FP64 rate of ``device`` (its FP64 tensor cores' where it has them), None where the database has
    no FP64 peak."""
    peak = device.peak_tflops.get("fp64")
    return peak * FP64_TENSOR_RATIO.get(device.compute_capability, 1.0) if peak else None


TF32_MODES = ("off", "conv", "on")
#: Precisions the shipped kernel model has measurements of.
MEASURED_PRECISIONS = frozenset({"fp32"})


def compute_capability(device: Device) -> tuple[int, int]:
    """``"8.6"`` -> (8, 6): compared as numbers ("10.0" is newer than "8.0")."""
    major, _, minor = device.compute_capability.partition(".")
    return int(major), int(minor or 0)


def default_tf32(device: Device) -> str:
    """PyTorch eager's TF32 default on ``device``: convolutions only, from compute capability 8.0 on."""
    return "conv" if compute_capability(device) >= (8, 0) else "off"


def _choice(value: str | None, allowed: tuple[str, ...], what: str) -> str | None:
    """``value`` normalised, if it is one of ``allowed``; None stays None; anything else is a one-line error."""
    if value is None:
        return None
    if not isinstance(value, str):  # precision=16, tf32=True from the API
        raise LilouInputError(f"{what} must be one of {', '.join(allowed)}, not {value!r:.40}")
    wanted = value.strip().lower()
    if wanted not in allowed:
        raise LilouInputError(f"unknown {what} {value!r}; use one of {', '.join(allowed)}")
    return wanted


def check_precision(precision: str | None) -> str | None:
    return _choice(precision, PRECISIONS, "precision")


def check_tf32(tf32: str | None) -> str | None:
    return _choice(tf32, TF32_MODES, "--tf32")


def check_precision_options(precision: str | None, tf32: str | None) -> tuple[str | None, str | None]:
    """Both options checked, and together: ``--precision tf32`` runs every FP32 matmul and convolution in TF32,
    which ``--tf32 off`` or ``conv`` contradicts (the TF32 was kept and the other dropped without a word)."""
    precision, tf32 = check_precision(precision), check_tf32(tf32)
    if precision == "tf32" and tf32 in ("off", "conv"):
        raise LilouInputError(f"--precision tf32 runs FP32 matmuls and convolutions in TF32, which --tf32 {tf32} "
                              "contradicts: give one of the two (--precision fp32 --tf32 MODE for FP32 with TF32 so)")
    return precision, tf32


@dataclass(frozen=True)
class PrecisionPath:
    """The precision of one prediction: the model's (or the override) and TF32 on that device."""

    precision: str   # fp32 | tf32 | fp16 | bf16 | fp8 | int8 | int4 | fp4
    tf32: str        # off | conv | on (what FP32 convolutions and matmuls run in on this device)
    source: str      # "onnx" (tensor types) or "option" (--precision)
    activations: str | None = None  # fp16 where --precision fp8/fp4 runs weight-only kernels (no such tensor cores)


def precision_path(model_precision: str, device: Device, precision: str | None = None,
                   tf32: str | None = None) -> PrecisionPath:
    """The path a prediction takes on ``device``; TF32 is off where the GPU has no TF32 (before 8.0), and TF32 asked
    of such a GPU is strict FP32, what is priced there (its interval and label were TF32's: unmeasured, 3x wider).
    ``tf32`` describes FP32 work only: under ``--precision`` other than fp32/tf32 no matmul or convolution is FP32,
    so it is off (an INT8 or FP16 run read ``"tf32": "conv"`` on Ampere and newer)."""
    chosen = precision or model_precision
    mode = tf32 if tf32 is not None else default_tf32(device)
    if chosen == "tf32":
        mode = "on"
    if precision is not None and chosen not in ("fp32", "tf32"):
        mode = "off"  # --precision P prices every matmul and convolution in P: no FP32 one runs in TF32
    if compute_capability(device) < (8, 0):
        mode = "off"
        chosen = "fp32" if chosen == "tf32" else chosen
    return PrecisionPath(precision=chosen, tf32=mode, source="option" if precision else "onnx",
                         activations="fp16" if runs_weight_only(precision, device) else None)


#: Weight-only FP8/FP4 GEMMs (vLLM's Marlin kernels) need Ampere's instructions: compute capability 8.0.
WEIGHT_ONLY_CAPABILITY = (8, 0)


def runs_weight_only(precision: str | None, device: Device) -> bool:
    """``--precision fp8`` (or fp4) on a GPU without the format's tensor cores: what runs there is a weight-only
    kernel (vLLM's FP8 Marlin: FP8 weights, 16-bit activations on the FP16 tensor cores), so the model is priced
    with FP16 activations (lilou.api.Predictor._in_precision_by_device)."""
    return precision in _NEEDS_CAPABILITY and not device.peak_tflops.get(_TENSOR_UNITS[precision][0])


def precision_warnings(paths: list[PrecisionPath], has_conv: bool, has_matmul: bool, mixed: bool,
                       devices: list[Device] | None = None, coverage: MeasuredCoverage | None = None,
                       retyped: bool = False) -> list[str]:
    """What Lilou cannot stand behind on these paths (one line each, devices pooled).

    ``devices`` (one per path) and ``coverage`` (what the tensor-core kernel model measured): with them,
    GEMMs and convolutions off the FP32 CUDA cores are checked for a measured neighbour of their precision,
    family and architecture class; without them every precision but FP32 is reported as unmeasured. ``retyped``:
    the precision is ``--precision``'s, so the GPUs without FP8 (FP4) tensor cores were priced with FP16
    activations (lilou.api.Predictor._in_precision_by_device), not the file's own types."""
    warnings = []  # what --precision changed is said where the model is retyped (Predictor.in_precision)
    if coverage is None or devices is None:
        unmeasured = sorted({p.precision for p in paths} - MEASURED_PRECISIONS)
        if unmeasured:
            names = ", ".join(p.upper() for p in unmeasured)
            warnings.append(f"the model computes in {names}, but the shipped kernel model has FP32 measurements only: "
                            f"its {names} kernels are predicted at FP32 rates on CUDA cores (on tensor-core GPUs, "
                            f"several times too slow; {doc('kernel_model.md')})")
    else:
        families = [f for f, present in (("gemm", has_matmul), ("conv", has_conv)) if present]
        warnings += _coverage_warnings(paths, devices, families, coverage, retyped)
    if mixed:
        warnings.append("the graph's matmuls and convolutions mix precisions: each is priced on the unit of the type "
                        "it reads, with that precision's interval band; the dominant one is reported")
    tf32_conv = has_conv and any(runs_tf32("conv", p) for p in paths)
    tf32_matmul = has_matmul and any(runs_tf32("gemm", p) for p in paths)
    if tf32_conv or tf32_matmul:
        what = " and ".join(w for w, on in (("convolutions", tf32_conv), ("matmuls", tf32_matmul)) if on)
        default = " (PyTorch's default for convolutions on compute capability 8.0 and newer)" if tf32_conv else ""
        warnings.append(f"FP32 {what} run in TF32{default}: priced on the TF32 tensor cores at their peak, but no "
                        "source of the kernel table measured TF32, so these kernels are extrapolated from 16-bit "
                        "tensor-core measurements; --tf32 off predicts strict-FP32 runs")
    return warnings


def tf32_unavailable(requested: str | None, precision: str | None, devices: Sequence[Device], has_conv: bool,
                     has_matmul: bool) -> list[str]:
    """A line when TF32 was asked for (``--tf32 on|conv``, ``--precision tf32``) on GPUs without it: their FP32
    kernels are priced in strict FP32, as they run there (:func:`precision_path` turns TF32 off before 8.0)."""
    wanted = "on" if precision == "tf32" else requested
    if wanted not in ("on", "conv") or not (has_conv or (wanted == "on" and has_matmul)):
        return []
    older = sorted({d.gpu for d in devices if compute_capability(d) < (8, 0)})
    if not older:
        return []
    return [f"{', '.join(older)}: no TF32 tensor cores (TF32 needs compute capability 8.0 or newer): TF32 was asked "
            "for, and FP32 kernels are priced in strict FP32 there, as they run"]


def tf32_moot(requested: str | None, precision: str | None, stored: str | None = None) -> list[str]:
    """A line when ``--tf32 on|conv`` was given with a ``--precision`` that prices every matmul and convolution in
    another format, or (``stored``) for a file whose matmuls and convolutions are all stored in another: no FP32 one
    is left to run in TF32 (:func:`precision_path` turns it off), and the option was dropped without a word (audit
    ua43d, finding 5; an FP16 file read ``"tf32": "on"``, ua44b). No line for the default (no ``--tf32``) or ``--tf32
    off``."""
    if requested not in ("on", "conv"):
        return []
    if precision not in (None, "fp32", "tf32"):
        return [f"--tf32 {requested} changes nothing under --precision {precision}: no matmul or convolution is priced "
                "in FP32 there, so none runs in TF32 (tf32: off)"]
    if precision is None and stored not in (None, "fp32", "tf32"):
        return [f"--tf32 {requested} changes nothing for this {stored.upper()} file: no matmul or convolution is stored "
                "in FP32, so none runs in TF32 (tf32: off)"]
    return []


def runs_tf32(family: str, path: PrecisionPath) -> bool:
    """An FP32 kernel of ``family`` whose math runs in TF32 on this path (``path.tf32`` is already off on GPUs
    without TF32): convolutions under ``conv`` or ``on``, GEMMs under ``on``."""
    if path.precision not in ("fp32", "tf32") or family not in MATH_FAMILIES:
        return False
    return path.tf32 == "on" or (path.tf32 == "conv" and family == "conv")


#: Tensor-core unit of each low precision, and the CUDA-core unit it falls back to on a GPU without it.
#: (tensor-core unit, unit without one). FP16 without tensor cores is FP32 math: PyTorch calls cuBLAS with compute
#: type FP32 and sets cuDNN's math type to FP32 for half tensors, so a Pascal board's FP16 units (1/64 rate on
#: GP102/GP104) never run them, and the kernel table labels DeepBench's P100 FP16 rows "fp32" (FP16 storage).
_TENSOR_UNITS = {"fp16": ("fp16_tensor", "fp32"), "bf16": ("bf16_tensor", "fp32"), "fp8": ("fp8_tensor", None),
                 "int8": ("int8_tensor", "int8"), "fp4": ("fp4_tensor", None)}  # int4: kernel_unit
MATH_FAMILIES = frozenset({"gemm", "conv"})
#: Formats with tensor cores of their own from a compute capability on; before it they are upcast (kernel_unit).
_NEEDS_CAPABILITY = {"fp8": (8, 9), "fp4": (10, 0)}


def kernel_path(path: PrecisionPath, precision: str) -> PrecisionPath:
    """The path of one GEMM or convolution that reads ``precision`` (``KernelSpec.precision``): its own where the
    file's types give it one other than the model's (a partly quantized model's FP32 first convolution, a
    dynamically quantized BERT's FP32 attention matmuls), the model's under ``--precision``."""
    if not precision or precision == path.precision or path.source == "option":
        return path
    return replace(path, precision=precision)


def kernel_precisions(specs: Sequence[KernelSpec], paths: Sequence[PrecisionPath]) -> np.ndarray:
    """str [kernels, paths]: the precision each kernel is priced in on each path (a GEMM's or convolution's own,
    :func:`kernel_path`; the path's activations' for the other families)."""
    out = np.empty((len(specs), len(paths)), dtype=object)
    columns: dict[tuple[str, str, str | None], list[str]] = {}  # the column depends on these three only
    for j, path in enumerate(paths):
        key = (path.precision, path.source, path.activations)
        if key not in columns:
            columns[key] = [kernel_path(path, spec.precision).precision if spec.family in MATH_FAMILIES
                            else path.activations or path.precision for spec in specs]
        out[:, j] = columns[key]
    return out


def band_precisions(kernel_dtypes: np.ndarray, specs: Sequence[KernelSpec], devices: Sequence[Device]) -> np.ndarray:
    """The precision whose interval band each GEMM and convolution takes ([kernels, devices], from
    :func:`kernel_precisions`): the one it is priced as. FP8 and FP4 ones on a GPU without the format's tensor cores
    (weight-only GEMMs, convolutions no runtime runs) and INT4 convolutions are priced as FP16 kernels on the FP16
    tensor cores (:func:`kernel_unit`), so they take the FP16 band; before session 41 they took the format's, which
    has no convolution residual, so the widest convolution band (INT8's), while a warning said FP16."""
    out = np.array(kernel_dtypes, dtype=object, copy=True)
    math = np.array([spec.family in MATH_FAMILIES for spec in specs], dtype=bool)
    conv = np.array([spec.family == "conv" for spec in specs], dtype=bool)
    for j, device in enumerate(devices):
        if not device.peak_tflops.get("fp16_tensor"):
            continue
        column = out[:, j]
        for precision in ("fp8", "fp4"):
            if not device.peak_tflops.get(_TENSOR_UNITS[precision][0]):
                column[math & (column == precision)] = "fp16"
        column[conv & (column == "int4")] = "fp16"
    return out


def kernel_unit(family: str, path: PrecisionPath, device: Device) -> str | None:
    """The unit whose peak bounds a kernel's math on ``device`` (a key of its ``peak_tflops``), or None for
    the FP32 CUDA cores. Only GEMMs and convolutions change unit; memory-bound kernels keep FP32.

    FP32 GEMMs and convolutions that run in TF32 on this path (:func:`runs_tf32`) map to the TF32 tensor cores."""
    if family not in MATH_FAMILIES:
        return None
    if path.precision in ("fp32", "tf32"):
        return "tf32_tensor" if runs_tf32(family, path) and device.peak_tflops.get("tf32_tensor") else None
    peaks = device.peak_tflops
    if path.precision == "int4":
        # INT4 is weight-only (W4A16: AWQ, GPTQ, onnxruntime's MatMulNBits): the weights are dequantised onto the
        # 16-bit tensor cores, as the kernel table's int4-weight-only rows are labelled (bf16_tensor); no source or
        # runtime here runs INT4 tensor-core math (before session 32, an A100's or T4's INT4 peak priced them).
        # No runtime runs INT4 (or W4A16) convolutions at all: they run as FP16 convolutions.
        units = ("fp16_tensor", "fp32") if family == "conv" else ("bf16_tensor", "fp16_tensor", "fp32")
        return next((unit for unit in units if peaks.get(unit)), None)
    if path.precision == "bf16" and family == "conv" and peaks.get("bf16_tensor") and peaks.get("fp16_tensor"):
        # FP16 and BF16 run on one tensor-core rate; no source measured a BF16 convolution, and the BF16 one-hot
        # (learned on GEMMs only) priced them 9-21 % under FP16 ones: a BF16 convolution is priced as the FP16 one.
        # Since BF16 shares the FP16 column (features.UNIT_STAND_INS) the price is the same either way; this keeps
        # the kernel's name and coverage look-up.
        return "fp16_tensor"
    tensor, fallback = _TENSOR_UNITS.get(path.precision, (None, None))
    if tensor and peaks.get(tensor):
        return tensor
    if path.precision in ("fp8", "fp4") and peaks.get("fp16_tensor"):
        return "fp16_tensor"  # no unit for the format: the runtime upcasts to FP16 tensor cores
    return fallback if fallback and peaks.get(fallback) else None


def _math_kind(family: str, path: PrecisionPath, device: Device) -> str:
    """How GEMMs or convolutions (``family``) of ``path.precision`` run on ``device``, from :func:`kernel_unit`:
    ``own`` (the unit of the format: its tensor cores, DP4A for INT8, the CUDA cores for FP32; INT4's 16-bit tensor
    cores), ``fp32_math`` (no unit for it: FP32 math on the CUDA cores, as PyTorch runs FP16 on Pascal, BF16 before
    Ampere), ``no_unit`` (FP8, FP4 without tensor cores), ``marlin`` (FP8, FP4 GEMMs as weight-only kernels on the
    FP16 tensor cores, compute capability 8.0 on), ``upcast`` (FP8, FP4 priced on the FP16 tensor cores where no
    weight-only kernel runs: older GPUs, convolutions) or ``no_int8`` (INT8 without a path: :func:`_int8_kind`)."""
    unit = kernel_unit(family, path, device)
    if path.precision == "int8" and unit is None:
        return "no_int8"
    if unit is None or unit == "fp32":
        if path.precision in ("fp32", "tf32", "fp64"):
            return "own"
        return "no_unit" if path.precision in _NEEDS_CAPABILITY else "fp32_math"
    if path.precision in _NEEDS_CAPABILITY and unit != _TENSOR_UNITS[path.precision][0]:
        return "marlin" if family == "gemm" and compute_capability(device) >= WEIGHT_ONLY_CAPABILITY else "upcast"
    return "own"


#: What runs a prediction's precision on a device, best first: the ``precision_path`` of `infer`, `rank` and `plan`
#: rows (docs/kernel_model.md, "Precision paths"). ``native``: the format's own units run its GEMMs and convolutions
#: (its tensor cores; INT8 on DP4A where there are none; FP32, TF32 as the device runs them). ``weight_only``: its
#: weights on the 16-bit tensor cores with FP16 activations (FP8, FP4 where the GPU has no such tensor cores, from
#: compute capability 8.0; INT4, which is weight-only everywhere). ``emulated``: a runtime runs it with FP32 math on
#: the CUDA cores (FP16 on Pascal and Maxwell, BF16 before Ampere). ``no_runtime``: no known runtime runs it there
#: (FP8, FP4 before 8.0, FP8 convolutions without FP8 tensor cores, INT8 without DP4A): the figure is a lower bound,
#: and a plan does not count the device as meeting its SLO.
PRECISION_PATHS = ("native", "weight_only", "emulated", "no_runtime")


@dataclass(frozen=True)
class PrecisionSupport:
    """The :data:`PRECISION_PATHS` verdict of one prediction and, but where native, why (one short line)."""

    path: str = "native"
    note: str = ""


def _support_of(kind: str, family: str, path: PrecisionPath, device: Device) -> PrecisionSupport:
    name = f"{path.precision.upper()} {'GEMMs' if family == 'gemm' else 'convolutions'}"
    fmt = path.precision.upper()
    if kind in ("no_unit", "upcast"):
        why = ("no runtime runs weight-only convolutions" if family == "conv" and compute_capability(device) >=
               WEIGHT_ONLY_CAPABILITY else f"{fmt} needs compute capability "
               f"{'.'.join(map(str, _NEEDS_CAPABILITY[path.precision]))}, weight-only kernels 8.0")
        return PrecisionSupport("no_runtime", f"no known runtime runs {name} on {device.gpu} ({why}): a lower bound")
    if kind == "no_int8":
        return PrecisionSupport("no_runtime", f"no INT8 path on {device.gpu} (no INT8 tensor cores, no DP4A): "
                                          "a lower bound")
    if kind == "fp32_math":
        return PrecisionSupport("emulated", f"{name} run with FP32 math on {device.gpu}'s CUDA cores (no {fmt} "
                                            "tensor cores)")
    if kind == "marlin" and path.source != "option":  # a file stored in the format: TensorRT's, not a checkpoint's
        return PrecisionSupport("no_runtime", f"no known runtime runs the file's {name} on {device.gpu}: TensorRT "
                                              f"needs {fmt} tensor cores (compute capability "
                                              f"{'.'.join(map(str, _NEEDS_CAPABILITY[path.precision]))}), and "
                                              "weight-only kernels (vLLM's Marlin) serve checkpoints, not ONNX files: "
                                              "a lower bound")
    if kind == "marlin":
        return PrecisionSupport("weight_only", f"{name} run weight-only on {device.gpu}: {fmt} weights, FP16 "
                                               f"activations on the FP16 tensor cores (no {fmt} tensor cores)")
    if path.precision == "int4":
        return PrecisionSupport("weight_only", f"{name} run weight-only (W4A16): INT4 weights, 16-bit activations on "
                                               "the 16-bit tensor cores" + (" (as FP16 convolutions)"
                                                                            if family == "conv" else ""))
    return PrecisionSupport()


def precision_support(device: Device, kernels: Sequence[tuple[PrecisionPath, Sequence[str]]]) -> PrecisionSupport:
    """The worst :data:`PRECISION_PATHS` verdict over ``kernels``: each precision the model's GEMMs and convolutions
    compute in on ``device`` (its path, :func:`kernel_path` for a mixed file's others) with the families present in
    it ("gemm", "conv"). The same decisions as the warnings (:func:`_math_kind`, :func:`_int8_kind`), per device."""
    worst = PrecisionSupport()
    for path, families in kernels:
        for family in families:
            support = _support_of(_math_kind(family, path, device), family, path, device)
            if PRECISION_PATHS.index(support.path) > PRECISION_PATHS.index(worst.path):
                worst = support
    return worst


#: Precisions whose measurements stand for each other: FP16 and BF16 run on the same tensor cores at one rate.
_NEIGHBOURS = {"fp16": ("fp16", "bf16"), "bf16": ("bf16", "fp16")}


def slower_than_16_bit(precision: str, devices: Sequence[Device]) -> list[str]:
    """A note for the devices whose tensor cores run ``precision`` (INT8, FP8, FP4) below their 16-bit rate: Blackwell
    Ultra (B300, GB300) cut INT8 to 153.5-165 TOPS against 2,250-2,500 TFLOPS of BF16, so INT8 there is priced
    slower than BF16, which reads as a bug unless said."""
    unit = _TENSOR_UNITS.get(precision, (None, None))[0]
    slow = {}
    for device in devices:
        peak, half = device.peak_tflops.get(unit or ""), device.peak_tflops.get("fp16_tensor")
        if peak and half and peak < half:
            slow[device.gpu] = (peak / device.sm_fraction, half / device.sm_fraction)
    if not slow:
        return []
    ops = "TOPS" if precision.startswith("int") else "TFLOPS"
    rates = ", ".join(f"{gpu} {peak:g} {ops} against {half:g} TFLOPS" for gpu, (peak, half) in slow.items())
    return [f"{precision.upper()} tensor cores peak below the FP16/BF16 ones on {rates} (dense, the GPU database's "
            f"datasheet figures): {precision.upper()} GEMMs are priced slower than 16-bit ones there"]


def _coverage_warnings(paths: list[PrecisionPath], devices: list[Device], families: list[str],
                       coverage: MeasuredCoverage, retyped: bool = False) -> list[str]:
    """One line per (precision, family) whose kernels, on some of ``devices``, have no measured neighbour."""
    warnings = []
    for precision in sorted({p.precision for p in paths} - {"fp32", "tf32"}):
        if families:
            warnings += slower_than_16_bit(precision, [d for p, d in zip(paths, devices) if p.precision == precision])
        if precision == "int8":
            warnings += _int8_warnings([d for p, d in zip(paths, devices) if p.precision == "int8"], families,
                                       retyped)
        for family in families:
            no_unit, upcast, unmeasured = set(), set(), set()
            marlin = set()
            for path, device in zip(paths, devices):
                if path.precision != precision:
                    continue
                kind = _math_kind(family, path, device)
                if kind == "no_int8":
                    continue  # no INT8 path: said once for both families (_int8_warnings)
                if kind in ("fp32_math", "no_unit"):
                    no_unit.add(device.gpu)
                elif kind in ("marlin", "upcast"):
                    upcast.add(device.gpu)
                    if kind == "marlin":
                        marlin.add(device.gpu)
                elif not any(coverage.count(p, family, architecture_class(device.gpu))
                             for p in _NEIGHBOURS.get(precision, (precision,))):
                    unmeasured.add(architecture_class(device.gpu))
            name = f"{precision.upper()} {'GEMMs' if family == 'gemm' else 'convolutions'}"
            if precision == "fp64":
                peaks = sorted({fp64_peak_tflops(d) or 0 for p, d in zip(paths, devices) if p.precision == "fp64"})
                warnings.append(f"{name}: no source of the kernel table measured FP64; they are priced as strict-FP32 "
                                "kernels on 8-byte tensors, never faster than the FP64 peak "
                                f"({peaks[0]:g}{f'-{peaks[-1]:g}' if peaks[-1] != peaks[0] else ''} TFLOPS here, the "
                                "FP64 tensor cores' where the GPU has them; never in TF32)")
                continue
            if no_unit and precision in ("fp16", "int4"):
                warnings.append(f"{', '.join(sorted(no_unit))}: no tensor cores, so PyTorch runs {name} with FP32 math "
                                "(cuBLAS and cuDNN compute in FP32 on 16-bit tensors); they are predicted at FP32 "
                                "CUDA-core rates with 16-bit tensors")
            elif no_unit and precision in _NEEDS_CAPABILITY:  # FP8, FP4 on a GPU without tensor cores (Pascal, Maxwell)
                warnings.append(f"{', '.join(sorted(no_unit))}: no known runtime runs {name} there (no tensor cores: "
                                f"{precision.upper()} needs compute capability "
                                f"{'.'.join(map(str, _NEEDS_CAPABILITY[precision]))}, weight-only kernels 8.0); they "
                                "are predicted at FP32 CUDA-core rates with the format's tensors, a lower bound on what "
                                "a program that upcasts them would take")
            elif no_unit:
                warnings.append(f"{', '.join(sorted(no_unit))}: no unit for {name}; they are predicted at FP32 "
                                "CUDA-core rates, as measured FP32 kernels")
            if marlin:
                needs = ".".join(map(str, _NEEDS_CAPABILITY[precision]))
                stored = (f"{precision.upper()} weights and FP16 activations" if retyped else
                          f"the file's {precision.upper()}-stored tensors (their 16-bit activations would move more "
                          "bytes than predicted)")
                warnings.append(f"{', '.join(sorted(marlin))}: no {precision.upper()} tensor cores ({precision.upper()} "
                                f"needs compute capability {needs} or newer): {name} are priced as weight-only "
                                f"{precision.upper()} kernels run there, on the FP16 tensor cores with {stored}; an "
                                "engine that needs the format's own math (TensorRT, ModelOpt) cannot run them there")
            if upcast - marlin:
                why = ("no runtime runs weight-only convolutions" if family == "conv" else
                       "the weight-only kernels that run them on other GPUs (vLLM's Marlin) need compute capability "
                       "8.0 or newer")
                warnings.append(f"{', '.join(sorted(upcast - marlin))}: no known runtime runs {name} there ({why}); "
                                "they are priced as FP16 kernels with the format's smaller weights, a lower bound on "
                                "what a runtime that upcasts them would take; their 90 % interval is FP16 kernels' "
                                "around that bound and does not cover the upcast's cost")
            if unmeasured:
                measured = sorted({a for p in _NEIGHBOURS.get(precision, (precision,))
                                   for a in coverage.architectures(p, family)}, key=ARCHITECTURE_CLASSES.index)
                where = f"measured on {', '.join(measured)} only" if measured else "measured on no GPU"
                warnings.append(f"{name} on {', '.join(sorted(unmeasured))} GPUs have no measured neighbour in the "
                                f"kernel table ({where}): extrapolated across architectures")
    return warnings



def _int8_kind(device: Device) -> str:
    """What runs INT8 GEMMs and convolutions on ``device`` (the GPU database's peaks, after TensorRT's
    hardware-precision matrix): ``tensor`` (INT8 tensor cores, 7.5 on), ``volta`` (DP4A beside faster FP16 tensor
    cores, 7.0), ``dp4a`` (DP4A alone, 6.1) or ``none`` (6.0 and Maxwell: no INT8 path)."""
    peaks = device.peak_tflops
    if peaks.get("int8_tensor"):
        return "tensor"
    if not peaks.get("int8"):
        return "none"
    return "volta" if (peaks.get("fp16_tensor") or 0.0) > peaks["int8"] else "dp4a"


def _int8_warnings(devices: Sequence[Device], families: list[str], retyped: bool) -> list[str]:
    """One line per kind of GPU without INT8 tensor cores (compute capability 7.5 on has them), both math families
    pooled: what their INT8 GEMMs and convolutions are priced on, and what the INT8 bytes of the other kernels are
    worth there. The kinds follow TensorRT's hardware-precision matrix: INT8 (DP4A) and FP16 tensor cores but no INT8
    tensor cores on 7.0, INT8 without FP16 on 6.1, no INT8 on 6.0 and Maxwell; TensorRT times each layer's INT8 and
    FP16 kernels and keeps the faster. The GPU database says which: its ``int8`` (DP4A) and ``fp16_tensor`` peaks."""
    if not families:
        return []
    what = " and ".join("GEMMs" if family == "gemm" else "convolutions" for family in families)
    stored = "as --precision int8 stores them" if retyped else "as the file stores them"
    volta: dict[str, float] = {}
    dp4a, none = set(), set()
    for device in devices:
        kind, peaks = _int8_kind(device), device.peak_tflops
        if kind == "none":
            none.add(device.gpu)
        elif kind == "volta":
            volta[device.gpu] = peaks["fp16_tensor"] / peaks["int8"]
        elif kind == "dp4a":
            dp4a.add(device.gpu)
    lines = []
    if volta:
        share = f"{1 / max(volta.values()):.0%}"
        lines.append(f"{', '.join(sorted(volta))}: no INT8 tensor cores, so the INT8 {what} are priced on the CUDA "
                     f"cores' DP4A instructions, whose peak is {share} of the FP16 tensor cores': any INT8 gain over "
                     f"FP16 here comes from the other kernels' 1-byte tensors (norms, softmax, elementwise: INT8 {stored}), "
                     "which TensorRT keeps only between layers it runs in INT8; it runs each layer on the faster of DP4A "
                     "and the FP16 tensor cores, so the engine it builds is no slower than the faster of this "
                     "prediction and --precision fp16's")
    if dp4a:
        lines.append(f"{', '.join(sorted(dp4a))}: no INT8 tensor cores, so the INT8 {what} run on the CUDA cores' DP4A "
                     "instructions (four INT8 products per lane and instruction), priced at the database's INT8 "
                     "CUDA-core peak (their FP16 units run at 1/64 of FP32's: no FP16 engine is faster)")
    if none:
        lines.append(f"{', '.join(sorted(none))}: no INT8 path (no INT8 tensor cores, and no DP4A before compute "
                     "capability 6.1: TensorRT runs no INT8 there, and onnxruntime's CUDA EP runs a QDQ file's float "
                     f"ops between its quantize and dequantize kernels): the INT8 {what} are priced at FP32 CUDA-core "
                     f"rates, their tensors and the other kernels' in INT8 {stored}: a lower bound on the FP32 run, "
                     "which --precision fp32 prices")
    return lines
