"""End-to-end latency: kernel groups -> per-kernel GPU work -> sum with launch overhead.

The pipeline for one graph and any number of devices:

1. :func:`describe_kernels` describes every launching group of a partition once
   (:class:`~lilou.latency.kernel_model.kernel.KernelSpec`), marks the groups the per-kernel model
   has no data for (:mod:`lilou.latency.composition.fallback`) and deduplicates identical kernels
   (a transformer repeats the same few dozen kernels per layer).
2. :meth:`EndToEndModel.kernel_work` predicts the GPU work of every unique kernel
   on every device in **one** batched call (the fallback's work for the others),
   monotonic in problem size and across MIG slices by construction
   (:mod:`lilou.latency.composition.monotone`).
3. :meth:`EndToEndModel.compose` turns work into each kernel's share of the
   end-to-end time with the launch/gap model fitted on real end-to-end labels
   (:mod:`lilou.latency.composition.overhead`); the total is the sum over kernels.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from lilou.graph.batch_axis import graph_unbatched_inputs
from lilou.graph.costs import CostInput, input_reads
from lilou.hardware import Device
from lilou.latency.composition.eager_calls import HOST_WAIT_ROLES, eager_launches
from lilou.latency.composition.fallback import FALLBACK_TYPE, FallbackModel, uses_fallback
from lilou.latency.kernel_model.features import UNITS, DeviceColumns, KernelBatch, roofline_ms
from lilou.latency.kernel_model.inference import KernelModel
from lilou.latency.kernel_model.kernel import FAMILIES, KernelSpec, describe_graph_kernel
from lilou.latency.kernel_model.kernel_floor import kernel_floor_ms
from lilou.latency.composition.monotone import dominating_devices, ladder_levels, mig_envelope, size_ladder
from lilou.latency.composition.overhead import OverheadModel
from lilou.latency.kernel_model.precision import PrecisionPath, fp64_peak_tflops, kernel_path, kernel_unit
from lilou.latency.kernel_model.recurrent import RecurrentModel, RecurrentShape
from lilou.latency.kernel_model.transposed import load_ratios

if TYPE_CHECKING:  # onnx and networkx are imported only when a graph is read
    from lilou.fusion.partition import Partition
    from lilou.graph.dag import ModelGraph


@dataclass(frozen=True)
class GraphKernels:
    """The launching kernels of one graph, in execution order, described once."""

    nodes: list[tuple[str, ...]]  # ONNX node names per kernel
    specs: list[KernelSpec]
    unique: list[KernelSpec]      # distinct kernels
    unique_fallback: np.ndarray   # bool per distinct kernel: the memory-bound fallback applies
    unique_fixed_bytes: np.ndarray  # per distinct kernel: bytes read from weights/constants (batch-invariant)
    index: np.ndarray             # kernel -> position in ``unique``

    def __len__(self) -> int:
        return len(self.specs)

    @property
    def fallback(self) -> np.ndarray:
        """bool per kernel: the memory-bound fallback applies."""
        return self.unique_fallback[self.index]

    @property
    def host_waits(self) -> np.ndarray:
        """bool per kernel: the host waits for the GPU after it (a synchronising copy, ``torch.nonzero``'s count)."""
        return np.fromiter((spec.role in HOST_WAIT_ROLES for spec in self.specs), dtype=bool, count=len(self.specs))

    @property
    def launches(self) -> np.ndarray:
        """float per kernel: its back-to-back launches (a Loop or Scan eager launches per iteration; 1 for the others)."""
        return np.fromiter((spec.launches for spec in self.specs), dtype=np.float64, count=len(self.specs))


def describe_kernels(graph: ModelGraph, partition: Partition) -> GraphKernels:
    """Describe the partition's launching kernels; kernels with ops lacking a cost formula or
    outputs of unknown shape (incomplete features) are sent to the fallback. For the eager backend a group whose
    aten call launches more than one kernel (a biased cuDNN convolution, a group norm) is described as each of them,
    in launch order, all listing the group's nodes (:mod:`lilou.latency.composition.eager_calls`)."""
    unsupported = frozenset(graph.unsupported_ops)
    dag = graph.dag
    activations = {t.name for t in graph.inputs} - graph_unbatched_inputs(graph)  # of a fixed size: read once
    activations.update(t.name for n in graph.runtime_nodes() for t in dag.nodes[n]["outputs"])
    nodes, specs, keys = [], [], []
    for group in (group.nodes for group in partition.kernels):
        spec, incomplete = describe_graph_kernel(graph, group), _incomplete(graph, group)
        launches = [(spec, _fixed_bytes(graph, group, activations))]
        if partition.backend == "eager":  # a biased cuDNN convolution, a group norm: more than one launch
            launches = eager_launches(graph, group, *launches[0])
        for launch, fixed in launches:
            nodes.append(group)
            specs.append(launch)
            keys.append((launch, incomplete, fixed))
    position: dict[tuple[KernelSpec, bool, int], int] = {}
    index = np.fromiter((position.setdefault(key, len(position)) for key in keys), dtype=np.int64, count=len(keys))
    unique = [spec for spec, _, _ in position]
    fallback = np.fromiter((bad or uses_fallback(spec, unsupported) for spec, bad, _ in position),
                           dtype=bool, count=len(unique))
    fixed = np.fromiter((fixed for _, _, fixed in position), dtype=np.float64, count=len(unique))
    return GraphKernels(nodes=nodes, specs=specs, unique=unique, unique_fallback=fallback,
                        unique_fixed_bytes=fixed, index=index)


def _incomplete(graph: ModelGraph, group: Sequence[str]) -> bool:
    """An output of unknown shape: the kernel's FLOPs and bytes are incomplete."""
    return any(t.shape is None for n in group for t in graph.dag.nodes[n]["outputs"])


def _fixed_bytes(graph: ModelGraph, group: Sequence[str], activations: set[str]) -> int:
    """Bytes the kernel reads from weights and constants: they do not grow with the batch."""
    dag = graph.dag
    produced = {t.name for n in group for t in dag.nodes[n]["outputs"]}
    reads: dict[str, int] = {}
    for name in group:
        data = dag.nodes[name]
        node = CostInput(op=data["op"], attributes=data["attributes"], inputs=data["inputs"], outputs=data["outputs"])
        for tensor, nbytes in input_reads(node):
            if tensor.name not in produced and tensor.name not in activations:
                reads[tensor.name] = max(reads.get(tensor.name, 0), nbytes)
    return sum(reads.values())


@dataclass(frozen=True)
class KernelWork:
    """Per kernel (rows) and device (columns)."""

    work_ms: np.ndarray        # GPU time of the kernel alone, monotonic in size and MIG slice
    kernel_type: np.ndarray    # str
    compute_bound: np.ndarray  # bool
    fallback: np.ndarray       # bool per kernel (rows)
    host_waits: np.ndarray | None = None  # bool per kernel (rows): the host waits for the GPU after it
    launches: np.ndarray | None = None  # per kernel (rows): back-to-back launches of equal parts of its work

    def first(self, count: int) -> KernelWork:
        """The work on the first ``count`` devices."""
        return KernelWork(work_ms=self.work_ms[:, :count], kernel_type=self.kernel_type[:, :count],
                          compute_bound=self.compute_bound[:, :count], fallback=self.fallback,
                          host_waits=self.host_waits, launches=self.launches)


class EndToEndModel:
    """Per-kernel model + fallback + launch/gap overhead: the whole latency side of Lilou."""

    def __init__(self, kernel_model: KernelModel, fallback: FallbackModel, overhead: OverheadModel,
                 tensor_model: KernelModel | None = None) -> None:
        """``tensor_model``: a model that learned the compute units of the kernel table; it prices the GEMMs and
        convolutions whose unit is not the FP32 CUDA cores (BF16 tensor cores ...) and every FP32 convolution
        (:attr:`prices_fp32_convolutions`), ``kernel_model`` the rest."""
        if tensor_model is not None and not tensor_model.uses_units:
            raise ValueError("the tensor-core kernel model must have the 'precision' feature group")
        self.kernel_model = kernel_model
        self.tensor_model = tensor_model
        self.fallback = fallback
        self.overhead = overhead

    @property
    def prices_fp32_convolutions(self) -> bool:
        """Whether the tensor-core model prices the convolutions that run on FP32 CUDA cores too.

        It trained on every measured convolution geometry (DeepBench's 1x1, strided, 5x5 and 7x7 ones beside
        NeuSight's 3x3 stride-1 ones, with the Winograd roofline); the NeuSight-only model saw 3x3 stride-1
        convolutions alone and priced a 1x1 one at their rate per FLOP, where DeepBench measured 1x1 ones 1.7-4.4x
        slower per FLOP than 3x3 ones (cuDNN runs many of those as Winograd; docs/kernel_model.md)."""
        return self.tensor_model is not None and not self.kernel_model.uses_units

    def kernel_work(self, kernels: GraphKernels, devices: Sequence[Device], batch: int | None = None,
                    path_for: Callable[[Device], PrecisionPath] | None = None, floored: bool = True) -> KernelWork:
        """Work of every kernel on every device, one batched prediction for all of them.

        ``batch``: the graph's batch size when known; it sets the size ladder
        (:func:`lilou.latency.composition.monotone.ladder_levels`). ``path_for``: each device's precision path; a
        kernel model that learned the units of the kernel table (its features include ``precision``)
        then prices GEMMs and convolutions at the peak of their unit (BF16 tensor cores ...). ``floored``: no kernel
        below its family's measured floor (:mod:`lilou.latency.kernel_model.kernel_floor`); ``lilou llm``'s steps go
        without, their serving constants fitted on measured steps.
        """
        wanted = list(devices)
        every = {d.name: d for d in wanted}
        dominators = {d.name: dominating_devices(d) for d in wanted}
        for others in dominators.values():
            for other in others:
                every.setdefault(other.name, other)
        expanded = list(every.values())
        work, types, bound = self._unique_work(kernels, expanded, ladder_levels(batch), path_for)
        if floored:  # once per launch (a Loop launches per iteration)
            launches = np.array([spec.launches for spec in kernels.unique], dtype=np.float64)
            work = np.maximum(work, (kernel_floor_ms(kernels.unique) * launches)[:, None])
        work = mig_envelope(work, expanded, wanted, dominators)
        column = {d.name: j for j, d in enumerate(expanded)}
        keep = [column[d.name] for d in wanted]
        rows = kernels.index
        return KernelWork(work_ms=work[rows], kernel_type=types[:, keep][rows],
                          compute_bound=bound[:, keep][rows], fallback=kernels.fallback.copy(),
                          host_waits=kernels.host_waits, launches=kernels.launches)

    def _strict_work(self, kernels: KernelBatch, columns: DeviceColumns) -> np.ndarray:
        """GPU work of each row at the FP32 CUDA-core rates of ``columns``: convolutions by the tensor-core model
        when it prices them (:attr:`prices_fp32_convolutions`), everything else by the FP32 model; each model
        runs on its own rows only."""
        if not self.prices_fp32_convolutions:
            return self.kernel_model.predict_work(kernels, columns)[0]
        work = np.empty(len(kernels))
        convs = kernels.family == FAMILIES.index("conv")
        for model, rows in ((self.tensor_model, np.flatnonzero(convs)), (self.kernel_model, np.flatnonzero(~convs))):
            if len(rows):
                work[rows] = model.predict_work(kernels.take(rows), columns.take(rows))[0]
        return work

    def _unique_work(self, kernels: GraphKernels, devices: list[Device], levels: tuple[tuple[float, ...], ...],
                     path_for: Callable[[Device], PrecisionPath] | None = None):
        """(work, kernel type, compute-bound) arrays [distinct kernels, devices]; a model-priced kernel's work is
        the largest over ``levels`` of the smallest price on its ladder (:func:`ladder_levels`)."""
        specs, fallback = kernels.unique, kernels.unique_fallback
        n, d = len(specs), len(devices)
        if n == 0:
            return np.zeros((0, d)), np.zeros((0, d), dtype=object), np.zeros((0, d), dtype=bool)
        base = KernelBatch.from_specs(specs)
        device_columns = vars(DeviceColumns.from_devices(devices))
        pairs = base.take(np.tile(np.arange(n), d))  # device-major: row = device * n + kernel
        columns = DeviceColumns(**{k: np.repeat(v, n) for k, v in device_columns.items()})
        compute, memory = roofline_ms(pairs, columns)
        work = self.fallback.work_ms(pairs, columns).reshape(d, n).T
        types = np.full((n, d), FALLBACK_TYPE, dtype=object)
        recurrent = np.array([spec.recurrent is not None for spec in specs], dtype=bool)
        for i in np.flatnonzero(recurrent & ~fallback):
            work[i] = _recurrent_work(specs[i], devices, path_for)
            types[i] = RECURRENT_TYPE
        model_rows = np.flatnonzero(~fallback & ~recurrent)
        if len(model_rows):
            factors = tuple(dict.fromkeys(factor for level in levels for factor in level))  # 1 first
            rung_of = {factor: rung for rung, factor in enumerate(factors)}
            m, rungs = len(model_rows), len(factors)
            ladder = size_ladder(base.take(model_rows), kernels.unique_fixed_bytes[model_rows], factors)
            ladder_pairs = ladder.take(np.tile(np.arange(rungs * m), d))  # device, rung, kernel
            ladder_columns = DeviceColumns(**{k: np.repeat(v, rungs * m) for k, v in device_columns.items()})
            on_unit = np.zeros(len(ladder_pairs), dtype=bool)
            if path_for is not None and (self.kernel_model.uses_units or self.tensor_model is not None):
                unit_columns, on_unit = _with_units(ladder_columns, [(specs[i].family, specs[i].precision)
                                                                     for i in model_rows], devices, path_for, rungs)
                if self.kernel_model.uses_units:
                    ladder_columns, on_unit = unit_columns, np.zeros_like(on_unit)
            flat_work = np.full(len(ladder_pairs), np.inf)  # a rung never priced cannot be the minimum
            tensor_priced = np.zeros(len(ladder_pairs), dtype=bool)
            ladder_rows = _LadderRows(ladder_pairs, ladder_columns, unit_columns if on_unit.any() else None, on_unit)
            first = (np.arange(d)[:, None] * rungs * m + np.arange(m)[None, :]).reshape(-1)  # rung 0
            heads = np.zeros(rungs, dtype=bool)  # each level's own batch: always priced
            heads[[rung_of[level[0]] for level in levels]] = True
            priced = np.flatnonzero(np.broadcast_to(heads[None, :, None], (d, rungs, m)))
            self._price_rows(ladder_rows, priced, flat_work, tensor_priced)
            if rungs > len(levels):  # only a rung whose lower bound is under some level's own price can lower it
                best = flat_work.reshape(d, rungs, m)[:, heads, :].max(axis=1, keepdims=True)
                bound = ladder_rows.lower_bound_ms().reshape(d, rungs, m)
                hopeful = (bound * LADDER_BOUND_MARGIN < best) & ~heads[None, :, None]
                self._price_rows(ladder_rows, np.flatnonzero(hopeful), flat_work, tensor_priced)
            by_rung = flat_work.reshape(d, rungs, m)
            level_work = [by_rung[:, [rung_of[factor] for factor in level], :].min(axis=1) for level in levels]
            work[model_rows] = np.max(level_work, axis=0).T
            work[model_rows] *= _dgrad_factors([specs[i] for i in model_rows])[:, None]
            # The kernel type is that of the kernel itself (rung 0), not of its size ladder.
            kernel_types = self.kernel_model.predict_types(ladder_pairs.take(first), ladder_columns.take(first))
            # The type head learned NeuSight's FP32 kernel names: a kernel priced on another unit is named by it.
            renamed = np.flatnonzero(tensor_priced[first])
            if len(renamed):
                families = np.array([specs[i].family + "_" for i in model_rows], dtype=object)
                kernel_types[renamed] = (families[renamed % m]
                                         + np.asarray(UNITS, dtype=object)[unit_columns.unit[first[renamed]]])
            types[model_rows] = kernel_types.reshape(d, m).T
        work = np.maximum(work, fp64_floor_ms(specs, devices))
        return work, types, (compute >= memory).reshape(d, n).T

    def _price_rows(self, ladder: _LadderRows, rows: np.ndarray, flat_work: np.ndarray,
                    tensor_priced: np.ndarray) -> None:
        """Price ``rows`` of the ladder into ``flat_work``; mark in ``tensor_priced`` those a unit other than the
        FP32 CUDA cores prices (a TF32 row takes the lower of its TF32 and strict-FP32 prices)."""
        if not len(rows):
            return
        on_unit = ladder.on_unit[rows]
        strict = ~on_unit
        if on_unit.any():
            unit_rows = rows[on_unit]
            tensor_work = self.tensor_model.predict_work(ladder.pairs.take(unit_rows),
                                                         ladder.unit_columns.take(unit_rows))[0]
            # TF32 only adds kernels for cuDNN/cuBLAS to choose from: never priced above strict FP32 (the two
            # models disagree by a µs or two on tiny kernels). The strict price is needed only where it could be
            # the lower one: a kernel model never prices below its roofline (:func:`strict_floor_ms`).
            tf32 = ladder.unit_columns.unit[unit_rows] == UNITS.index("tf32_tensor")
            capped = unit_rows[tf32]
            strict[np.flatnonzero(on_unit)[tf32]] = tensor_work[tf32] > STRICT_BOUND_MARGIN * strict_floor_ms(
                ladder.pairs.take(capped), ladder.columns.take(capped))
        needed = rows[strict]
        if len(needed):
            flat_work[needed] = self._strict_work(ladder.pairs.take(needed), ladder.columns.take(needed))
        if on_unit.any():
            tensor_priced[unit_rows] = ~tf32 | (tensor_work <= flat_work[unit_rows])
            flat_work[unit_rows] = np.where(tf32, np.minimum(tensor_work, flat_work[unit_rows]), tensor_work)

    def gpu_ms(self, work: KernelWork) -> np.ndarray:
        """Each kernel's GPU time in the running model [kernels, devices] (its share without the wait for
        the host)."""
        return self.overhead.gpu_ms(work.work_ms)

    def compose(self, work: KernelWork) -> np.ndarray:
        """Each kernel's share of end-to-end time [kernels, devices]; the total is the column sum."""
        return self.overhead.kernel_ms(work.work_ms, work.host_waits, work.launches)


def fp64_floor_ms(specs: Sequence[KernelSpec], devices: Sequence[Device]) -> np.ndarray:
    """[kernels, devices]: each FP64 GEMM's or convolution's FLOPs at the device's fastest FP64 peak (0 for the other
    kernels, and where the database has no FP64 peak). No source measured FP64: such a kernel is priced as its
    strict-FP32 twin (8-byte tensors), and never below this floor. A ResNet-50 ``.double()`` export was priced as
    FP32, in TF32 on an A10G (9.7 ms against a floor of 120 at its 0.55 TFLOPS of FP64)."""
    floor = np.zeros((len(specs), len(devices)))
    rows = [i for i, spec in enumerate(specs) if spec.precision == "fp64" and spec.family in ("gemm", "conv")]
    if rows:
        peaks = np.array([fp64_peak_tflops(device) or np.inf for device in devices])
        flops = np.array([float(specs[i].flops) for i in rows])
        floor[rows] = flops[:, None] / (peaks[None, :] * 1e9)  # FLOPs / (TFLOPS * 1e12) s, in ms
    return floor


def _dgrad_factors(specs: Sequence[KernelSpec]) -> np.ndarray:
    """Per kernel: the measured backward-data / forward ratio of a transposed convolution (described as the forward
    convolution whose input gradient it computes; :mod:`lilou.latency.kernel_model.transposed`), 1 otherwise."""
    transposed = np.array([spec.transposed for spec in specs], dtype=bool)
    factors = np.ones(len(specs))
    if transposed.any():
        strides = np.array([spec.conv[1] for spec, t in zip(specs, transposed) if t])
        factors[transposed] = load_ratios().factor(strides)
    return factors


#: Kernel type of an LSTM/GRU/RNN layer (cuDNN's fused RNN kernels), priced by the recurrent model.
RECURRENT_TYPE = "recurrent"


def _recurrent_work(spec: KernelSpec, devices: list[Device],
                    path_for: Callable[[Device], PrecisionPath] | None) -> np.ndarray:
    """GPU work (ms) of one recurrent layer on each device: its GEMMs run at the unit of its precision."""
    cell, steps, batch, directions, inputs, hidden, itemsize = spec.recurrent
    shape = RecurrentShape(cell, steps, batch, directions, inputs, hidden, itemsize)
    model = RecurrentModel.load()
    out = np.empty(len(devices))
    for j, device in enumerate(devices):
        unit = kernel_unit("gemm", path_for(device), device) if path_for is not None else None
        peak = device.peak_tflops.get(unit) if unit else None
        out[j] = model.work_ms(shape, peak or device.fp32_tflops, device.memory_bandwidth_gbs)
    return out


@dataclass(frozen=True)
class _LadderRows:
    """The size ladder of the model-priced kernels on every device (rows: device, rung, kernel)."""

    pairs: KernelBatch
    columns: DeviceColumns               # each row's device, at the FP32 CUDA-core rates (strict pricing)
    unit_columns: DeviceColumns | None   # the same at the peak of each row's unit, where some row has one
    on_unit: np.ndarray                  # bool: the row runs on a unit other than the FP32 CUDA cores

    def lower_bound_ms(self) -> np.ndarray:
        """A lower bound on each row's price, whichever model and unit price it: the roofline at the larger of
        the two peaks (FP32 CUDA cores, the row's unit; :func:`strict_floor_ms`)."""
        bound = strict_floor_ms(self.pairs, self.columns)
        if self.unit_columns is not None:
            bound = np.minimum(bound, strict_floor_ms(self.pairs, self.unit_columns))
        return bound


#: A rung of the size ladder is priced only where its lower bound, times this, is under the price of the kernel
#: itself (rung 0): a rung that cannot be the minimum changes nothing. ResNet-50 over every GPU and MIG slice
#: prices 10,000 of 70,000 ladder rows so. The margin covers float32 rounding, like :data:`STRICT_BOUND_MARGIN`.
LADDER_BOUND_MARGIN = 0.999

#: A kernel model's work is at least its roofline up to float32 rounding (about 1e-6 relative): a TF32 price this
#: far under the strict-FP32 roofline is the lower of the two without pricing the strict kernel.
STRICT_BOUND_MARGIN = 0.999


def strict_floor_ms(kernels: KernelBatch, columns: DeviceColumns) -> np.ndarray:
    """A lower bound on either kernel model's strict-FP32 work of each row: max(compute, memory) at the FP32 peak
    and bandwidth, with Winograd FLOPs for the convolutions cuDNN may run so. Each model prices a kernel at its
    roofline times exp(softplus(...)) >= 1, times a low-power factor >= 1 (:mod:`lilou.latency.kernel_model.model`)."""
    compute, memory = roofline_ms(kernels, columns, winograd=True)
    return np.maximum(np.maximum(compute, memory), 1e-9)


def _with_units(columns: DeviceColumns, kinds: list[tuple[str, str]], devices: list[Device],
                path_for: Callable[[Device], PrecisionPath], rungs: int) -> tuple[DeviceColumns, np.ndarray]:
    """``columns`` (device-major, then rung, then kernel) with each GEMM/conv row's unit and its peak, and
    which rows run on a unit other than the FP32 CUDA cores. ``kinds``: each kernel's family and the precision it
    reads (:func:`lilou.latency.kernel_model.precision.kernel_path`)."""
    m = len(kinds)
    compute, unit = columns.compute_tflops.copy(), columns.unit.copy()
    # the unit depends on the device, the family and the precision only: one lookup per kind, for its rows of every rung
    of_kind = {kind: np.tile(np.array([k == kind for k in kinds]), rungs) for kind in sorted(set(kinds))}
    for j, device in enumerate(devices):
        path = path_for(device)
        block = slice(j * rungs * m, (j + 1) * rungs * m)  # this device's rungs x kernels, kernel fastest
        for (family, precision), rows in of_kind.items():
            name = kernel_unit(family, kernel_path(path, precision), device)
            if name is None:
                continue
            compute[block][rows] = device.peak_tflops[name]
            unit[block][rows] = UNITS.index(name)
    return replace(columns, compute_tflops=compute, unit=unit), unit != UNITS.index("fp32")
