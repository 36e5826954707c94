"""The GPU and MIG database: the figures in ``gpus.yaml``, loaded once, and name lookups."""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, fields
from importlib import resources
from typing import Any, NamedTuple

import yaml

from lilou.errors import LilouInputError
from lilou.hardware.names import closest, gpu_key, mig_key

DATA_FILE = "gpus.yaml"


@dataclass(frozen=True)
class MIGProfile:
    """One MIG GPU-instance profile, as NVIDIA's MIG user guide lists it for a GPU."""

    name: str  # e.g. "3g.20gb"
    compute_slices: int  # the "3g"
    memory_slices: int  # out of the GPU's total memory slices (8 on A100/H100, 4 on A30)
    sms: int  # as reported by `nvidia-smi mig -lgip`
    memory_gb: float  # nominal, as in the name
    max_instances: int
    l2_fraction: float  # share of the parent's L2 cache
    bandwidth_fraction: float  # share of the parent's DRAM bandwidth

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GPUSpec:
    """Published figures of one GPU board; see the header of ``gpus.yaml`` for units."""

    name: str
    aliases: tuple[str, ...]
    architecture: str
    compute_capability: str
    sms: int
    boost_clock_mhz: int
    memory_gb: float
    memory_bandwidth_gbs: float
    l2_mb: float
    fp32_tflops: float
    fp16_tflops: float
    tensor_tflops: float | None  # None: no tensor cores
    tdp_w: int
    source: tuple[str, ...]
    mig_profiles: tuple[MIGProfile, ...] = ()
    mig_source: str | None = None
    notes: str | None = None

    @property
    def supports_mig(self) -> bool:
        return bool(self.mig_profiles)

    def mig_profile(self, name: str) -> MIGProfile:
        """The MIG profile called ``name`` (``"1g.10gb"``, ``"MIG 1g.10gb"``)."""
        wanted = mig_key(name)
        for profile in self.mig_profiles:
            if mig_key(profile.name) == wanted:
                return profile
        if not self.supports_mig:
            raise LilouInputError(f"GPU '{self.name}' has no MIG support, so it has no profile '{name}'")
        valid = ", ".join(profile.name for profile in self.mig_profiles)
        raise LilouInputError(f"GPU '{self.name}' has no MIG profile '{name}'; valid profiles: {valid}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict with the same fields as the database entry, MIG profiles included."""
        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        data["aliases"] = list(self.aliases)
        data["source"] = list(self.source)
        data["mig_profiles"] = [profile.to_dict() for profile in self.mig_profiles]
        return data


def all_gpus() -> list[GPUSpec]:
    """Every GPU in the database, in file order."""
    return list(_database().gpus)


def find_gpu(name: str) -> GPUSpec:
    """The GPU called ``name`` or one of its aliases, ignoring case, punctuation and a leading
    "nvidia" / "tesla" / "geforce"; unknown names raise :class:`LilouInputError` with suggestions."""
    gpu = _database().by_key.get(gpu_key(name))
    if gpu is None:
        raise LilouInputError(_unknown_gpu_message(name))
    return gpu


def gpu_for_dataset_device(device_name: str) -> GPUSpec:
    """The GPU behind a device name used in measurement data: NeuSight's ``Device`` column and
    config file names (``NVIDIA A100 80GB PCIe``, ``Tesla_V100-PCIE-32GB``) or WattGPU's
    ``gpu_type``. These spellings are aliases in ``gpus.yaml``."""
    try:
        return find_gpu(device_name)
    except LilouInputError:
        raise LilouInputError(
            f"unknown dataset device '{device_name}'; add its spelling as an alias in lilou/hardware/{DATA_FILE}"
        ) from None


def _unknown_gpu_message(name: str) -> str:
    spellings = {gpu.name: (gpu.name, *gpu.aliases) for gpu in _database().gpus}
    suggestions = closest(name, spellings)
    if suggestions:
        return f"unknown GPU '{name}'; did you mean: {', '.join(suggestions)}?"
    return f"unknown GPU '{name}'; `lilou gpus` lists the known GPUs"


# ---------------------------------------------------------------------------- loading


class _Database(NamedTuple):
    gpus: tuple[GPUSpec, ...]
    by_key: dict[str, GPUSpec]  # gpu_key of every name and alias -> GPU


@functools.cache
def _database() -> _Database:
    text = resources.files("lilou.hardware").joinpath(DATA_FILE).read_text(encoding="utf-8")
    raw = yaml.safe_load(text)
    gpus = tuple(_parse_gpu(entry, raw["mig_tables"]) for entry in raw["gpus"])
    return _Database(gpus, _index_by_key(gpus))


def _parse_gpu(entry: dict[str, Any], mig_tables: dict[str, Any]) -> GPUSpec:
    entry = dict(entry)
    entry["aliases"] = tuple(entry["aliases"])
    entry["source"] = tuple(entry["source"])
    table_name = entry.pop("mig")
    if table_name is None:
        return GPUSpec(**entry)
    table = mig_tables[table_name]
    return GPUSpec(**entry, mig_profiles=_parse_mig_table(table), mig_source=table["source"])


def _parse_mig_table(table: dict[str, Any]) -> tuple[MIGProfile, ...]:
    """Profiles of one MIG table; a slice's L2 and bandwidth shares follow its memory slices."""
    total = table["memory_slices"]
    return tuple(
        MIGProfile(
            **row,
            l2_fraction=row["memory_slices"] / total,
            bandwidth_fraction=row["memory_slices"] / total,
        )
        for row in table["profiles"]
    )


def _index_by_key(gpus: tuple[GPUSpec, ...]) -> dict[str, GPUSpec]:
    """Map every spelling's key to its GPU; two GPUs sharing a key is a bug in the data file."""
    index: dict[str, GPUSpec] = {}
    for gpu in gpus:
        for spelling in (gpu.name, *gpu.aliases):
            key = gpu_key(spelling)
            other = index.setdefault(key, gpu)
            if other is not gpu:
                raise ValueError(f"{DATA_FILE}: '{spelling}' of {gpu.name} is also a name of {other.name}")
    return index
