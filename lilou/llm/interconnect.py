"""GPU-to-GPU links for tensor parallelism: a small cited table, kept here because the GPU database
(``lilou/hardware/gpus.yaml``) has no interconnect field.

Bandwidths are per GPU and per direction (what a ring all-reduce streams), from NVIDIA's product pages:

- NVLink 2 (V100 SXM2): 300 GB/s total, 150 GB/s each way (Tesla V100 datasheet);
- NVLink 3 (A100 SXM4): 600 GB/s total, 300 each way (A100 datasheet);
- NVLink 4 (H100 SXM, H200, GH200): 900 GB/s total, 450 each way (H100 / H200 datasheets);
  H100 NVL / H200 NVL bridges: 600 GB/s total, 300 each way;
- NVLink 5 (B200, GB200, B300, GB300): 1.8 TB/s total, 900 each way (DGX B200 / GB200 NVL72 pages);
- PCIe x16 per direction: gen 3 15.75 GB/s, gen 4 31.5 GB/s, gen 5 63 GB/s (PCI-SIG), used for every board
  not listed, by its generation (GPU database ``compute_capability``: up to 7.5 gen 3, 8.x gen 4, 9.0+ gen 5).

The fixed cost per all-reduce (launch + synchronisation) is an assumption, not a measurement: about 10 us over
NVLink and 25 us over PCIe, typical of NCCL / vLLM custom all-reduce on small messages.
"""
from __future__ import annotations

from dataclasses import dataclass

from lilou.hardware import Device


@dataclass(frozen=True)
class Link:
    name: str
    gbs: float          # per GPU, per direction
    latency_us: float   # fixed cost of one all-reduce


_NVLINK = {
    "v100-sxm2-16gb": Link("NVLink 2", 150.0, 10.0), "v100-sxm2-32gb": Link("NVLink 2", 150.0, 10.0),
    "a100-sxm4-40gb": Link("NVLink 3", 300.0, 10.0), "a100-sxm4-80gb": Link("NVLink 3", 300.0, 10.0),
    "h100-sxm": Link("NVLink 4", 450.0, 10.0), "h200": Link("NVLink 4", 450.0, 10.0),
    "gh200": Link("NVLink 4", 450.0, 10.0),
    "h100-nvl": Link("NVLink 4 bridge", 300.0, 10.0), "h200-nvl": Link("NVLink 4 bridge", 300.0, 10.0),
    "b200": Link("NVLink 5", 900.0, 10.0), "gb200": Link("NVLink 5", 900.0, 10.0),
    "b300": Link("NVLink 5", 900.0, 10.0), "gb300": Link("NVLink 5", 900.0, 10.0),
}
_PCIE = {3: Link("PCIe 3.0 x16", 15.75, 25.0), 4: Link("PCIe 4.0 x16", 31.5, 25.0),
         5: Link("PCIe 5.0 x16", 63.0, 25.0)}


def link(device: Device) -> Link:
    """The link a tensor-parallel group of ``device``'s GPUs communicates over."""
    if device.gpu in _NVLINK:
        return _NVLINK[device.gpu]
    major = int(device.compute_capability.partition(".")[0])
    return _PCIE[3 if major < 8 else 4 if major < 9 else 5]


def all_reduce_ms(nbytes: float, tp: int, device: Device) -> float:
    """Ring all-reduce of ``nbytes`` over ``tp`` GPUs: 2 (tp - 1) / tp of the message each way, plus the
    fixed cost."""
    if tp <= 1:
        return 0.0
    chosen = link(device)
    return chosen.latency_us / 1000 + 2 * (tp - 1) / tp * nbytes / (chosen.gbs * 1e9) * 1000
