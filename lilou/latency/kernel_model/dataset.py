"""Measured rows (NeuSight's, or a sample of the kernel table) -> (kernel, device, latency, kernel type, timing)
training arrays."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from lilou.data.kernel_schema import TIMING_METHODS
from lilou.data.neusight import SHAPE_COLUMNS, KernelTable
from lilou.latency.kernel_model.measured import cost_nodes
from lilou.hardware import resolve_device
from lilou.latency.kernel_model.features import DeviceColumns, KernelBatch
from lilou.latency.kernel_model.kernel import KernelSpec, describe_kernel
from lilou.latency.kernel_model.kernel_types import type_index
from lilou.latency.kernel_model.table_kernels import PRICED_FAMILIES, table_kernels

#: Timing methods of the measurements, in the order of the model's per-timing floors (eager first).
TIMINGS: tuple[str, ...] = tuple(TIMING_METHODS)


@dataclass(frozen=True)
class KernelDataset:
    kernels: KernelBatch
    devices: DeviceColumns
    gpu: np.ndarray          # canonical GPU name per row
    op: np.ndarray           # NeuSight op per row
    family: np.ndarray       # gemm | conv | elementwise | layernorm | softmax
    latency_ms: np.ndarray
    kernel_type: np.ndarray  # index into KERNEL_TYPES; -1 where the row records no kernel name
    timing: np.ndarray       # index into TIMINGS: how the row was timed

    def __len__(self) -> int:
        return len(self.latency_ms)

    def take(self, index: np.ndarray) -> KernelDataset:
        return KernelDataset(
            kernels=self.kernels.take(index),
            devices=DeviceColumns(**{k: v[index] for k, v in vars(self.devices).items()}),
            gpu=self.gpu[index], op=self.op[index], family=self.family[index],
            latency_ms=self.latency_ms[index], kernel_type=self.kernel_type[index], timing=self.timing[index])


def kernel_specs(table: KernelTable) -> list[KernelSpec]:
    """One spec per row; rows of the same op and shape share one (GPUs repeat shapes)."""
    cache: dict[tuple, KernelSpec] = {}
    specs = []
    for i in range(len(table)):
        op, family = str(table.op[i]), str(table.family[i])
        keys = SHAPE_COLUMNS[family].values()
        shape = {key: int(table.shape[key][i]) for key in keys}
        signature = (op, *shape.values())
        if signature not in cache:
            cache[signature] = describe_kernel(cost_nodes(op, shape))
        specs.append(cache[signature])
    return specs


def build_dataset(table: KernelTable) -> KernelDataset:
    devices = {gpu: resolve_device(gpu) for gpu in np.unique(table.gpu)}
    names = {name: type_index(name) for name in set(table.kernel_name)}
    return KernelDataset(
        kernels=KernelBatch.from_specs(kernel_specs(table)),
        devices=DeviceColumns.from_devices([devices[g] for g in table.gpu]),
        gpu=np.asarray(table.gpu), op=np.asarray(table.op), family=np.asarray(table.family),
        latency_ms=np.asarray(table.latency_ms, dtype=np.float64),
        kernel_type=np.array([names[n] for n in table.kernel_name], dtype=np.int64),
        timing=np.zeros(len(table), dtype=np.int64),  # NeuSight: eager CUDA events
    )


def dataset_from_sample(sample: dict[str, list]) -> KernelDataset:
    """The priced rows of a table sample as a :class:`KernelDataset` (kernel types from NeuSight's names)."""
    priced = table_kernels(sample, use_units=True)
    rows = {c: np.asarray(sample[c], dtype=object)[priced.index] for c in sample}
    names = {}
    kernel_type = np.full(len(priced.index), -1, dtype=np.int64)
    for i, (source, name) in enumerate(zip(rows["source"], rows["provider"])):
        if source == "neusight" and name:
            kernel_type[i] = names[name] if name in names else names.setdefault(name, type_index(name))
    return KernelDataset(
        kernels=priced.kernels, devices=priced.devices, gpu=rows["gpu"].astype(str), op=rows["op"].astype(str),
        family=np.array([PRICED_FAMILIES[f] for f in rows["family"]]),
        latency_ms=rows["latency_ms"].astype(np.float64), kernel_type=kernel_type,
        timing=np.array([TIMINGS.index(t) for t in rows["timing"]], dtype=np.int64))


def concat_datasets(parts: Sequence[KernelDataset]) -> KernelDataset:
    """The rows of ``parts``, one after the other."""
    def joined(columns):
        return np.concatenate(list(columns))

    return KernelDataset(
        kernels=KernelBatch(**{f.name: joined(getattr(p.kernels, f.name) for p in parts) for f in fields(KernelBatch)}),
        devices=DeviceColumns(**{f.name: joined(getattr(p.devices, f.name) for p in parts)
                                 for f in fields(DeviceColumns)}),
        gpu=joined(p.gpu.astype(str) for p in parts), op=joined(p.op.astype(str) for p in parts),
        family=joined(p.family.astype(str) for p in parts), latency_ms=joined(p.latency_ms for p in parts),
        kernel_type=joined(p.kernel_type for p in parts), timing=joined(p.timing for p in parts))
