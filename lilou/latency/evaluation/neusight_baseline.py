"""A NeuSight-style baseline, re-implemented from the paper's description (ASPLOS 2025), for benchmarks.

NeuSight splits a kernel into tiles that the GPU runs in waves over its SMs, and predicts the time of
one wave from the roofline of one tile scaled by a learned utilisation:

    time = waves * max(tile FLOPs * SMs / peak, tile bytes * SMs / bandwidth) / utilisation
    utilisation = sigmoid(gamma) - sigmoid(alpha) / waves

``alpha`` and ``gamma`` come from a small MLP per family over log2 of the tile's work normalised by
the device per SM (tile FLOPs / peak per SM, tile bytes / bandwidth per SM, the wave's bytes / L2
per SM) and of the wave count. The utilisation is bounded by 1, so the prediction never beats the
roofline. Tiles: GEMMs and convolutions (as implicit GEMMs) use 128 x 128 output tiles over the whole
reduction; row-wise and elementwise kernels use blocks of 512 output elements. NeuSight reads the
tile of the library kernel that ran; no source but NeuSight records it, so a fixed tile is used
everywhere. There is no launch floor, as in NeuSight. Peaks are those of the kernel's unit
(``DeviceColumns.compute_tflops``), so the baseline is precision-aware like the model it is compared to.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from lilou.latency.kernel_model.dataset import KernelDataset
from lilou.latency.kernel_model.features import ELEMENTWISE_BLOCK, DeviceColumns, KernelBatch
from lilou.latency.kernel_model.kernel import FAMILIES

TILE = 128
_GEMM_FAMILIES = (FAMILIES.index("gemm"), FAMILIES.index("conv"))


def tiles(kernels: KernelBatch, devices: DeviceColumns) -> tuple[np.ndarray, ...]:
    """(waves, roofline time of one wave in ms, per-SM inputs of the utilisation MLP [n, 4])."""
    gemm = np.isin(kernels.family, _GEMM_FAMILIES) & (kernels.gemm_m > 0)
    gemm_blocks = np.maximum(kernels.gemm_batch, 1) * np.ceil(kernels.gemm_m / TILE) * np.ceil(kernels.gemm_n / TILE)
    vector_blocks = np.ceil(np.maximum(kernels.out_elements, 1) / ELEMENTWISE_BLOCK)
    blocks = np.maximum(np.where(gemm, gemm_blocks, vector_blocks), 1.0)
    sms = np.broadcast_to(devices.sms, blocks.shape)
    waves = np.ceil(blocks / sms)
    tile_flops = kernels.flops / blocks
    tile_bytes = kernels.bytes / blocks
    peak_per_sm = devices.compute_tflops * 1e9 / sms          # FLOP per ms per SM
    bandwidth_per_sm = devices.bandwidth_gbs * 1e6 / sms      # bytes per ms per SM
    l2_per_sm = devices.l2_mb * 2**20 / sms
    wave_ms = np.maximum(tile_flops / peak_per_sm, tile_bytes / bandwidth_per_sm)
    inputs = np.stack([np.log2(tile_flops / peak_per_sm + 1e-12), np.log2(tile_bytes / bandwidth_per_sm + 1e-12),
                       np.log2(waves * tile_bytes / l2_per_sm + 1e-12), np.log2(waves)], axis=1)
    return waves, wave_ms, inputs.astype(np.float32)


class _Utilisation(nn.Module):
    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.nets = nn.ModuleList(nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                                nn.Linear(hidden, 2)) for _ in FAMILIES)
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("std", torch.ones(4))

    def forward(self, inputs: torch.Tensor, family: torch.Tensor, waves: torch.Tensor) -> torch.Tensor:
        x = (inputs - self.mean) / self.std
        out = torch.zeros(len(x), 2)
        for index, net in enumerate(self.nets):
            mask = family == index
            if mask.any():
                out[mask] = net(x[mask])
        alpha, gamma = torch.sigmoid(out[:, 0]), torch.sigmoid(out[:, 1])
        return (gamma - alpha / waves).clamp_min(1e-3)


@dataclass
class NeuSightBaseline:
    net: _Utilisation

    @classmethod
    def fit(cls, data: KernelDataset, epochs: int = 8, batch_size: int = 4096, lr: float = 3e-3,
            seed: int = 0) -> NeuSightBaseline:
        """Train on ``data`` with the MAPE loss, as NeuSight does."""
        torch.manual_seed(seed)
        waves, wave_ms, inputs = tiles(data.kernels, data.devices)
        net = _Utilisation()
        x = torch.from_numpy(inputs)
        net.mean.copy_(x.mean(dim=0))
        net.std.copy_(x.std(dim=0).clamp_min(1e-3))
        family = torch.from_numpy(data.kernels.family)
        w, roof = torch.from_numpy(waves).float(), torch.from_numpy(waves * wave_ms).float()
        target = torch.from_numpy(data.latency_ms).float()
        optimizer = torch.optim.Adam(net.parameters(), lr=lr)
        generator = torch.Generator().manual_seed(seed)
        for _ in range(epochs):
            for batch in torch.randperm(len(x), generator=generator).split(batch_size):
                predicted = roof[batch] / net(x[batch], family[batch], w[batch])
                loss = ((predicted - target[batch]).abs() / target[batch]).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        return cls(net.eval())

    @torch.no_grad()
    def predict(self, kernels: KernelBatch, devices: DeviceColumns) -> np.ndarray:
        waves, wave_ms, inputs = tiles(kernels, devices)
        utilisation = self.net(torch.from_numpy(inputs), torch.from_numpy(kernels.family),
                               torch.from_numpy(waves).float())
        return waves * wave_ms / utilisation.double().numpy()
