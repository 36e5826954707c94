"""What a profile ran on, written beside its rows as ``provenance.json``: the device as PyTorch and the driver
report it, the software versions, the command and the timing method. A measured row without this is not data."""
from __future__ import annotations

import datetime as dt
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass
from typing import Any

from lilou.data.profiles import FORMAT_VERSION


@dataclass(frozen=True)
class DeviceInfo:
    """The device a profile ran on. ``kind``: ``cuda`` (a whole GPU), ``mig`` (a MIG slice) or ``cpu``."""

    kind: str
    name: str
    index: int | None = None
    compute_capability: str | None = None
    sms: int | None = None
    memory_gb: float | None = None
    driver: str | None = None
    clocks_mhz: dict[str, int] | None = None
    power_limit_w: float | None = None


def describe_device(device: str) -> DeviceInfo:
    """``device`` is ``cpu``, ``cuda`` or ``cuda:N`` (checked by the caller)."""
    if device == "cpu":
        return DeviceInfo(kind="cpu", name=platform.processor() or platform.machine() or "cpu")
    import torch

    index = int(device.split(":", 1)[1]) if ":" in device else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    name = torch.cuda.get_device_name(index)
    smi = _nvidia_smi(index)
    return DeviceInfo(kind="mig" if " MIG " in f" {name} " else "cuda", name=name, index=index,
                      compute_capability=f"{props.major}.{props.minor}", sms=props.multi_processor_count,
                      memory_gb=round(props.total_memory / 2**30, 2), driver=smi.get("driver_version"),
                      clocks_mhz={k: int(float(v)) for k, v in smi.items() if k.startswith("clocks.") and _number(v)}
                      or None,
                      power_limit_w=float(smi["power.limit"]) if _number(smi.get("power.limit")) else None)


def _number(value: str | None) -> bool:
    try:
        float(value)  # type: ignore[arg-type]
        return True
    except (TypeError, ValueError):
        return False


_SMI_FIELDS = ("driver_version", "clocks.max.sm", "clocks.max.memory", "clocks.applications.graphics",
               "power.limit")


def _nvidia_smi(index: int) -> dict[str, str]:
    """The driver's view of the GPU (empty where nvidia-smi is absent or says nothing)."""
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        out = subprocess.run(["nvidia-smi", f"--id={index}", f"--query-gpu={','.join(_SMI_FIELDS)}",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")] if out.stdout.strip() else []
    return dict(zip(_SMI_FIELDS, values)) if len(values) == len(_SMI_FIELDS) else {}


def software() -> dict[str, str | None]:
    import torch

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": str(cudnn) if cudnn else None, "os": platform.platform(), "host_cpu": host_cpu()}


def host_cpu(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The host CPU's model name: /proc/cpuinfo's ``model name`` on Linux (platform.processor() is empty there),
    else platform.processor(); None where neither says."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def provenance(device: DeviceInfo, command: list[str], settings: dict[str, Any], started: dt.datetime,
               rows: int, skipped: dict[str, int]) -> dict[str, Any]:
    """The ``provenance.json`` of one profile."""
    from lilou import __version__

    return {"format": FORMAT_VERSION, "tool": f"lilou {__version__}", "command": command,
            "started": started.isoformat(timespec="seconds"),
            "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "device": asdict(device), "software": software(), "settings": settings, "rows": rows,
            "skipped": skipped}
