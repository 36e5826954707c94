"""GPU-to-GPU links for tensor parallelism: a small cited table, kept here because the GPU database
(``lilou/hardware/gpus.yaml``) has no interconnect field.

Bandwidths are per GPU and per direction (what a ring all-reduce streams), from NVIDIA's product pages:

- NVLink 2 (V100 SXM2): 300 GB/s total, 150 GB/s each way (Tesla V100 datasheet);
- NVLink 3 (A100 SXM4): 600 GB/s total, 300 each way (A100 datasheet);
- NVLink 4 (H100 SXM, H200, GH200): 900 GB/s total, 450 each way (H100 / H200 datasheets);
- NVLink 4 bridges of the PCIe boards: H100 NVL 600 GB/s total (300 each way) between the two boards of a bridged
  pair (H100 NVL product brief); H200 NVL 900 GB/s total (450 each way) in a 2- or 4-way bridge domain (H200
  datasheet, "2- or 4-way NVIDIA NVLink bridge: 900GB/s"). A tensor-parallel group larger than the bridge domain
  (H100 NVL beyond 2, H200 NVL beyond 4) has ring hops over PCIe Gen5, so it is priced at the PCIe link;
- NVLink 5 (B200, GB200, B300, GB300): 1.8 TB/s total, 900 each way (DGX B200 / GB200 NVL72 pages);
- PCIe x16 per direction: gen 3 15.75 GB/s, gen 4 31.5 GB/s, gen 5 63 GB/s (PCI-SIG), used for every board
  not listed, by its generation (GPU database ``compute_capability``: up to 7.5 gen 3, 8.x gen 4, 9.0+ gen 5).

The fixed cost per all-reduce (launch + synchronisation) is an assumption, not a measurement: about 10 us over
NVLink and 25 us over PCIe, typical of NCCL / vLLM custom all-reduce on small messages.

What is measured: the serving rows at TP > 1 (``lilou.data.llm_energy.serving_runs()``) are all vLLM on NVLink
machines, the A100-SXM4-40GB, H100 SXM and B200 at TP 2, 4 and 8. The H100's are held back for evaluation, so the
fits and the calibrated intervals carry the residuals of the A100's and B200's alone (:data:`MEASURED_TP`), over
NVLink 3 and 5. Every other link's all-reduce is the constants above, unchecked by a fit: :func:`extrapolation`
says so, and widens the intervals by the all-reduce's share of the step where the link is not an NVSwitch
generation between measured ones (see there).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from lilou.hardware import Device


@dataclass(frozen=True)
class Link:
    name: str
    gbs: float          # per GPU, per direction
    latency_us: float   # fixed cost of one all-reduce
    domain: int = 0     # the most GPUs the link joins (a bridge's pair or quad; 0: the whole node)


_NVLINK = {
    "v100-sxm2-16gb": Link("NVLink 2", 150.0, 10.0), "v100-sxm2-32gb": Link("NVLink 2", 150.0, 10.0),
    "a100-sxm4-40gb": Link("NVLink 3", 300.0, 10.0), "a100-sxm4-80gb": Link("NVLink 3", 300.0, 10.0),
    "h100-sxm": Link("NVLink 4", 450.0, 10.0), "h200": Link("NVLink 4", 450.0, 10.0),
    "gh200": Link("NVLink 4", 450.0, 10.0),
    "h100-nvl": Link("NVLink 4 bridge", 300.0, 10.0, domain=2),
    "h200-nvl": Link("NVLink 4 bridge", 450.0, 10.0, domain=4),
    "b200": Link("NVLink 5", 900.0, 10.0), "gb200": Link("NVLink 5", 900.0, 10.0),
    "b300": Link("NVLink 5", 900.0, 10.0), "gb300": Link("NVLink 5", 900.0, 10.0),
}
_PCIE = {3: Link("PCIe 3.0 x16", 15.75, 25.0), 4: Link("PCIe 4.0 x16", 31.5, 25.0),
         5: Link("PCIe 5.0 x16", 63.0, 25.0)}

#: GPUs whose serving rows at TP > 1 enter the fits (llm_energy: vLLM at TP 2, 4 and 8, the held-back H100's left
#: out; checked by tests/test_llm_tp.py).
MEASURED_TP = frozenset({"a100-sxm4-40gb", "b200"})
#: NVSwitch NVLink generations: the 4th lies between the measured 3rd (A100) and 5th (B200), so its constants are
#: priced alike, said but not widened.
SWITCHED_NVLINK = frozenset({"NVLink 3", "NVLink 4", "NVLink 5"})
#: GeForce boards of the GPU database: NVIDIA's stock driver does not enable peer-to-peer between them over PCIe
#: (NVIDIA states the RTX 4090 has no P2P support), so NCCL stages each all-reduce through host memory.
GEFORCE = frozenset({"gtx-titan-x", "gtx-1080-ti", "titan-x-pascal", "titan-xp", "rtx-2080-ti", "titan-rtx",
                     "rtx-3080", "rtx-3090", "rtx-3090-ti", "rtx-4080", "rtx-4090", "rtx-5090"})
#: Log factor by which an unmeasured link's all-reduce time may be off, either way (an assumption, not a fit):
#: 2 for a link no serving row measured (PCIe's effective rate is often half its nominal x16 rate, a ring's latency
#: grows with its hops, a dual-socket server's ring crosses the CPU link); 4 without peer-to-peer (GeForce: every
#: transfer crosses PCIe twice through host memory, at the CPU's copy rate).
UNMEASURED_LOG_FACTOR = math.log(2.0)
NO_P2P_LOG_FACTOR = math.log(4.0)


def _pcie(device: Device) -> Link:
    major = int(device.compute_capability.partition(".")[0])
    return _PCIE[3 if major < 8 else 4 if major < 9 else 5]


def link(device: Device, tp: int = 2) -> Link:
    """The link a tensor-parallel group of ``tp`` of ``device``'s GPUs communicates over: its NVLink where the
    group fits the link's domain, else PCIe (the ring is as fast as its slowest hop)."""
    chosen = _NVLINK.get(device.gpu)
    if chosen is None:
        return _pcie(device)
    if chosen.domain and tp > chosen.domain:
        slow = _pcie(device)
        return replace(slow, name=f"{slow.name}, past the {chosen.domain} GPUs an {chosen.name} joins")
    return chosen


def extrapolation(device: Device, tp: int) -> tuple[str, float] | None:
    """Whether the all-reduce price of ``tp`` of ``device``'s GPUs rests on no measurement: a note and the log factor
    by which its time may be off (the interval widens by the all-reduce's share of the step times it). None at TP 1
    and on the GPUs of :data:`MEASURED_TP`, whose residuals the calibrated intervals already hold. A GPU on an
    NVSwitch NVLink generation (:data:`SWITCHED_NVLINK`: the A100-SXM4-80GB, the H100 SXM, H200 and GH200 between the
    measured generations, B300, GB200, GB300) is said but not widened."""
    from lilou.data.kernel_schema import is_held_back

    if tp <= 1 or device.gpu in MEASURED_TP:
        return None
    chosen = link(device, tp)
    fitted = ", ".join(f"{gpu} ({_NVLINK[gpu].name})" for gpu in sorted(MEASURED_TP))
    base = (f"TP {tp} on {device.gpu}: no serving row at TP > 1 on this GPU enters the fits "
            f"({'its rows are held back for evaluation; ' if is_held_back(device.gpu) else ''}fitted: {fitted})")
    if chosen.name in SWITCHED_NVLINK:
        return (f"{base}; its all-reduce is priced with {chosen.name} constants, as the measured NVSwitch GPUs' are",
                0.0)
    if device.gpu in GEFORCE:
        return (f"{base}: the all-reduce over {chosen.name} is extrapolated from assumed link constants; {device.gpu} "
                "is a GeForce board, on which NVIDIA's stock driver does not enable peer-to-peer, so NCCL copies "
                "through host memory and may be several times slower than priced; the TTFT and ITL intervals are "
                "widened by the all-reduce's share of each step (a factor of 4 on it, lilou/llm/interconnect.py)",
                NO_P2P_LOG_FACTOR)
    return (f"{base}: the all-reduce over {chosen.name} is extrapolated from assumed link constants (full x16 or "
            "bridge rate, a fixed latency whatever the TP); the TTFT and ITL intervals are widened by the "
            "all-reduce's share of each step (a factor of 2 on it, lilou/llm/interconnect.py)",
            UNMEASURED_LOG_FACTOR)


def all_reduce_ms(nbytes: float, tp: int, device: Device) -> float:
    """Ring all-reduce of ``nbytes`` over ``tp`` GPUs: 2 (tp - 1) / tp of the message each way, plus the
    fixed cost."""
    if tp <= 1:
        return 0.0
    chosen = link(device, tp)
    return chosen.latency_us / 1000 + 2 * (tp - 1) / tp * nbytes / (chosen.gbs * 1e9) * 1000
