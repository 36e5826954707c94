"""The Kubernetes extended resource that requests a device, as the NVIDIA device plugin names it.

With the plugin's ``mixed`` MIG strategy a whole GPU is ``nvidia.com/gpu`` and a MIG slice is
``nvidia.com/mig-<profile>``, the profile as ``nvidia-smi mig -lgip`` prints it but for its ``+``, which a
Kubernetes resource name cannot hold and the plugin turns into a ``.`` (``nvidia.com/mig-1g.10gb``, and
``nvidia.com/mig-1g.10gb.me`` for the media-extension ``1g.10gb+me``, as the plugin's own tests name it;
Lilou printed ``nvidia.com/mig-1g.10gb+me``, which a pod spec cannot request). Under the ``single`` strategy
every slice is advertised as ``nvidia.com/gpu`` instead; Lilou plans for ``mixed``, where slices of different
sizes can be requested apart.
"""
from __future__ import annotations

from lilou.hardware import Device

WHOLE_GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"


def resource_name(device: Device) -> str:
    """``nvidia.com/gpu`` for a whole GPU, ``nvidia.com/mig-<profile>`` for a MIG slice (mixed strategy)."""
    return WHOLE_GPU if device.mig is None else f"{MIG_PREFIX}{device.mig.replace('+', '.')}"
