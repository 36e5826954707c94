"""Typed loaders for the NeuSight measurements (per-kernel and end-to-end latencies).

Per-operator rows become a columnar :class:`KernelTable` (numpy arrays, one row
view :class:`KernelMeasurement` at a time). FLOPs and bytes are not in the data: the
latency stage derives them from the ONNX nodes that express the same PyTorch call
(:mod:`lilou.latency.kernel_model.measured`), so this module stays a leaf that imports no stage.

Column meanings (datasets/README.md): ``linear`` is ``nn.Linear(N, K, bias=True)``
on [B,M,N]; ``bmm`` is [B,M,N] x [B,N,K]; ``conv`` is ``nn.Conv2d`` without bias on a
square input; ``add/mul/div/pow`` combine two [B,H] tensors, ``addu/...`` a [B,H]
tensor and a Python scalar; ``ln`` normalises the last dim; ``softmax`` the last dim.
Latencies are in milliseconds (FP32, TF32 off, PyTorch 2.1 eager).
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from lilou.data.kernel_schema import is_held_back
from lilou.data.paths import dataset_dir, dataset_file, fetch_hint
from lilou.errors import LilouInputError, MissingDataError

DATASET = "neusight"

# NeuSight OPName -> (kernel family, ONNX op of the equivalent node)
OPS: dict[str, tuple[str, str]] = {
    "linear": ("gemm", "MatMul"), "bmm": ("gemm", "MatMul"), "conv": ("conv", "Conv"),
    "add": ("elementwise", "Add"), "mul": ("elementwise", "Mul"),
    "div": ("elementwise", "Div"), "pow": ("elementwise", "Pow"),
    "addu": ("elementwise", "Add"), "mulu": ("elementwise", "Mul"),
    "divu": ("elementwise", "Div"), "powu": ("elementwise", "Pow"),
    "relu": ("elementwise", "Relu"), "gelu": ("elementwise", "Gelu"), "tanh": ("elementwise", "Tanh"),
    "ln": ("layernorm", "LayerNormalization"), "softmax": ("softmax", "Softmax"),
}
SCALAR_OPS = frozenset({"addu", "mulu", "divu", "powu"})   # tensor with a Python scalar
BINARY_OPS = frozenset({"add", "mul", "div", "pow"})       # tensor with a tensor of the same shape

# Shape columns of each family: CSV column -> key in KernelMeasurement.shape.
# Conv names are cleaned up (the CSV spells ``Kernel_Szie``).
GEMM_COLUMNS = {"B": "B", "M": "M", "N": "N", "K": "K"}
CONV_COLUMNS = {"B": "B", "Input_Channel": "C_in", "Output_Channel": "C_out", "Kernel_Szie": "kernel_size",
                "Input_Size": "input_size", "Stride": "stride", "Padding": "padding"}
VECTOR_COLUMNS = {"B": "B", "H": "H"}
SHAPE_COLUMNS = {"gemm": GEMM_COLUMNS, "conv": CONV_COLUMNS, "elementwise": VECTOR_COLUMNS,
                 "layernorm": VECTOR_COLUMNS, "softmax": VECTOR_COLUMNS}
SHAPE_KEYS: tuple[str, ...] = tuple(dict.fromkeys(k for cols in SHAPE_COLUMNS.values() for k in cols.values()))

# kernels/test files and the ops in each. ``vec.csv`` is left out on purpose: it is
# elem.csv + ln.csv + softmax.csv concatenated (same rows), reading it would count them twice.
# There is no conv test file.
TEST_FILES: dict[str, tuple[str, ...]] = {
    "bmm": ("bmm",), "linear": ("linear",), "ln": ("ln",), "softmax": ("softmax",),
    "elem": tuple(op for op, (family, _) in OPS.items() if family == "elementwise"),
}
SPLITS = ("train", "test")


# ------------------------------------------------------------------------ row views


@dataclass(frozen=True)
class KernelMeasurement:
    """One measured operator call."""

    op: str                          # NeuSight OPName (linear, bmm, conv, add, addu, ..., ln, softmax)
    family: str                      # gemm | conv | elementwise | layernorm | softmax
    shape: dict[str, int]            # B,M,N,K | B,C_in,C_out,kernel_size,input_size,stride,padding | B,H
    device: str                      # the raw ``Device`` string, e.g. "Tesla T4"
    gpu: str                         # canonical name in the GPU database, e.g. "t4"
    latency_ms: float
    kernel_name: str                 # the main kernel launched
    kernels: tuple[str, ...]         # every kernel launched, when the file records it (else empty)
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    warps_per_sm: float
    blocks_per_sm: float
    large: bool = False              # test files: NeuSight's "large" shapes


@dataclass(frozen=True)
class KernelTable:
    """Columnar per-kernel measurements; ``table[i]`` gives a :class:`KernelMeasurement`.

    ``shape`` holds one int64 column per key of :data:`SHAPE_KEYS`, -1 where the key
    does not apply to the row's op.
    """

    split: str
    op: np.ndarray
    family: np.ndarray
    device: np.ndarray
    gpu: np.ndarray
    latency_ms: np.ndarray
    kernel_name: np.ndarray          # object array of str
    kernels: np.ndarray              # object array of tuple[str, ...]
    grid: np.ndarray                 # (n, 3) int64
    block: np.ndarray                # (n, 3) int64
    warps_per_sm: np.ndarray
    blocks_per_sm: np.ndarray
    large: np.ndarray                # bool
    shape: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.latency_ms)

    def __getitem__(self, index: int) -> KernelMeasurement:
        i = int(index)
        op, family = str(self.op[i]), str(self.family[i])
        return KernelMeasurement(
            op=op, family=family,
            shape={key: int(self.shape[key][i]) for key in SHAPE_COLUMNS[family].values()},
            device=str(self.device[i]), gpu=str(self.gpu[i]), latency_ms=float(self.latency_ms[i]),
            kernel_name=self.kernel_name[i], kernels=self.kernels[i],
            grid=tuple(int(v) for v in self.grid[i]), block=tuple(int(v) for v in self.block[i]),  # type: ignore[arg-type]
            warps_per_sm=float(self.warps_per_sm[i]), blocks_per_sm=float(self.blocks_per_sm[i]),
            large=bool(self.large[i]))

    def __iter__(self) -> Iterator[KernelMeasurement]:
        return (self[i] for i in range(len(self)))

    def take(self, rows: np.ndarray | Sequence[int]) -> KernelTable:
        """A new table with the given rows (indices or a boolean mask)."""
        rows = np.asarray(rows)
        columns = {name: value[rows] for name, value in self._columns().items()}
        return KernelTable(split=self.split, shape={k: v[rows] for k, v in self.shape.items()}, **columns)

    def _columns(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in _ARRAY_FIELDS}


_ARRAY_FIELDS = ("op", "family", "device", "gpu", "latency_ms", "kernel_name", "kernels", "grid", "block",
                 "warps_per_sm", "blocks_per_sm", "large")


# --------------------------------------------------------------------------- loading


@cache
def _gpu_name(device: str) -> str:
    from lilou.hardware import gpu_for_dataset_device

    return gpu_for_dataset_device(device).name


def _device_matcher(devices: Iterable[str] | None) -> Callable[[str], bool]:
    """A predicate on raw Device strings.

    Each wanted device may be a raw ``Device`` string ("Tesla T4"), its file-name
    form ("Tesla_T4") or any name or alias of a GPU in the database ("t4").
    """
    if devices is None:
        return lambda device: True
    from lilou.hardware import find_gpu

    raw, gpus = set(), set()
    for name in devices:
        raw.add(name.strip().replace("_", " ").lower())
        try:
            gpus.add(find_gpu(name).name)
        except LilouInputError:
            try:
                gpus.add(_gpu_name(name.replace("_", " ")))
            except LilouInputError:  # every device of the data is in the database: a typo
                raise LilouInputError(f"unknown device {name!r}: use a Device string of the data "
                                      "(e.g. 'Tesla T4') or a GPU name from `lilou gpus`") from None

    @cache
    def match(device: str) -> bool:
        return device.lower() in raw or _gpu_name(device) in gpus

    return match


_LAUNCH_COLUMNS = ("Warps per SM", "Blocks per SM", "Grid x", "Grid y", "Grid z", "Block x", "Block y", "Block z")


def _ints(values: Sequence[str]) -> np.ndarray:
    return np.fromiter(map(int, values), dtype=np.int64, count=len(values))


def _floats(values: Sequence[str]) -> np.ndarray:
    return np.fromiter(map(float, values), dtype=np.float64, count=len(values))


def _objects(values: Sequence) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def _read_file(path: Path, ops: frozenset[str], match_device, limit: int | None) -> dict[str, Any] | None:
    """The matching rows of one kernel CSV as column arrays (None when no row matches)."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            return None
        index = {name: i for i, name in enumerate(header)}
        missing = [c for c in ("OPName", "Device", "Latency", "Kernel Name", *_LAUNCH_COLUMNS) if c not in index]
        if missing:
            raise LilouInputError(f"{path}: columns {missing} missing; is this a NeuSight kernel file?")
        i_op, i_dev, i_latency = index["OPName"], index["Device"], index["Latency"]
        rows, unusable, held = [], 0, {}
        for row in reader:
            if len(row) <= max(i_op, i_dev) or row[i_op] not in ops or not match_device(row[i_dev]):
                continue
            if len(row) != len(header) or not _usable_latency(row[i_latency]):
                unusable += 1  # a cut-off line, or a latency that is empty, not a number, not finite or not positive
                continue
            if held.setdefault(row[i_dev], _held_back_device(row[i_dev])):
                continue  # H100 and L4 rows: held back for independent evaluation, as the kernel table holds them
            rows.append(row)
            if limit is not None and len(rows) >= limit:
                break
    if unusable:
        warnings.warn(f"{path}: {unusable} row(s) without a usable latency (empty, not a number, not finite, not "
                      "positive, or a line cut off) left out", stacklevel=3)
    if not rows:
        return None
    try:
        return _columns(path, rows, index)
    except (ValueError, OverflowError) as error:
        raise LilouInputError(f"{path}: a shape or launch field is not a whole number ({error}); is the file "
                              "damaged?") from None


def _usable_latency(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return math.isfinite(value) and value > 0


def _held_back_device(device: str) -> bool:
    try:
        return is_held_back(_gpu_name(device))
    except LilouInputError:
        return False  # a device the database does not know is named when its rows are used


def _columns(path: Path, rows: list[list[str]], index: dict[str, int]) -> dict[str, Any]:
    """The rows of one kernel CSV as column arrays."""
    i_op, i_dev = index["OPName"], index["Device"]
    columns = list(zip(*rows))
    op = columns[i_op]
    unknown = set(op) - set(OPS)
    if unknown:
        raise LilouInputError(f"{path}: unknown OPName {sorted(unknown)}")
    families = {OPS[o][0] for o in op}
    n = len(rows)
    shape = {key: np.full(n, -1, dtype=np.int64) for key in SHAPE_KEYS}
    family = np.array([OPS[o][0] for o in op], dtype="U11")
    for fam in families:
        mapping = SHAPE_COLUMNS[fam]
        missing = [c for c in mapping if c not in index]
        if missing:
            raise LilouInputError(f"{path}: shape columns {missing} of {fam} ops missing")
        mask = family == fam
        for csv_column, key in mapping.items():
            values = columns[index[csv_column]]
            shape[key][mask] = _ints(values if len(families) == 1 else [v for v, m in zip(values, mask) if m])
    launch = {c: columns[index[c]] for c in _LAUNCH_COLUMNS}
    # "Kernels" is ";"-joined with a leading ";"; empty or absent when not recorded.
    split_kernels: dict[str, tuple[str, ...]] = {}
    for field_text in set(columns[index["Kernels"]]) if "Kernels" in index else {""}:
        split_kernels[field_text] = tuple(k for k in field_text.split(";") if k)
    kernels = [split_kernels[k] for k in columns[index["Kernels"]]] if "Kernels" in index else [()] * n
    device = np.array(columns[i_dev])
    names, inverse = np.unique(device, return_inverse=True)
    return {
        "op": np.array(op, dtype="U8"), "family": family, "device": device,
        "gpu": np.array([_gpu_name(d) for d in names])[inverse],
        "latency_ms": _floats(columns[index["Latency"]]),
        "kernel_name": _objects([sys.intern(k) for k in columns[index["Kernel Name"]]]),
        "kernels": _objects(kernels),
        "grid": np.stack([_ints(launch[c]) for c in _LAUNCH_COLUMNS[2:5]], axis=1),
        "block": np.stack([_ints(launch[c]) for c in _LAUNCH_COLUMNS[5:8]], axis=1),
        "warps_per_sm": _floats(launch["Warps per SM"]),
        "blocks_per_sm": _floats(launch["Blocks per SM"]),
        "large": (np.array(columns[index["large"]]) == "True") if "large" in index else np.zeros(n, dtype=bool),
        "shape": shape,
    }


def _concat(split: str, chunks: list[dict[str, Any]]) -> KernelTable:
    if not chunks:
        empty = {name: np.empty(0, dtype=object if name in ("kernel_name", "kernels") else np.int64)
                 for name in _ARRAY_FIELDS}
        empty.update(grid=np.empty((0, 3), dtype=np.int64), block=np.empty((0, 3), dtype=np.int64),
                     op=np.empty(0, dtype="U8"), family=np.empty(0, dtype="U11"), device=np.empty(0, dtype=str),
                     gpu=np.empty(0, dtype=str), latency_ms=np.empty(0), large=np.empty(0, dtype=bool))
        return KernelTable(split=split, shape={k: np.empty(0, dtype=np.int64) for k in SHAPE_KEYS}, **empty)
    columns = {name: np.concatenate([c[name] for c in chunks]) for name in _ARRAY_FIELDS}
    shape = {key: np.concatenate([c["shape"][key] for c in chunks]) for key in SHAPE_KEYS}
    return KernelTable(split=split, shape=shape, **columns)


def kernel_files(split: str, ops: Iterable[str] | None = None,
                 data_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """The CSV files of a split that may hold rows of ``ops`` (all ops if None)."""
    if split not in SPLITS:
        raise LilouInputError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    wanted = _check_ops(ops)
    root = dataset_dir(DATASET, data_dir)
    if split == "test":
        return [dataset_file(DATASET, f"kernels/test/{stem}.csv", data_dir)
                for stem, file_ops in TEST_FILES.items() if wanted & set(file_ops)]
    files = []
    for op in sorted(wanted):
        folder = root / "kernels" / "train" / op
        found = sorted(folder.glob("*.csv"))
        if not found:
            raise MissingDataError(f"{DATASET}/kernels/train/{op}/*.csv not found in {root.parent}: "
                                   f"{fetch_hint(DATASET)}")
        files.extend(found)
    return files


def _check_ops(ops: Iterable[str] | None) -> frozenset[str]:
    if ops is None:
        return frozenset(OPS)
    wanted = frozenset(ops)
    unknown = sorted(wanted - set(OPS))
    if unknown:
        raise LilouInputError(f"unknown NeuSight op(s) {', '.join(unknown)}; known: {', '.join(OPS)}")
    return wanted


def load_kernels(split: str = "train", ops: Iterable[str] | None = None, devices: Iterable[str] | None = None,
                 data_dir: str | os.PathLike[str] | None = None, limit_per_file: int | None = None) -> KernelTable:
    """Per-kernel measurements of one split as a :class:`KernelTable`.

    ``ops``: NeuSight op names (default all). ``devices``: raw ``Device`` strings
    ("Tesla T4"), their file-name form ("Tesla_T4") or canonical GPU names ("t4").
    ``limit_per_file``: keep at most this many matching rows of each CSV file.
    """
    wanted = _check_ops(ops)
    match = _device_matcher(devices)
    chunks = []
    for path in kernel_files(split, wanted, data_dir):
        # Training files hold one device each, named after it: skip the others unread.
        if split == "train" and not match(path.stem.replace("_", " ")):
            continue
        chunk = _read_file(path, wanted, match, limit_per_file)
        if chunk is not None:
            chunks.append(chunk)
    return _concat(split, chunks)


# ----------------------------------------------------------------------- end to end


@dataclass(frozen=True)
class E2EMeasurement:
    """End-to-end forward latency of one Hugging Face model (FP32, no grad)."""

    gpu: str              # canonical GPU name
    device: str           # raw device name, e.g. "Tesla T4"
    model: str            # NeuSight model config name (model_configs/<model>.json)
    seq: int
    batch: int
    latency_ms: float     # ``e2e_latency``
    fusion: bool          # True: torch.compile (``*-fusion.json``); False: eager
    path: Path
    node_csv: Path | None  # per-FX-node latencies beside it, when present
    layers: int | None = None  # ``num_layer``: the node CSV times the first layer, which repeats this often


_E2E_NAME = re.compile(r"^(?P<model>.+)-inf-(?P<seq>\d+)-(?P<batch>\d+)(?P<fusion>-fusion)?\.json$")


def _device_of_folder(folder: str, configs: dict[str, DeviceConfig]) -> str:
    for config in configs.values():
        if config.file_stem == folder:
            return config.device
    return folder.replace("_", " ")


def load_e2e(data_dir: str | os.PathLike[str] | None = None) -> list[E2EMeasurement]:
    """Every ``e2e/<GPU>/<model>-inf-<seq>-<batch>[-fusion].json`` label, sorted by GPU, model, seq, batch."""
    root = dataset_dir(DATASET, data_dir)
    e2e = root / "e2e"
    if not e2e.is_dir():
        raise MissingDataError(f"{DATASET}/e2e not found in {root.parent}: "
                               f"{fetch_hint(DATASET)}")
    configs = load_device_configs(data_dir)
    labels = []
    for path in sorted(e2e.glob("*/*.json")):
        match = _E2E_NAME.match(path.name)
        if not match:
            continue
        with path.open(encoding="utf-8") as handle:
            record = json.load(handle)
        latency = float(record["e2e_latency"])
        layers = int(record["num_layer"]) if record.get("num_layer") else None
        device = _device_of_folder(path.parent.name, configs)
        node_csv = path.with_suffix(".csv")
        labels.append(E2EMeasurement(
            gpu=_gpu_name(device), device=device, model=match["model"], seq=int(match["seq"]),
            batch=int(match["batch"]), latency_ms=latency, fusion=match["fusion"] is not None, path=path,
            node_csv=node_csv if not match["fusion"] and node_csv.is_file() else None, layers=layers))
    return labels


# -------------------------------------------------------------------- device configs


@dataclass(frozen=True)
class DeviceConfig:
    """NeuSight's ``device_configs/<device>.json``, with units in the names."""

    device: str            # raw name, e.g. "NVIDIA A100 80GB PCIe"
    gpu: str               # canonical GPU name
    file_stem: str         # "NVIDIA_A100_80GB_PCIe"
    memory_gb: float       # Dev_Mem
    memory_bandwidth_gbs: float  # Mem_Bw
    sms: int               # Num_Sm
    cores_per_sm: int      # Core_Per_SM
    clock_mhz: float       # Freq
    fp32_gflops: float     # SingleFLOPs
    l2_mb: float           # L2Cache


def load_device_configs(data_dir: str | os.PathLike[str] | None = None) -> dict[str, DeviceConfig]:
    """Device configs keyed by raw device name."""
    root = dataset_dir(DATASET, data_dir)
    paths = sorted((root / "device_configs").glob("*.json"))
    if not paths:
        raise MissingDataError(f"{DATASET}/device_configs/*.json not found in {root.parent}: "
                               f"{fetch_hint(DATASET)}")
    configs = {}
    for path in paths:
        with path.open(encoding="utf-8") as handle:
            raw: dict[str, Any] = json.load(handle)
        device = raw.get("Device") or path.stem.replace("_", " ")
        configs[device] = DeviceConfig(
            device=device, gpu=_gpu_name(device), file_stem=path.stem, memory_gb=float(raw["Dev_Mem"]),
            memory_bandwidth_gbs=float(raw["Mem_Bw"]), sms=int(raw["Num_Sm"]), cores_per_sm=int(raw["Core_Per_SM"]),
            clock_mhz=float(raw["Freq"]), fp32_gflops=float(raw["SingleFLOPs"]), l2_mb=float(raw["L2Cache"]))
    return configs
