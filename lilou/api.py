"""The Python API: ``Predictor`` loads the checkpoints once and predicts any model on any device.

>>> from lilou import Predictor
>>> p = Predictor(backend="eager")
>>> result = p.predict("examples/resnet18.onnx", gpu="a10g")   # doctest: +SKIP
>>> result.latency_ms, len(result.kernels), result.warnings     # doctest: +SKIP
>>> [(r.gpu, r.mig, r.latency_ms) for r in p.rank("examples/resnet18.onnx")][:3]   # doctest: +SKIP

``result.to_json()`` is exactly what ``lilou infer --format json`` prints and
``p.rank(...).to_json()`` what ``lilou rank --format json`` prints; the CLI is a
thin layer over this module. The graph is parsed, grouped into kernels and
described once per call, whatever the number of devices.

Grouping is most of a prediction (the fusion GNN and the kernel descriptions: about 85 % for
ResNet-18), so a caller that predicts one model many times prepares it once:

>>> prepared = p.prepare("examples/resnet18.onnx")                # doctest: +SKIP
>>> p.predict(prepared, gpu="t4"), p.rank(prepared, gpus=["a10g", "l4"])   # doctest: +SKIP

``predict``, ``predict_many`` and ``rank`` of a path or a graph are ``prepare`` followed by the same
code, so a prepared model gives exactly the results its path gives.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from lilou.checkpoints import KERNEL_LATENCY, KERNEL_LATENCY_TENSOR, checkpoint_path
from lilou.errors import LilouInputError
from lilou.hardware import Device, resolve_device
from lilou.hardware.database import architecture_class
from lilou.latency.composition.breakdown import CATEGORIES, kernel_category
from lilou.latency.kernel_model.coverage import MeasuredCoverage
from lilou.latency.composition.end_to_end import EndToEndModel, GraphKernels, KernelWork, describe_kernels
from lilou.latency.composition.fallback import FallbackModel, fallback_ops
from lilou.latency.kernel_model.inference import KernelModel
from lilou.latency.kernel_model.transposed import load_ratios
from lilou.latency.kernel_model.features import KernelBatch, power_factor
from lilou.latency.composition.overhead import E2E_OVERHEAD, OverheadModel, load_overhead
from lilou.latency.kernel_model.precision import (MATH_FAMILIES, PrecisionPath, check_precision, check_tf32,
                                                  kernel_unit, precision_path, precision_warnings)
from lilou.graph.precision import ModelPrecision, model_precision
from lilou.plan.calibration import CALIBRATION_FILE, Calibration
from lilou.plan.intervals import Intervals, compute_intervals, no_intervals
from lilou.plan.extrapolation import fused_attention, unmeasured_conv_forms, unmeasured_shapes

if TYPE_CHECKING:
    from lilou.fusion.partition import Partition
    from lilou.graph.dag import ModelGraph


@dataclass(frozen=True)
class PreparedModel:
    """A model read and grouped into kernels once, ready to be predicted on any device, any number of times.

    Made by :meth:`Predictor.prepare`; the service caches these. Its parts are shared between calls and
    threads and never modified by a prediction."""

    name: str                  # what predictions call the model (the path as given, or the graph's name)
    graph: ModelGraph
    kernels: GraphKernels
    warnings: tuple[str, ...]  # of reading the graph and grouping it into kernels
    backend: str               # the backend whose fusion grouped it; only a Predictor of that backend takes it
    batch: int | None = None   # the batch option it was read with (None: the file's own)
    partition: Partition | None = None  # the kernel groups (a plan reuses them at its other batch sizes)


#: What the API predicts: an ONNX path, a loaded graph or a prepared model (a string: lilou.graph.dag, which
#: needs onnx, is imported only when a graph is read, so that `lilou llm` starts without it).
ModelInput = "str | os.PathLike[str] | ModelGraph | PreparedModel"


@dataclass(frozen=True)
class KernelEstimate:
    """One predicted kernel: its ONNX nodes and its share of the end-to-end time."""

    nodes: tuple[str, ...]
    ops: tuple[str, ...]
    type: str             # kernel type from the kernel-type head, or "memory_fallback"
    latency_ms: float     # share of the end-to-end latency (kernels sum to the total)
    work_ms: float        # GPU time of the kernel alone, as the per-kernel model predicts it
    host_wait_ms: float   # part of latency_ms the GPU idles before it, waiting for the host to launch it
    flops: int
    bytes: int
    compute_bound: bool   # FLOPs / peak above bytes / bandwidth on this device
    fallback: bool        # no measurements for this kind of kernel: memory-bound fallback
    category: str         # gemm | conv | softmax | layernorm | elementwise | other (lilou.latency.composition.breakdown)
    interval_ms: tuple[float, float] = (0.0, 0.0)  # 90 % interval of latency_ms (lilou.plan.intervals)
    extrapolated: bool = False  # features outside the measured range for its GPU class and dtype (or fallback)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_bound else "memory"

    def to_json(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes), "type": self.type, "latency_ms": self.latency_ms,
                "interval_ms": list(self.interval_ms), "extrapolated": self.extrapolated,
                "flops": self.flops, "bytes": self.bytes}


@dataclass
class Prediction:
    """End-to-end latency of one model on one device, kernel by kernel (execution order)."""

    model: str
    gpu: str
    mig: str | None
    backend: str
    batch: int | None
    latency_ms: float
    kernels: list[KernelEstimate]
    warnings: list[str] = field(default_factory=list)
    precision: str = "fp32"   # what the model computes in (ONNX tensor types, or --precision)
    tf32: str = "off"         # off | conv | on: what FP32 convolutions / matmuls run in on this device
    interval_ms: tuple[float, float] = (0.0, 0.0)  # 90 % interval of latency_ms (docs/intervals.md)
    extrapolated_share: float = 0.0  # share (0..1) of the predicted time on extrapolated kernels
    fits: bool = True  # weights + largest activation within the device's (or slice's) memory

    @property
    def device(self) -> str:
        return self.gpu if self.mig is None else f"{self.gpu}/{self.mig}"

    @property
    def fallback_kernels(self) -> list[KernelEstimate]:
        return [k for k in self.kernels if k.fallback]

    @property
    def fallback_share(self) -> float:
        """Share (0..1) of the predicted time carried by fallback kernels."""
        return sum(k.latency_ms for k in self.fallback_kernels) / self.latency_ms if self.latency_ms else 0.0

    @property
    def host_wait_share(self) -> float:
        """Share (0..1) of the predicted time the GPU waits for kernel launches (1 - GPU busy share)."""
        return sum(k.host_wait_ms for k in self.kernels) / self.latency_ms if self.latency_ms else 0.0

    def category_shares(self) -> dict[str, float]:
        """Share (0..1) of the predicted time per kernel category, launch waits included; the categories
        `lilou eval` checks against NeuSight's per-node measurements."""
        shares = dict.fromkeys(CATEGORIES, 0.0)
        for k in self.kernels:
            shares[k.category] += k.latency_ms / self.latency_ms if self.latency_ms else 0.0
        return shares

    def top(self, n: int) -> list[KernelEstimate]:
        return sorted(self.kernels, key=lambda k: -k.latency_ms)[:n]

    def to_json(self) -> dict[str, Any]:
        """The ``lilou infer --format json`` object (DESIGN.md)."""
        return {"model": self.model, "gpu": self.gpu, "mig": self.mig, "backend": self.backend,
                "batch": self.batch, "precision": self.precision, "tf32": self.tf32, "latency_ms": self.latency_ms,
                "interval_ms": list(self.interval_ms), "extrapolated_share": self.extrapolated_share,
                "fits": self.fits, "kernels": [k.to_json() for k in self.kernels], "warnings": list(self.warnings)}


@dataclass(frozen=True)
class RankEntry:
    gpu: str
    mig: str | None
    latency_ms: float
    precision: str = "fp32"
    tf32: str = "off"
    interval_ms: tuple[float, float] = (0.0, 0.0)  # 90 % interval of latency_ms
    extrapolated_share: float = 0.0
    fits: bool = True  # weights + largest activation within the device's (or slice's) memory
    gpu_work_ms: float = 0.0  # the kernels' GPU time alone, without waits for launches: what a faster host leaves

    @property
    def device(self) -> str:
        return self.gpu if self.mig is None else f"{self.gpu}/{self.mig}"

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "mig": self.mig, "latency_ms": self.latency_ms,
                "interval_ms": list(self.interval_ms), "extrapolated_share": self.extrapolated_share,
                "fits": self.fits, "precision": self.precision, "tf32": self.tf32, "gpu_work_ms": self.gpu_work_ms}


@dataclass
class Ranking:
    """Devices fastest first; iterating gives :class:`RankEntry` objects."""

    model: str
    backend: str
    entries: list[RankEntry]
    warnings: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[RankEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, index: int) -> RankEntry:
        return self.entries[index]

    def to_json(self) -> list[dict[str, Any]]:
        """The ``lilou rank --format json`` list (DESIGN.md)."""
        return [entry.to_json() for entry in self.entries]


def rank_devices(names: Sequence[str] | None = None) -> list[Device]:
    """Devices to rank: every GPU and MIG slice, or the named ones.

    A name is a GPU (any alias: the whole GPU) or ``GPU/PROFILE`` for one MIG slice
    (``a100-80gb/1g.10gb``); repeats are dropped.
    """
    if names is None:
        from lilou.hardware import all_devices

        return all_devices()
    devices: dict[str, Device] = {}
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        gpu, _, profile = name.partition("/")
        device = resolve_device(gpu.strip(), profile.strip() or None) if profile else resolve_device(gpu)
        devices.setdefault(device.name, device)
    if not devices:
        raise LilouInputError("no GPU named; list GPUs like --gpus a10g,t4,a100-80gb/1g.10gb (see `lilou gpus`)")
    return list(devices.values())


class Predictor:
    """Loads the per-kernel and end-to-end checkpoints once; predicts any number of models."""

    def __init__(self, backend: str = "eager", kernel_checkpoint: str | os.PathLike[str] | None = None,
                 overhead_checkpoint: str | os.PathLike[str] | None = None, launch_gap_ms: float | None = None) -> None:
        """``launch_gap_ms``: the host's issue time per kernel, for a host measured with `lilou profile ops` (the
        median of its one-element calls); default: the checkpoint's, NeuSight's 2023 hosts (about 30 us)."""
        from lilou.fusion.backends import check_backend

        self.backend = check_backend(backend)
        gap = check_launch_gap(launch_gap_ms)
        kernel_model = KernelModel.load(kernel_checkpoint or checkpoint_path(KERNEL_LATENCY))
        params = load_overhead(overhead_checkpoint or checkpoint_path(E2E_OVERHEAD))
        # Without the tensor-core model (a checkpoint folder that lacks it), every kernel is priced at FP32
        # rates and the warnings say so.
        tensor_folder = checkpoint_path(KERNEL_LATENCY_TENSOR, required=False)
        has_tensor = tensor_folder.exists()
        self.coverage = MeasuredCoverage.load(tensor_folder) if has_tensor else None
        self.model = EndToEndModel(kernel_model, FallbackModel(**params["fallback"]), OverheadModel(**params["overhead"]),
                                   tensor_model=KernelModel.load(tensor_folder) if has_tensor else None)
        self.launch_gap_given = False
        if gap is not None:
            self._use_launch_gap(gap)
        self._interval_notes, self._tensor_interval_note = _calibration_notes(
            kernel_checkpoint or checkpoint_path(KERNEL_LATENCY), has_tensor)

    # ----------------------------------------------------------------- public

    def with_launch_gap(self, launch_gap_ms: float | None) -> Predictor:
        """This predictor with another host issue time per kernel (None: itself), sharing its loaded networks and
        fusion model: cheap enough for one per request (the service's ``launch_gap_us``)."""
        gap = check_launch_gap(launch_gap_ms)
        if gap is None:
            return self
        clone = copy.copy(self)
        clone.model = copy.copy(self.model)
        clone._use_launch_gap(gap)
        return clone

    def _use_launch_gap(self, gap_ms: float) -> None:
        """Compose with ``gap_ms`` per kernel (checked) instead of the checkpoint's gap; the fitted scale stays."""
        self.model.overhead = dataclasses.replace(self.model.overhead, gap_ms=gap_ms)
        self.launch_gap_given = True

    @contextlib.contextmanager
    def reusing_kernel_rows(self) -> Iterator[None]:
        """While active, the kernel networks run once per distinct feature row across predictions
        (:meth:`KernelModel.reusing_rows`): for callers that price the same kernels at several batch sizes."""
        with contextlib.ExitStack() as stack:
            for model in (self.model.kernel_model, self.model.tensor_model):
                if model is not None:
                    stack.enter_context(model.reusing_rows())
            yield

    def prepare(self, model: str | os.PathLike[str] | ModelGraph, batch: int | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None, like: PreparedModel | None = None) -> PreparedModel:
        """Read ``model`` (an ONNX path, or a loaded graph with ``batch`` and ``shapes`` None) and group it
        into kernels for this predictor's backend, once, for any number of predictions.

        ``like``: the same model prepared at another batch size; its kernel groups are reused when the graph has
        the same nodes (fusion follows op patterns, not sizes: docs/intervals.md, "Capacity plans")."""
        if isinstance(model, PreparedModel):
            raise LilouInputError(f"{model.name}: already prepared; pass it to predict or rank as it is")
        graph = self._graph(model, batch, shapes)
        reusable = like is not None and like.backend == self.backend and like.partition is not None \
            and like.graph.same_structure(graph)
        kernels, warnings, partition = self._kernels(graph, like.partition if reusable else None)
        return PreparedModel(name=_model_name(model), graph=graph, kernels=kernels, warnings=tuple(warnings),
                             backend=self.backend, batch=batch, partition=partition)

    def predict(self, model: ModelInput, gpu: str, mig: str | None = None, batch: int | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None, precision: str | None = None,
                tf32: str | None = None) -> Prediction:
        """End-to-end latency of ``model`` (an ONNX path, a loaded graph or a :class:`PreparedModel`) on one GPU
        or MIG slice.

        ``precision`` overrides what the ONNX tensor types say (fp32, tf32, fp16, bf16, fp8, int8);
        ``tf32`` (off, conv, on) overrides PyTorch's default for FP32 on the device (lilou.latency.kernel_model.precision)."""
        from lilou.hardware.database import ambiguity_note

        device = resolve_device(gpu, mig)  # bad names fail before the model is read
        prediction = self.predict_many(model, [device], batch, shapes, precision, tf32)[0]
        note = ambiguity_note(gpu)
        if note:
            prediction.warnings.insert(0, note)
        return prediction

    def predict_many(self, model: ModelInput, devices: Sequence[Device], batch: int | None = None,
                     shapes: Mapping[str, Sequence[int]] | None = None, precision: str | None = None,
                     tf32: str | None = None) -> list[Prediction]:
        """:meth:`predict` for several devices; the graph is read and grouped once."""
        precision, tf32 = check_precision(precision), check_tf32(tf32)
        prepared = self._prepared(model, batch, shapes)
        return self._predictions(prepared, list(devices), precision, tf32)

    def rank(self, model: ModelInput, gpus: Sequence[str] | None = None, batch: int | None = None,
             shapes: Mapping[str, Sequence[int]] | None = None, precision: str | None = None,
             tf32: str | None = None) -> Ranking:
        """Predicted latency on every GPU and MIG slice (or the ``gpus`` named), fastest first."""
        precision, tf32 = check_precision(precision), check_tf32(tf32)
        devices = rank_devices(gpus)
        prepared = self._prepared(model, batch, shapes)
        graph, kernels = prepared.graph, prepared.kernels
        reading = _GraphPrecision.of(graph, precision, tf32)
        work = self.model.kernel_work(kernels, devices, _leading_dim(graph), reading.path)
        shares = self.model.compose(work)
        totals = shares.sum(axis=0)
        gpu_work = self.model.overhead.gpu_ms(work.work_ms).sum(axis=0)
        paths = [reading.path(d) for d in devices]
        precision_notes = reading.notes(paths, devices, self.coverage)
        bounds = self._intervals(kernels, shares, devices, paths)
        need = memory_needed(graph)
        entries = [RankEntry(d.gpu, d.mig, round(float(t), 4), path.precision, path.tf32, _rounded(bounds.interval(j)),
                             round(float(bounds.extrapolated_share[j]), 4), fits_memory(need, d), round(float(gpu_work[j]), 4))
                   for j, (d, t, path) in enumerate(zip(devices, totals, paths))]
        # Devices the host's launches hold to one latency are told apart by their GPU work: the order a faster host
        # would see (alphabetical order before session 25).
        entries.sort(key=lambda e: (e.latency_ms, e.gpu_work_ms, e.gpu, e.mig or ""))
        return Ranking(model=prepared.name, backend=self.backend, entries=entries,
                       warnings=_ambiguity_notes(gpus) + list(prepared.warnings) + precision_notes
                       + _fallback_warning(kernels, shares) + _grouped_conv_warning(kernels, shares)
                       + _conv_form_warning(kernels, shares) + _transposed_conv_warning(kernels, shares, devices)
                       + _fused_attention_warning(kernels, shares)
                       + _power_note(self.model.kernel_model, devices)
                       + _launch_bound_note(entries, self.model.overhead.gap_ms, self.launch_gap_given)
                       + _memory_warning(graph, devices, need) + self._interval_warnings(bounds))

    # ---------------------------------------------------------------- helpers

    def _prepared(self, model: ModelInput, batch: int | None, shapes) -> PreparedModel:
        """``model`` prepared for this backend: as it is when it already is, checked."""
        if not isinstance(model, PreparedModel):
            return self.prepare(model, batch, shapes)
        if batch is not None or shapes:
            raise LilouInputError(f"{model.name}: batch and shapes apply when a model is prepared; pass them to "
                                  "Predictor.prepare instead")
        if model.backend != self.backend:
            raise LilouInputError(f"{model.name}: prepared for the {model.backend} backend, and this predictor "
                                  f"predicts {self.backend} kernels; prepare it with Predictor(backend="
                                  f"{self.backend!r})")
        return model

    def _graph(self, model: str | os.PathLike[str] | ModelGraph, batch: int | None, shapes) -> ModelGraph:
        from lilou.graph.dag import ModelGraph

        if isinstance(model, ModelGraph):
            if batch is not None or shapes:
                raise LilouInputError("batch and shapes apply when loading a file; pass them to load_graph instead")
            return model
        from lilou.graph.dag import load_graph
        from lilou.graph.guarded_inference import meanwhile

        with meanwhile(self._load_fusion_model):
            return load_graph(model, batch=batch, shapes=shapes)

    def _load_fusion_model(self) -> None:
        """What :meth:`_kernels` needs first (the fusion modules, networkx, the GNN's weights): loaded while ONNX
        shape inference runs in its child process, which a fresh process would otherwise wait for idle."""
        from lilou.fusion.predict import shipped_gnn

        shipped_gnn()

    def _kernels(self, graph: ModelGraph, partition: Partition | None = None
                 ) -> tuple[GraphKernels, list[str], Partition]:
        from lilou.fusion.predict import predict_partition

        if partition is None:
            partition = predict_partition(graph, self.backend)
        kernels = describe_kernels(graph, partition)
        if len(kernels) == 0:
            raise LilouInputError(f"{graph.name}: no node of the graph launches a GPU kernel, so there is no "
                                  "latency to predict (is the graph empty, or only constants and reshapes?)")
        warnings = [*graph.warnings, *partition.warnings]
        unsupported = graph.unsupported_ops
        if unsupported:
            warnings.append(f"unsupported op(s) {', '.join(unsupported)}: their kernels are predicted with the "
                            "memory-bound fallback")
        if self.backend != "eager":
            warnings.append(f"the per-kernel model and the launch overhead were fitted on PyTorch eager "
                            f"measurements; {self.backend} kernels are predicted with them as they are")
        return kernels, warnings, partition

    def _predictions(self, prepared: PreparedModel, devices: list[Device], precision: str | None = None,
                     tf32: str | None = None) -> list[Prediction]:
        graph, kernels, name, batch = prepared.graph, prepared.kernels, prepared.name, prepared.batch
        warnings = list(prepared.warnings)
        reading = _GraphPrecision.of(graph, precision, tf32)
        work = self.model.kernel_work(kernels, devices, _leading_dim(graph), reading.path)
        shares = self.model.compose(work)
        waits = np.maximum(shares - self.model.gpu_ms(work), 0.0)
        batch = batch if batch is not None else _leading_dim(graph)
        paths = [reading.path(d) for d in devices]
        bounds = self._intervals(kernels, shares, devices, paths)
        need = memory_needed(graph)  # once, not once per device
        return [Prediction(model=name, gpu=device.gpu, mig=device.mig, backend=self.backend, batch=batch,
                           latency_ms=round(float(shares[:, j].sum()), 4),
                           kernels=_estimates(kernels, work, shares, waits, j, bounds),
                           warnings=warnings + reading.notes([paths[j]], [device], self.coverage)
                           + _fallback_warning(kernels, shares[:, [j]]) + _grouped_conv_warning(kernels, shares[:, [j]])
                           + _conv_form_warning(kernels, shares[:, [j]])
                           + _transposed_conv_warning(kernels, shares[:, [j]], [device])
                           + _fused_attention_warning(kernels, shares[:, [j]])
                           + _power_note(self.model.kernel_model, [device]) + _memory_warning(graph, [device], need)
                           + self._interval_warnings(bounds),
                           precision=paths[j].precision, tf32=paths[j].tf32,
                           interval_ms=_rounded(bounds.interval(j)),
                           extrapolated_share=round(float(bounds.extrapolated_share[j]), 4),
                           fits=fits_memory(need, device))
                for j, device in enumerate(devices)]

    def _intervals(self, kernels: GraphKernels, shares: np.ndarray, devices: Sequence[Device],
                   paths: Sequence[PrecisionPath]) -> Intervals:
        """90 % intervals and extrapolation flags (lilou.plan.intervals) of every kernel on every device."""
        dtypes = [p.precision for p in paths]
        calibration = _calibration()
        if calibration is None:
            return no_intervals(shares, dtypes)
        return compute_intervals(kernels, shares, devices, dtypes, calibration,
                                 self.model.kernel_model.config.get("trained_on", []),
                                 unmeasured=_tf32_kernels(kernels, devices, paths)
                                 | _transposed_beyond_data(kernels, devices))

    def _interval_warnings(self, bounds: Intervals) -> list[str]:
        notes = list(self._interval_notes)
        if self._tensor_interval_note and any(dtype != "fp32" for dtype in bounds.dtypes):
            notes.append(self._tensor_interval_note)
        if bounds.uncalibrated:
            notes.append(f"no held-out measurements of {', '.join(bounds.uncalibrated)} kernels: their 90 % "
                         "interval is the widest of their family (docs/intervals.md)")
        return notes


def _tf32_kernels(kernels: GraphKernels, devices: Sequence[Device], paths: Sequence[PrecisionPath]) -> np.ndarray:
    """bool [distinct kernels, devices]: FP32 GEMMs and convolutions priced on the TF32 tensor cores, a unit no
    source of the kernel table measured (their intervals are those of extrapolated kernels)."""
    families = np.array([spec.family for spec in kernels.unique], dtype=object)
    out = np.zeros((len(families), len(devices)), dtype=bool)
    for j, (device, path) in enumerate(zip(devices, paths)):
        if path.tf32 != "off":
            tf32 = [f for f in MATH_FAMILIES if kernel_unit(f, path, device) == "tf32_tensor"]
            out[:, j] = np.isin(families, tf32) & ~kernels.unique_fallback
    return out


def _transposed_beyond_data(kernels: GraphKernels, devices: Sequence[Device]) -> np.ndarray:
    """bool [distinct kernels, devices]: transposed convolutions on an architecture where no source measured the
    backward-data kernel that prices them (:mod:`lilou.latency.kernel_model.transposed`)."""
    transposed = np.array([spec.transposed for spec in kernels.unique], dtype=bool) & ~kernels.unique_fallback
    measured = load_ratios().architectures
    beyond = np.array([architecture_class(d.gpu) not in measured for d in devices], dtype=bool)
    return transposed[:, None] & beyond[None, :]


@dataclass(frozen=True)
class _GraphPrecision:
    """What a graph computes in and the options that override it, read once per call (not per device)."""

    detected: ModelPrecision
    precision: str | None   # --precision
    tf32: str | None        # --tf32
    has_conv: bool
    has_matmul: bool

    @classmethod
    def of(cls, graph: ModelGraph, precision: str | None, tf32: str | None) -> _GraphPrecision:
        ops = {graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()}
        return cls(model_precision(graph), precision, tf32, has_conv=bool(ops & {"Conv", "ConvTranspose"}),
                   has_matmul=bool(ops & {"MatMul", "Gemm", "Einsum"}))

    def path(self, device: Device) -> PrecisionPath:
        return precision_path(self.detected.precision, device, self.precision, self.tf32)

    def notes(self, paths: list[PrecisionPath], devices: list[Device],
              coverage: MeasuredCoverage | None) -> list[str]:
        """The warnings for what the kernel models cannot stand behind on these paths (one per device)."""
        return precision_warnings(paths, has_conv=self.has_conv, has_matmul=self.has_matmul,
                                  mixed=self.precision is None and self.detected.mixed,
                                  file_precision=self.detected.precision, devices=devices, coverage=coverage)


def _estimates(kernels: GraphKernels, work: KernelWork, shares: np.ndarray, waits: np.ndarray,
               column: int, bounds: Intervals) -> list[KernelEstimate]:
    return [KernelEstimate(nodes=tuple(nodes), ops=spec.ops, type=str(work.kernel_type[i, column]),
                           latency_ms=round(float(shares[i, column]), 6), work_ms=float(work.work_ms[i, column]),
                           host_wait_ms=round(float(waits[i, column]), 6),
                           flops=int(spec.flops), bytes=int(spec.bytes),
                           compute_bound=bool(work.compute_bound[i, column]), fallback=bool(work.fallback[i]),
                           category=kernel_category(spec, bool(work.fallback[i])),
                           interval_ms=(round(float(bounds.kernel_lo[i, column]), 6),
                                        round(float(bounds.kernel_hi[i, column]), 6)),
                           extrapolated=bool(bounds.extrapolated[i, column]))
            for i, (nodes, spec) in enumerate(zip(kernels.nodes, kernels.specs))]


def _calibration() -> Calibration | None:
    """The shipped interval calibration, or None when its file is missing (intervals then collapse to the
    estimate, and a warning says so)."""
    from lilou.errors import MissingDataError

    try:
        return Calibration.load()
    except MissingDataError:
        return None


def _rounded(interval: tuple[float, float]) -> tuple[float, float]:
    return round(interval[0], 4), round(interval[1], 4)


def _calibration_notes(kernel_checkpoint: str | os.PathLike[str], has_tensor: bool) -> tuple[list[str], str | None]:
    """(warnings for every prediction, a warning for non-FP32 ones) when the interval calibration was made for
    other kernel models than the ones loaded."""
    from lilou.plan.calibration import checkpoint_fingerprint

    calibration = _calibration()
    if calibration is None:
        return [f"no interval calibration file ({CALIBRATION_FILE}): every interval is the estimate itself; "
                "regenerate it with `make calibrate`"], None
    notes = []
    if checkpoint_fingerprint(os.fspath(kernel_checkpoint)) != calibration.fingerprint:
        notes.append(f"the 90 % intervals were calibrated for another kernel model "
                     f"({calibration.data['kernel_model']['checkpoint']}, {calibration.fingerprint}); regenerate "
                     "them for this one with `make calibrate`")
    tensor = None
    shipped = calibration.data.get("tensor_model")
    if has_tensor and shipped is None:
        tensor = ("the 90 % intervals of non-FP32 kernels come from the FP32 model's held-out residuals, not the "
                  "tensor-core model's that priced them (docs/intervals.md)")
    elif has_tensor and checkpoint_fingerprint(os.fspath(checkpoint_path(KERNEL_LATENCY_TENSOR))) != shipped["fingerprint"]:
        tensor = ("the 90 % intervals of non-FP32 GEMMs and convolutions were calibrated for another tensor-core "
                  f"model ({shipped['fingerprint']}); regenerate them with `make calibrate`")
    return notes, tensor


def _fallback_warning(kernels: GraphKernels, shares: np.ndarray) -> list[str]:
    """Which kernels rest on the fallback and their share of the time (a range over devices for rank)."""
    mask = kernels.fallback
    if not mask.any():
        return []
    ops = list(dict.fromkeys(op for spec, m in zip(kernels.specs, mask) if m for op in fallback_ops(spec)))
    return [f"{int(mask.sum())} of {len(kernels)} kernels ({', '.join(ops)}) use the memory-bound fallback "
            f"(no measurements of these op kinds): {_share_text(mask, shares)} of the predicted time"]


def _share_text(mask: np.ndarray, shares: np.ndarray) -> str:
    """The share of the predicted time on the kernels of ``mask``: one figure, or its range over devices."""
    share = 100 * shares[mask].sum(axis=0) / shares.sum(axis=0)
    low, high = float(np.min(share)), float(np.max(share))
    return f"{low:.1f} %" if round(low, 1) == round(high, 1) else f"{low:.1f} to {high:.1f} % (by device)"


def _grouped_conv_warning(kernels: GraphKernels, shares: np.ndarray) -> list[str]:
    """Say so when grouped convolutions are priced by a convolution model: no source measured one
    (:func:`lilou.plan.extrapolation.unmeasured_shapes`). Depthwise ones are on the fallback and named there."""
    mask = unmeasured_shapes(KernelBatch.from_specs(kernels.unique))[kernels.index] & ~kernels.fallback
    if not mask.any():
        return []
    return [f"{int(mask.sum())} grouped convolutions: no source measured one, so they are priced by the convolution "
            f"model beyond its data (flagged extrapolated): {_share_text(mask, shares)} of the predicted time"]


def _conv_form_warning(kernels: GraphKernels, shares: np.ndarray) -> list[str]:
    """Say so when 3-D or dilated convolutions are priced: every measured convolution is 2-D without dilation."""
    mask = unmeasured_conv_forms(kernels.unique)[kernels.index] & ~kernels.fallback
    forms = np.array([spec.conv_form for spec in kernels.unique], dtype=object)[kernels.index]
    if not mask.any():
        return []
    counts = ", ".join(f"{int((forms[mask] == form).sum())} {form}" for form in sorted(set(forms[mask])))
    return [f"convolutions of a form no source measured ({counts}; every measured one is 2-D without dilation): "
            f"priced by the convolution model beyond its data (flagged extrapolated): {_share_text(mask, shares)} of "
            "the predicted time"]


def _transposed_conv_warning(kernels: GraphKernels, shares: np.ndarray, devices: Sequence[Device]) -> list[str]:
    """Say so when transposed convolutions run on an architecture where no backward-data kernel was measured."""
    beyond = _transposed_beyond_data(kernels, devices)
    if not beyond.any():
        return []
    mask = beyond.any(axis=1)[kernels.index]
    ratios = load_ratios()
    architectures = sorted({architecture_class(d.gpu) for d, b in zip(devices, beyond.any(axis=0)) if b})
    return [f"{int(mask.sum())} transposed convolutions (ConvTranspose): priced as the convolution whose input "
            f"gradient they compute, x{ratios.strided:.2f} when strided (the backward-data / forward ratio measured on "
            f"{', '.join(ratios.architectures)} GPUs); no source measured them on {', '.join(architectures)} (flagged "
            f"extrapolated): {_share_text(mask, shares)} of the predicted time"]


def _fused_attention_warning(kernels: GraphKernels, shares: np.ndarray) -> list[str]:
    """Say so when a fused attention kernel (F.scaled_dot_product_attention) is priced: nobody measured one in eager."""
    mask = fused_attention(kernels.unique)[kernels.index]
    if not mask.any():
        return []
    return [f"{int(mask.sum())} fused attention kernel(s) (F.scaled_dot_product_attention, or an ONNX Attention "
            "node: one kernel in eager): "
            "priced as a GEMM of Q.K^T carrying both products and the softmax, reading Q, K and V once; no eager "
            f"attention kernel was measured (flagged extrapolated): {_share_text(mask, shares)} of the predicted time"]


#: Ideal kernel times (ms at peak) at which the low-power note quotes the slowdown.
_NOTE_TIMES_MS = (0.1, 100.0)


#: A device is launch-bound when its GPU work is at most this share of its latency (it waits for the host the rest).
LAUNCH_BOUND_WORK_SHARE = 0.5


#: Largest host issue time per kernel accepted (ms): a Python loop per op on a slow host is under 0.2 ms.
MAX_LAUNCH_GAP_MS = 1.0


def check_launch_gap(gap_ms: float | None) -> float | None:
    """A given launch gap, checked: 0 (CUDA-graph replay: no launches between kernels) up to 1 ms."""
    if gap_ms is None:
        return None
    if not (isinstance(gap_ms, int | float) and math.isfinite(gap_ms) and 0 <= gap_ms <= MAX_LAUNCH_GAP_MS):
        raise LilouInputError(f"launch gap {gap_ms!r} ms: give 0 to {MAX_LAUNCH_GAP_MS:g} ms (0 to 1000 us) per kernel")
    return float(gap_ms)


def _launch_bound_note(entries: Sequence[RankEntry], gap_ms: float, given: bool = False) -> list[str]:
    """Say so when two or more ranked devices are launch-bound: the host's kernel launches, not the GPU, set their
    latency, so they tie (to within 1 %) and are ordered by GPU work alone. The launch gap is NeuSight's 2023 hosts'
    (docs/end_to_end.md) unless the caller gave its own; a faster host shortens it, and then the GPU work decides."""
    bound = [e for e in entries if e.latency_ms > 0 and e.gpu_work_ms <= LAUNCH_BOUND_WORK_SHARE * e.latency_ms]
    if len(bound) < 2 or max(e.latency_ms for e in bound) > 1.01 * min(e.latency_ms for e in bound):
        return []
    names = ", ".join(e.device for e in bound[:4]) + (f" and {len(bound) - 4} more" if len(bound) > 4 else "")
    origin = "as given" if given else "measured on NeuSight's 2023 hosts"
    return [f"{len(bound)} devices are launch-bound ({names}): the host's kernel launches ({1000 * gap_ms:.0f} us "
            f"each, {origin}) set their predicted latency, not the GPU, so they tie and are "
            f"ordered by GPU work (the kernels' time alone, {min(e.gpu_work_ms for e in bound):.3f}-"
            f"{max(e.gpu_work_ms for e in bound):.3f} ms), the order a faster host would see"]


def _power_note(kernel_model: KernelModel, devices: Sequence[Device]) -> list[str]:
    """Say so when low-power boards compute below their peak in the model (lilou.latency.kernel_model.model)."""
    short, long = (float(e) for e in kernel_model.low_power_exponent(np.array(_NOTE_TIMES_MS)))
    slowed: dict[str, tuple[float, float, float]] = {}  # board -> (power W, factor for short, for long kernels)
    for device in devices:
        low, high = float(power_factor(device.board_power_w, short)), float(power_factor(device.board_power_w, long))
        if high > 1.0:
            slowed[device.gpu] = (device.board_power_w, low, high)
    span = (f"{_NOTE_TIMES_MS[0]:g} ms", f"{_NOTE_TIMES_MS[1]:g} ms")
    if len(slowed) == 1:
        (gpu, (power, low, high)), = slowed.items()
        return [f"{gpu} is a {power:g} W board: compute-bound kernels are predicted {low:.2f}x (kernels of "
                f"{span[0]} at peak) to {high:.2f}x ({span[1]}) slower than its spec-sheet peak, for its power "
                "limit (learned from the P4 and T4 kernel rows; docs/kernel_model.md)"]
    if slowed:
        boards = ", ".join(f"{gpu} ({power:g} W) {low:.2f}-{high:.2f}x" for gpu, (power, low, high) in slowed.items())
        return [f"compute-bound kernels are predicted slower than spec-sheet peak on low-power boards, for their "
                f"power limit (kernels of {span[0]} to {span[1]} at peak): {boards} (docs/kernel_model.md)"]
    return []


def _ambiguity_notes(names: Sequence[str] | None) -> list[str]:
    from lilou.hardware.database import ambiguity_note

    notes = []
    for raw in names or ():
        gpu = raw.partition("/")[0].strip()
        note = ambiguity_note(gpu) if gpu else None
        if note and note not in notes:
            notes.append(note)
    return notes


def memory_needed(graph: ModelGraph) -> tuple[int, int]:
    """(bytes of the weights as declared, bytes of the largest activation tensor); nothing is read."""
    data = graph.dag.nodes
    produced = {t.name: t for n in data for t in data[n]["outputs"]}
    inputs = {t.name: t for t in graph.inputs}
    weights: dict[str, int] = {}
    for n in data:
        for t in data[n]["inputs"]:
            if t is not None and t.name not in produced and t.name not in inputs:
                weights[t.name] = t.nbytes or 0
    constant = {t.name for n in data if data[n]["constant"] for t in data[n]["outputs"]}
    activations = [t.nbytes or 0 for name, t in {**inputs, **produced}.items() if name not in constant]
    return sum(weights.values()), max(activations, default=0)


def fits_memory(need: tuple[int, int], device: Device) -> bool:
    """Whether the weights and the largest activation (:func:`memory_needed`) fit the device's memory."""
    return sum(need) <= device.memory_gb * 2**30


def _memory_warning(graph: ModelGraph, devices: Sequence[Device], need: tuple[int, int] | None = None) -> list[str]:
    """Say so when the weights and the largest activation cannot fit the device's memory (``need``: what
    :func:`memory_needed` returns, when already computed)."""
    weights, activation = need or memory_needed(graph)
    short = [d for d in devices if not fits_memory((weights, activation), d)]
    if not short:
        return []
    gib = 2**30
    where = short[0].name if len(short) == 1 else f"{len(short)} of {len(devices)} devices ({short[0].name}, ...)"
    return [f"the model does not fit in memory on {where}: weights {weights / gib:,.2f} GiB + largest activation "
            f"{activation / gib:,.2f} GiB > {short[0].memory_gb:g} GB; the prediction assumes it would run"]


def _leading_dim(graph: ModelGraph) -> int | None:
    for tensor in graph.inputs:
        if tensor.shape:
            return int(tensor.shape[0])
    return None


def _model_name(model: str | os.PathLike[str] | ModelGraph) -> str:
    from lilou.graph.dag import ModelGraph

    return model.name if isinstance(model, ModelGraph) else os.fspath(model)


__all__ = ["KernelEstimate", "Prediction", "Predictor", "PreparedModel", "RankEntry", "Ranking", "rank_devices"]
