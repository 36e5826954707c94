"""The GPU and MIG database: the figures in ``gpus.yaml``, loaded once, and name lookups."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from lilou.errors import LilouInputError
from lilou.hardware.names import closest, gpu_key, mig_key

DATA_FILE = "gpus.yaml"

# Keys of ``GPUSpec.peak_tflops``: dense peaks (no sparsity), CUDA cores first, then tensor cores.
# Integer rates (int8, int8_tensor, int4_tensor) are TOPS. See the header of gpus.yaml.
PEAK_KEYS = (
    "fp64", "fp32", "fp16", "bf16", "int8",
    "tf32_tensor", "fp16_tensor", "bf16_tensor", "fp8_tensor", "int8_tensor", "int4_tensor", "fp4_tensor",
)
ARCHITECTURES = ("Maxwell", "Pascal", "Volta", "Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell")
MEMORY_TYPES = ("GDDR5", "GDDR5X", "GDDR6", "GDDR6X", "GDDR7", "HBM2", "HBM2e", "HBM3", "HBM3e")


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
    memory_gib: float | None = None  # `nvidia-smi mig -lgip`'s "Memory GiB" (what the slice's processes see)
    memory_source: str | None = None  # the public listing memory_gib comes from

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
    fp16_tflops: float | None  # None: no native FP16 arithmetic (Maxwell GM20x)
    tensor_tflops: float | None  # None: no tensor cores
    tdp_w: int
    source: tuple[str, ...]
    memory_type: str  # "GDDR6X", "HBM3e", ...
    # Dense peak per unit and dtype (keys: PEAK_KEYS), TFLOPS or TOPS; None where the unit or dtype
    # does not exist. Left out of the hash (a dict is unhashable); it still takes part in ==.
    peak_tflops: dict[str, float | None] = field(hash=False)
    fp32_lanes_per_sm: int  # FP32 FMA lanes per SM (128 on Maxwell, GP10x, GA10x, AD10x, Hopper, Blackwell)
    int32_shares_fp32_datapath: bool  # INT32 issues on FP32 lanes (GA10x, AD10x, GB20x): integer work costs FP32 slots
    tensor_core_generation: int | None  # 1 Volta, 2 Turing, 3 Ampere, 4 Ada/Hopper, 5 Blackwell; None: no tensor cores
    mig_profiles: tuple[MIGProfile, ...] = ()
    mig_source: str | None = None
    mig_unlisted: bool = False  # the GPU runs MIG, but its profiles are not in this database (``mig: unlisted``)
    notes: str | None = None
    memory_total_mib: int | None = None  # the total `nvidia-smi` reports (what a process sees); see gpus.yaml
    memory_total_source: str | None = None  # the public printout memory_total_mib comes from

    @property
    def supports_mig(self) -> bool:
        return bool(self.mig_profiles)

    def mig_profile(self, name: str) -> MIGProfile:
        """The MIG profile called ``name`` (``"1g.10gb"``, ``"MIG 1g.10gb"``)."""
        wanted = mig_key(name)
        for profile in self.mig_profiles:
            if mig_key(profile.name) == wanted:
                return profile
        if self.mig_unlisted:
            raise LilouInputError(f"GPU '{self.name}' supports MIG, but its profiles are not in Lilou's database yet "
                                  f"(their SM counts are not published), so '{name}' cannot be priced; the whole GPU can")
        if not self.supports_mig:
            raise LilouInputError(f"GPU '{self.name}' has no MIG support, so it has no profile '{name}'")
        valid = ", ".join(profile.name for profile in self.mig_profiles)
        raise LilouInputError(f"GPU '{self.name}' has no MIG profile '{name}'; valid profiles: {valid}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict with the same fields as the database entry, MIG profiles included."""
        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        data["aliases"] = list(self.aliases)
        data["source"] = list(self.source)
        data["peak_tflops"] = dict(self.peak_tflops)
        data["mig_profiles"] = [profile.to_dict() for profile in self.mig_profiles]
        return data


def all_gpus() -> list[GPUSpec]:
    """Every GPU in the database, in file order."""
    return list(_database().gpus)


#: The longest GPU name looked up (the longest spelling in the database has 44 characters; a MIG slice's device name
#: adds about 20). The suggestions for an unknown name compare it with every spelling (difflib, quadratic in its
#: length) and a name holding a slice is matched by a regular expression that backtracks quadratically: a 40 kB name
#: in a /v1/rank request froze the service for 11 s (the regular expression holds Python's lock: /v1/healthz waited
#: too), and a 1 MiB body would have for hours (audit ua46).
MAX_NAME_CHARS = 200


def check_name_length(name: str, what: str = "GPU name") -> None:
    """Refuse a name longer than :data:`MAX_NAME_CHARS` in one line, before any work that grows with its length."""
    if len(name) > MAX_NAME_CHARS:
        raise LilouInputError(f"{what} {name[:40]!r}... has {len(name):,} characters; a GPU or MIG profile name has at "
                              f"most {MAX_NAME_CHARS} (`lilou gpus` lists the known GPUs)")


def find_gpu(name: str) -> GPUSpec:
    """The GPU called ``name`` or one of its aliases, ignoring case, punctuation and a leading
    "nvidia" / "tesla" / "geforce"; unknown names raise :class:`LilouInputError` with suggestions."""
    check_name_length(name)
    gpu = _database().by_key.get(gpu_key(name))
    if gpu is None:
        raise LilouInputError(_unknown_gpu_message(name))
    return gpu


#: Architecture classes, oldest first: the folds of leave-one-architecture-out and the neighbourhoods of measured
#: coverage. Ampere splits in two (GA100 datacenter parts against GA10x's doubled FP32 lanes).
ARCHITECTURE_CLASSES = ("Maxwell", "Pascal", "Volta", "Turing", "GA100", "GA10x", "Ada", "Hopper", "Blackwell")


def architecture_class(gpu: str) -> str:
    """The class of ``gpu``'s architecture: Ampere splits into GA100 (8.0) and GA10x (8.6/8.7)."""
    spec = find_gpu(gpu)
    if spec.architecture == "Ampere":
        return "GA100" if spec.compute_capability == "8.0" else "GA10x"
    return spec.architecture.split()[0]  # "Ada Lovelace" -> "Ada"


def ambiguity_note(name: str) -> str | None:
    """A warning when ``name`` (an alias, not a canonical name) stands for a family of GPUs in the
    database, e.g. ``a100`` for the PCIe and SXM4 boards of 40 and 80 GB: it still resolves to the
    alias's GPU, as it always has, but the user should know which one and what else it could mean."""
    gpu = find_gpu(name)
    family = name_family(name)
    if len(family) < 2:
        return None
    others = ", ".join(n for n in family if n != gpu.name)
    return (f"GPU name '{name}' is ambiguous; using {gpu.name} (other matches: {others}); "
            "pass the full name to choose")


def name_family(name: str) -> list[str]:
    """The GPUs an alias that stands for a family could mean (``a100``: the four A100 boards), the one it resolves
    to included; ``[]`` for a canonical name."""
    gpu = find_gpu(name)
    if gpu_key(name) == gpu_key(gpu.name):
        return []
    words = _name_words(name)
    family = [other.name for other in _database().gpus if words and words <= _name_words(other.name)
              and "ti" not in _name_words(other.name) - words]  # a 3090 is not a 3090 Ti
    if gpu.name not in family:
        family.append(gpu.name)
    return family


def _name_words(name: str) -> frozenset[str]:
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    while words and words[0] in ("nvidia", "tesla", "geforce"):
        words.pop(0)
    return frozenset(words)


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
    raw = _parsed(resources.files("lilou.hardware").joinpath(DATA_FILE).read_text(encoding="utf-8"))
    gpus = tuple(_parse_gpu(entry, raw["mig_tables"]) for entry in raw["gpus"])
    return _Database(gpus, _index_by_key(gpus))


#: The parsed database as JSON, in the cache folder (``$LILOU_CACHE_DIR``, default ``~/.cache/lilou``).
PARSED_COPY = "gpu-database.json"


def _parsed(text: str) -> dict[str, Any]:
    """``gpus.yaml``'s ``text`` parsed: from the JSON copy of the last parse (:data:`PARSED_COPY`) when that copy was
    made from this very text (its sha256), else by PyYAML, writing the copy for the next process.

    Importing PyYAML and parsing this 2,000-line file took 50-60 ms of every command's start (libyaml's C
    parser builds the nodes, Python the values), reading the copy 1 ms. The YAML stays the one source: an edit
    changes the sha256 and the next command parses it again; a cache folder that cannot be read or written only
    costs the parse."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    copy = Path(os.environ.get("LILOU_CACHE_DIR") or "~/.cache/lilou").expanduser() / PARSED_COPY
    try:
        cached = json.loads(copy.read_text(encoding="utf-8"))
        if isinstance(cached, dict) and cached.get("sha256") == digest:
            return cached["database"]
    except (OSError, ValueError, KeyError):
        pass
    import yaml

    # libyaml's C loader where PyYAML was built with it: the pure-Python parser takes about 0.2 s on this file.
    raw = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    _write_copy(copy, digest, raw)
    return raw


def _write_copy(copy: Path, digest: str, raw: dict[str, Any]) -> None:
    """Write the parse ``raw`` of the text of sha256 ``digest`` to ``copy`` (whole or not at all: a temporary file
    renamed), when JSON gives back exactly what PyYAML gave (str keys; no date, tuple or NaN); errors are dropped."""
    try:
        encoded = json.dumps({"sha256": digest, "database": raw})
        if json.loads(encoded)["database"] != raw:
            return
        copy.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=copy.parent, prefix=f".{copy.name}.")
    except (OSError, TypeError, ValueError):
        return
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(encoded)
        os.replace(temporary, copy)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def _parse_gpu(entry: dict[str, Any], mig_tables: dict[str, Any]) -> GPUSpec:
    entry = dict(entry)
    entry["aliases"] = tuple(entry["aliases"])
    entry["source"] = tuple(entry["source"])
    raw_peaks = entry.get("peak_tflops") or {}
    ordered = [key for key in PEAK_KEYS if key in raw_peaks] + [key for key in raw_peaks if key not in PEAK_KEYS]
    entry["peak_tflops"] = {key: _peak(raw_peaks[key]) for key in ordered}
    table_name = entry.pop("mig")
    if table_name is None or table_name == "unlisted":
        gpu = GPUSpec(**entry, mig_unlisted=table_name == "unlisted")
    else:
        table = mig_tables[table_name]
        gpu = GPUSpec(**entry, mig_profiles=_parse_mig_table(table), mig_source=table["source"])
    _validate(gpu)
    return gpu


def _peak(value: Any) -> float | None:
    return None if value is None else float(value)


def _validate(gpu: GPUSpec) -> None:
    """Refuse an entry whose new fields are missing, mistyped or disagree with its legacy peaks."""
    def fail(message: str) -> None:
        raise ValueError(f"{DATA_FILE}: {gpu.name}: {message}")

    if gpu.architecture not in ARCHITECTURES:
        fail(f"architecture '{gpu.architecture}' is not one of {', '.join(ARCHITECTURES)}")
    if gpu.memory_type not in MEMORY_TYPES:
        fail(f"memory_type '{gpu.memory_type}' is not one of {', '.join(MEMORY_TYPES)}")
    if set(gpu.peak_tflops) != set(PEAK_KEYS):
        missing = sorted(set(PEAK_KEYS) - set(gpu.peak_tflops))
        extra = sorted(set(gpu.peak_tflops) - set(PEAK_KEYS))
        fail(f"peak_tflops needs exactly the keys {', '.join(PEAK_KEYS)} (missing: {missing}, unknown: {extra})")
    for key, value in gpu.peak_tflops.items():
        if value is not None and not (math.isfinite(value) and value > 0):
            fail(f"peak_tflops.{key} must be a positive number or null, not {value}")
    # The legacy single-figure fields are the same peaks under their old names.
    legacy = {"fp32": gpu.fp32_tflops, "fp16": gpu.fp16_tflops, "fp16_tensor": gpu.tensor_tflops}
    for key, value in legacy.items():
        if gpu.peak_tflops[key] != value:
            fail(f"peak_tflops.{key} = {gpu.peak_tflops[key]} disagrees with the entry's legacy figure {value}")
    if type(gpu.fp32_lanes_per_sm) is not int or gpu.fp32_lanes_per_sm not in (64, 128):
        fail(f"fp32_lanes_per_sm must be 64 or 128, not {gpu.fp32_lanes_per_sm!r}")
    if type(gpu.int32_shares_fp32_datapath) is not bool:
        fail(f"int32_shares_fp32_datapath must be true or false, not {gpu.int32_shares_fp32_datapath!r}")
    generation = gpu.tensor_core_generation
    if generation is not None and (type(generation) is not int or not 1 <= generation <= 5):
        fail(f"tensor_core_generation must be 1-5 or null, not {generation!r}")
    if (generation is None) != (gpu.tensor_tflops is None):
        fail("tensor_core_generation and tensor_tflops must both be null (no tensor cores) or both set")
    if (gpu.memory_total_mib is None) != (gpu.memory_total_source is None):
        fail("memory_total_mib needs its memory_total_source (a public nvidia-smi printout), and only it")
    if gpu.memory_total_mib is not None and not 0.85 * gpu.memory_gb * 1024 <= gpu.memory_total_mib <= (
            1.1 * gpu.memory_gb * 1024):
        fail(f"memory_total_mib {gpu.memory_total_mib} is not near the nominal {gpu.memory_gb:g} GB")
    whole = gpu.memory_total_mib / 1024 if gpu.memory_total_mib is not None else gpu.memory_gb
    for profile in gpu.mig_profiles:
        if profile.memory_gib is not None and not 0.8 * profile.memory_gb <= profile.memory_gib <= profile.memory_gb:
            fail(f"MIG {profile.name}: memory_gib {profile.memory_gib} is not just under its nominal {profile.memory_gb}")
        if profile.memory_gib is not None and profile.memory_source is None:
            fail(f"MIG {profile.name}: memory_gib needs its source (a public `nvidia-smi mig -lgip` listing)")
        # a slice of the board cannot hold more than the board: H100 NVL's 7g.94gb read as its nominal 94 GiB held
        # more than the whole GPU's 93.58, and `lilou llm` fitted one more sequence on the slice than on the GPU
        if (profile.memory_gib if profile.memory_gib is not None else profile.memory_gb) > whole + 1e-9:
            fail(f"MIG {profile.name}: {profile.memory_gib or profile.memory_gb} GiB is more than the whole GPU's "
                 f"{whole:.2f} GiB; give its memory_gib from a public `nvidia-smi mig -lgip` listing")


def _parse_mig_table(table: dict[str, Any]) -> tuple[MIGProfile, ...]:
    """Profiles of one MIG table; a slice's L2 and bandwidth shares follow its memory slices."""
    total = table["memory_slices"]
    return tuple(
        MIGProfile(
            **{key: value for key, value in row.items() if key != "memory_source"},
            l2_fraction=row["memory_slices"] / total,
            bandwidth_fraction=row["memory_slices"] / total,
            # a row's own listing, where the table's has no row for it (H100 NVL: the 3g and 7g slices)
            memory_source=row.get("memory_source", table.get("memory_source")) if "memory_gib" in row else None,
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
