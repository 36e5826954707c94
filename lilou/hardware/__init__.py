"""GPU and MIG spec database (data file ``gpus.yaml`` inside the package) and devices.

>>> from lilou.hardware import find_gpu, resolve_device
>>> find_gpu("NVIDIA A10G").sms
80
>>> resolve_device("a100-80gb", "1g.10gb").sms
14
"""
from lilou.hardware.database import GPUSpec, MIGProfile, all_gpus, find_gpu, gpu_for_dataset_device
from lilou.hardware.device import Device, all_devices, resolve_device

__all__ = [
    "Device",
    "GPUSpec",
    "MIGProfile",
    "all_devices",
    "all_gpus",
    "find_gpu",
    "gpu_for_dataset_device",
    "resolve_device",
]
