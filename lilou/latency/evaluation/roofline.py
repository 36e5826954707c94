"""The physical baseline: roofline time at a fitted efficiency, plus a fitted launch floor.

    latency = floor[family] + max(FLOPs / peak, bytes / bandwidth) / efficiency[family]

Two numbers per family, fitted on the training GPUs by minimising the mean absolute
error of log latency (a relative error). It is what the learned model must beat.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import torch

from lilou.latency.kernel_model.dataset import KernelDataset
from lilou.latency.kernel_model.features import DeviceColumns, KernelBatch, roofline_ms
from lilou.latency.kernel_model.kernel import FAMILIES


@dataclass
class RooflineBaseline:
    floor_ms: np.ndarray    # [len(FAMILIES)]
    efficiency: np.ndarray  # [len(FAMILIES)]

    @classmethod
    def fit(cls, data: KernelDataset, steps: int = 400) -> RooflineBaseline:
        compute, memory = roofline_ms(data.kernels, data.devices)
        roofline = torch.from_numpy(np.maximum(compute, memory))
        target = torch.from_numpy(np.log(data.latency_ms))
        family = torch.from_numpy(data.kernels.family)
        log_floor = torch.full((len(FAMILIES),), float(np.log(0.02)), dtype=torch.float64, requires_grad=True)
        log_efficiency = torch.full((len(FAMILIES),), float(np.log(0.5)), dtype=torch.float64, requires_grad=True)
        optimizer = torch.optim.Adam([log_floor, log_efficiency], lr=0.05)
        for _ in range(steps):
            predicted = torch.log(log_floor[family].exp() + roofline / log_efficiency[family].exp())
            loss = (predicted - target).abs().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return cls(floor_ms=log_floor.detach().exp().numpy(), efficiency=log_efficiency.detach().exp().numpy())

    def predict(self, kernels: KernelBatch, devices: DeviceColumns) -> np.ndarray:
        compute, memory = roofline_ms(kernels, devices)
        return self.floor_ms[kernels.family] + np.maximum(compute, memory) / self.efficiency[kernels.family]

    def to_json(self) -> str:
        return json.dumps({f: {"floor_ms": float(self.floor_ms[i]), "efficiency": float(self.efficiency[i])}
                           for i, f in enumerate(FAMILIES)}, indent=2)
