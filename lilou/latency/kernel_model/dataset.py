"""Measured NeuSight rows -> (kernel, device, latency, kernel type) training arrays."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lilou.data.kernel_schema import TIMING_METHODS
from lilou.data.neusight import SHAPE_COLUMNS, KernelTable
from lilou.latency.kernel_model.measured import cost_nodes
from lilou.hardware import resolve_device
from lilou.latency.kernel_model.features import DeviceColumns, KernelBatch
from lilou.latency.kernel_model.kernel import KernelSpec, describe_kernel
from lilou.latency.kernel_model.kernel_types import type_index

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
