"""What the Python API returns: one currency from :class:`lilou.api.Predictor` to the CLI, the service and plans.

A :class:`PreparedModel` is a graph read and grouped into kernels once; a :class:`Prediction` is one model on one
device, kernel by kernel; a :class:`Ranking` is one model on many devices. Each ``to_json`` is exactly what the
matching ``--format json`` prints (DESIGN.md).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lilou.latency.composition.breakdown import CATEGORIES

# At run time, not under TYPE_CHECKING: typing.get_type_hints resolves the public dataclasses' fields.
from lilou.fusion.partition import Partition
from lilou.graph.dag import ModelGraph
from lilou.latency.composition.end_to_end import GraphKernels


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

    def __post_init__(self) -> None:  # each warning once, first-seen order (1,033 of 20 for 14 nested Ifs)
        object.__setattr__(self, "warnings", tuple(dict.fromkeys(self.warnings)))


#: What the API predicts: an ONNX path, its bytes (or an onnx.ModelProto: lilou.graph.in_memory), a file being read
#: (lilou.graph.reading), a loaded graph or a prepared model (a string: lilou.graph.dag, which needs onnx, is imported
#: only when a graph is read, so that `lilou llm` starts without it).
ModelInput = "str | os.PathLike[str] | bytes | GraphReading | ModelGraph | PreparedModel"


@dataclass(frozen=True)
class KernelEstimate:
    """One predicted kernel: its ONNX nodes and its share of the end-to-end time."""

    nodes: tuple[str, ...]
    ops: tuple[str, ...]
    type: str             # kernel type from the kernel-type head, or "memory_fallback"
    latency_ms: float     # share of the end-to-end latency (kernels sum to the total)
    work_ms: float        # GPU time of the kernel in the running model: latency_ms = host_wait_ms + work_ms (the
    #                       kernel model's alone_ms times the end-to-end scale, docs/end_to_end.md; rank's gpu_work_ms
    #                       is their sum). Before session 42 it was alone_ms.
    host_wait_ms: float   # part of latency_ms the GPU idles before it, waiting for the host to launch it
    flops: int
    bytes: int
    compute_bound: bool   # FLOPs / peak above bytes / bandwidth on this device
    fallback: bool        # no measurements for this kind of kernel: memory-bound fallback
    category: str         # gemm | conv | softmax | layernorm | elementwise | other (lilou.latency.composition.breakdown)
    interval_ms: tuple[float, float] = (0.0, 0.0)  # 90 % interval of latency_ms (lilou.plan.intervals)
    extrapolated: bool = False  # features outside the measured range for its GPU class and dtype (or fallback)
    alone_ms: float = 0.0  # the per-kernel model's time for the kernel timed alone (as the kernel rows were
    #                        measured), before the end-to-end scale; the CSV's work_ms column
    # the part of its nodes' eager aten call it runs where the call launches more than one kernel ("bias add",
    # "group norm moments" ...: lilou.latency.composition.eager_calls); "" for a group's own kernel
    role: str = ""

    @property
    def bound(self) -> str:
        return "compute" if self.compute_bound else "memory"

    def to_json(self) -> dict[str, Any]:
        """One item of ``kernels`` in the ``lilou infer --format json`` object (DESIGN.md)."""
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
    fits: bool = True  # weights + the activations live at the peak within the device's (or slice's) memory
    # what runs the precision on this device: native | weight_only | emulated | no_runtime (lilou.latency.kernel_model.
    # precision.PRECISION_PATHS), and why where not native (no_runtime: the latency is a lower bound)
    precision_path: str = "native"
    precision_note: str = ""

    def __post_init__(self) -> None:  # each warning once, first-seen order
        self.warnings = list(dict.fromkeys(self.warnings))

    @property
    def device(self) -> str:
        return self.gpu if self.mig is None else f"{self.gpu}/{self.mig}"

    @property
    def fallback_kernels(self) -> list[KernelEstimate]:
        return [k for k in self.kernels if k.fallback]

    @property
    def _kernel_total(self) -> float:
        """The kernels' own sum: the shares' denominator (``latency_ms`` is rounded to 4 decimals, the kernels to 6,
        and one kernel of 0.032024 ms read as 100.1 % of 0.032)."""
        return sum(k.latency_ms for k in self.kernels)

    @property
    def fallback_share(self) -> float:
        """Share (0..1) of the predicted time carried by fallback kernels."""
        total = self._kernel_total
        return sum(k.latency_ms for k in self.fallback_kernels) / total if total else 0.0

    @property
    def host_wait_share(self) -> float:
        """Share (0..1) of the predicted time the GPU waits for kernel launches (1 - GPU busy share)."""
        total = self._kernel_total
        return sum(k.host_wait_ms for k in self.kernels) / total if total else 0.0

    def category_shares(self) -> dict[str, float]:
        """Share (0..1) of the predicted time per kernel category, launch waits included; the categories
        `lilou eval` checks against NeuSight's per-node measurements."""
        shares = dict.fromkeys(CATEGORIES, 0.0)
        total = self._kernel_total
        for k in self.kernels:
            shares[k.category] += k.latency_ms / total if total else 0.0
        return shares

    def top(self, n: int) -> list[KernelEstimate]:
        """The ``n`` kernels with the largest share of the end-to-end time, largest first."""
        return sorted(self.kernels, key=lambda k: -k.latency_ms)[:n]

    def to_json(self) -> dict[str, Any]:
        """The ``lilou infer --format json`` object (DESIGN.md)."""
        return {"model": self.model, "gpu": self.gpu, "mig": self.mig, "backend": self.backend,
                "batch": self.batch, "precision": self.precision, "precision_path": self.precision_path,
                "precision_note": self.precision_note, "tf32": self.tf32, "latency_ms": self.latency_ms,
                "interval_ms": list(self.interval_ms), "extrapolated_share": self.extrapolated_share,
                "fits": self.fits, "kernels": [k.to_json() for k in self.kernels], "warnings": list(self.warnings)}


@dataclass(frozen=True)
class RankEntry:
    """One device of a :class:`Ranking`: its predicted end-to-end latency (ms) and whether the model fits."""

    gpu: str
    mig: str | None
    latency_ms: float
    precision: str = "fp32"
    tf32: str = "off"
    interval_ms: tuple[float, float] = (0.0, 0.0)  # 90 % interval of latency_ms
    extrapolated_share: float = 0.0
    fits: bool = True  # weights + the activations live at the peak within the device's (or slice's) memory
    gpu_work_ms: float = 0.0  # the kernels' GPU time alone, without waits for launches: what a faster host leaves
    memory_gb: float = 0.0  # weights + activations at their peak in GiB, as stored on this device (weight-only FP8 ...)
    backend: str = "eager"  # the runtime whose kernels were predicted (a saved ranking says which)
    precision_path: str = "native"  # as Prediction's: native | weight_only | emulated | no_runtime
    precision_note: str = ""        # why, where not native
    # the precision warnings `infer` gives on this device (its path, units, coverage): the ranking's pooled warnings
    # are not in rank's JSON list, so each entry carries its own
    precision_warnings: tuple[str, ...] = ()

    @property
    def device(self) -> str:
        return self.gpu if self.mig is None else f"{self.gpu}/{self.mig}"

    def to_json(self) -> dict[str, Any]:
        """One item of the ``lilou rank --format json`` list (DESIGN.md)."""
        return {"gpu": self.gpu, "mig": self.mig, "latency_ms": self.latency_ms,
                "interval_ms": list(self.interval_ms), "extrapolated_share": self.extrapolated_share,
                "fits": self.fits, "memory_gb": self.memory_gb, "precision": self.precision,
                "precision_path": self.precision_path, "precision_note": self.precision_note,
                "precision_warnings": list(self.precision_warnings), "tf32": self.tf32,
                "gpu_work_ms": self.gpu_work_ms, "backend": self.backend}


@dataclass
class Ranking:
    """Devices fastest first; iterating gives :class:`RankEntry` objects."""

    model: str
    backend: str
    entries: list[RankEntry]
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:  # each warning once, first-seen order
        self.warnings = list(dict.fromkeys(self.warnings))

    def __iter__(self) -> Iterator[RankEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, index: int) -> RankEntry:
        return self.entries[index]

    def to_json(self) -> list[dict[str, Any]]:
        """The ``lilou rank --format json`` list (DESIGN.md): the entries alone. Its warnings are not in it (that
        command prints them on stderr, the service in its ``Lilou-Warnings`` header); :meth:`to_json_object` is the
        ranking with them, for a caller that sends one document."""
        return [entry.to_json() for entry in self.entries]

    def to_json_object(self) -> dict[str, Any]:
        """The whole ranking as one JSON object, warnings included as in every other result's ``to_json``:
        ``{"model", "backend", "entries": to_json(), "warnings"}``."""
        return {"model": self.model, "backend": self.backend, "entries": self.to_json(),
                "warnings": list(self.warnings)}


__all__ = ["KernelEstimate", "ModelInput", "Prediction", "PreparedModel", "RankEntry", "Ranking"]
