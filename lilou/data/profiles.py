"""Profile directories (what `lilou profile ops` writes) and `lilou data add`.

An op profile directory holds ``rows.csv`` (one kernel-table row per timed call, in :data:`ROW_COLUMNS`) and
``provenance.json`` (the device as PyTorch and the driver saw it, the software, the command, the settings).
`lilou data add DIR` checks both and copies them into ``<data root>/lilou_profile/<name>/``, where the kernel table
reads every profile as the source ``lilou_profile`` (:mod:`lilou.data.readers.lilou_profile`). Only whole-GPU
profiles are added: CPU dry runs are not GPU data, and the table has no column for a MIG slice yet.

A model profile directory (`lilou profile model`) holds ``label.json`` instead: one end-to-end latency of a zoo
model, read by :func:`read_model_label` for `lilou profile check`.

The files are read as untrusted input: sizes are capped before reading, and every problem is one line naming the
file (and the line of ``rows.csv``).
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lilou.data.kernel_schema import DTYPES, FAMILY_SHAPES, TIMING_METHODS
from lilou.data.paths import data_root
from lilou.errors import LilouInputError

#: The dataset folder under the data root that holds added profiles, and the kernel-table source they form.
PROFILE_DATASET = "lilou_profile"
PROVENANCE_FILE = "provenance.json"
ROWS_FILE = "rows.csv"
FORMAT_VERSION = 1
#: Shape fields a profile fills (the union over the families `lilou profile ops` sweeps).
SHAPE_COLUMNS = ("batch", "m", "n", "k", "in_c", "in_h", "in_w", "out_c", "kernel_h", "kernel_w", "stride_h",
                 "stride_w", "pad_h", "pad_w", "groups", "rows", "cols")
#: The header of ``rows.csv``: kernel-table columns, plus ``device_kind`` (cuda, mig or cpu).
ROW_COLUMNS = ("source", "device", "device_kind", "dtype", "unit", "family", "op", "mode", *SHAPE_COLUMNS, "bias",
               "latency_ms", "latency_stat", "timing", "includes", "framework")
DEVICE_KINDS = ("cuda", "mig", "cpu")
#: A row's latency must lie in this range (ms): 0.1 us is below any kernel launch, 100 s above any single call of
#: the sweep; figures outside it are not measurements.
LATENCY_RANGE_MS = (1e-4, 1e5)
#: What `lilou profile ops` writes (lilou.profile.sweep and runner): each family's ops, the units whose peak bounds
#: the math per dtype (keys of the GPU database's peaks; memory-bound families and CPU rows have none), the timing
#: methods per device kind and the ``bias`` of each op.
SWEEP_OPS = {"gemm": ("linear",), "bmm": ("bmm",), "conv": ("conv",),
             "elementwise": ("add", "mul", "addu", "mulu", "relu", "gelu", "tanh"), "softmax": ("softmax",),
             "norm": ("ln",)}
SWEEP_SHAPES = {"gemm": ("batch", "m", "n", "k"), "bmm": ("batch", "m", "n", "k"),
                "conv": ("batch", "in_c", "in_h", "in_w", "out_c", "kernel_h", "kernel_w", "stride_h", "stride_w",
                         "pad_h", "pad_w", "groups"),
                "elementwise": ("rows", "cols"), "softmax": ("rows", "cols"), "norm": ("rows", "cols")}
SWEEP_UNITS = {"fp32": ("fp32",), "tf32": ("tf32_tensor",), "fp16": ("fp16_tensor", "fp16"), "bf16": ("bf16_tensor",)}
MATH_FAMILIES = ("gemm", "bmm", "conv")
SWEEP_TIMING = {"cuda": ("cuda-events-eager", "cuda-graph-replay"), "mig": ("cuda-events-eager", "cuda-graph-replay"),
                "cpu": ("host-timer-loop",)}
SWEEP_BIAS = {"linear": "true", "bmm": "false"}  # every other op: empty
#: A profile's folder name under lilou_profile/ (--name): one safe path component.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9._+-]{0,99}")
#: How a profile writes its numbers: shape fields as ASCII digits (at most 2**31 - 1, far above any dimension of the
#: sweep), ``latency_ms`` as Python's repr of a float. int() and float() also take "+12", " 12", "1_000" and other
#: scripts' digits, which the kernel table's reader (DuckDB) reads as NULL or as another number.
_INTEGER = re.compile(r"[0-9]{1,10}")
_DECIMAL = re.compile(r"[0-9]{1,20}(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?")
MAX_SHAPE = 2**31 - 1
MAX_ROWS_BYTES = 64 * 2**20
MAX_PROVENANCE_BYTES = 2**20


@dataclass(frozen=True)
class Profile:
    """A checked profile directory."""

    folder: Path
    provenance: dict[str, Any]
    rows: int
    device: str       # the device string PyTorch reported
    kind: str         # cuda, mig or cpu
    units: frozenset[tuple[str, str]] = frozenset()  # the (dtype, unit) pairs of its rows


def write_profile(folder: Path, rows: list[dict], provenance: dict[str, Any]) -> None:
    """Write a profile directory (created if needed; its two files replaced)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ROWS_FILE, "w", newline="", encoding="utf-8") as out:
        writer = csv.DictWriter(out, fieldnames=ROW_COLUMNS, extrasaction="raise")
        writer.writeheader()
        for row in rows:
            writer.writerow({name: _cell(row.get(name)) for name in ROW_COLUMNS})
    (folder / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=1) + "\n", encoding="utf-8")


def _cell(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return "" if value is None else value


def read_profile(folder: str | os.PathLike[str]) -> Profile:
    """Check a profile directory; a one-line :class:`LilouInputError` names the first problem."""
    folder = Path(folder)
    if not folder.is_dir():
        raise LilouInputError(f"{folder}: not a directory (give the --out folder of `lilou profile ops`)")
    provenance = _read_provenance(folder / PROVENANCE_FILE)
    device = provenance["device"]
    rows, units = _check_rows(folder / ROWS_FILE, device["name"], device["kind"], _settings_timing(provenance))
    written = provenance.get("rows")
    if type(written) is int and written != rows:  # written by `lilou profile ops` with its rows
        raise LilouInputError(f"{folder / ROWS_FILE}: {rows} rows, {PROVENANCE_FILE} says {written} were measured "
                              "(a truncated or edited copy?)")
    return Profile(folder, provenance, rows, device["name"], device["kind"], units)


_PROFILE_HOLDS = f"a profile directory of `lilou profile ops` holds {ROWS_FILE} and {PROVENANCE_FILE}"


def _capped_text(path: Path, limit: int, holds: str = _PROFILE_HOLDS) -> str:
    if not path.is_file():
        raise LilouInputError(f"{path}: missing ({holds})")
    if path.stat().st_size > limit:
        raise LilouInputError(f"{path}: larger than {limit // 2**20} MiB, more than any profile writes")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LilouInputError(f"{path}: cannot be read as UTF-8 text ({type(exc).__name__})") from None


def _load_json(path: Path, holds: str = _PROFILE_HOLDS) -> Any:
    """``path``'s JSON (capped): a syntax error, a nesting deep enough to exhaust Python's recursion or an integer
    too long to convert is one line."""
    text = _capped_text(path, MAX_PROVENANCE_BYTES, holds)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise LilouInputError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:  # 5,000-digit integers; [[[[...]]]] 100,000 deep
        reason = "nested too deep" if isinstance(exc, RecursionError) else "a number too long"
        raise LilouInputError(f"{path}: not a file `lilou profile` writes ({reason})") from None


def _read_provenance(path: Path) -> dict[str, Any]:
    provenance = _load_json(path)
    device = provenance.get("device") if isinstance(provenance, dict) else None
    if not isinstance(device, dict) or not isinstance(device.get("name"), str) or not device["name"].strip():
        raise LilouInputError(f"{path}: no device name (\"device\": {{\"name\": ..., \"kind\": ...}})")
    if len(device["name"]) > 200:
        raise LilouInputError(f"{path}: a device name of {len(device['name'])} characters, longer than any PyTorch "
                              "reports")
    if provenance.get("format") != FORMAT_VERSION:
        raise LilouInputError(f"{path}: format {provenance.get('format')!r}, this Lilou reads format {FORMAT_VERSION}")
    if device.get("kind") not in DEVICE_KINDS:
        raise LilouInputError(f"{path}: device kind {device.get('kind')!r} is not one of {', '.join(DEVICE_KINDS)}")
    return provenance


def _settings_timing(provenance: dict[str, Any]) -> tuple[str, ...] | None:
    """The timing methods provenance.json's settings name (None where it names none)."""
    settings = provenance.get("settings")
    timing = settings.get("timing") if isinstance(settings, dict) else None
    if isinstance(timing, list) and timing and all(isinstance(t, str) for t in timing):
        return tuple(timing)
    return None


def _check_rows(path: Path, device: str, kind: str = "cuda",
                timings: tuple[str, ...] | None = None) -> tuple[int, frozenset[tuple[str, str]]]:
    """The number of rows and their (dtype, unit) pairs."""
    reader = csv.reader(_capped_text(path, MAX_ROWS_BYTES).splitlines(), strict=True)
    try:
        lines = list(reader)
    except csv.Error as exc:  # an unterminated quote, a field over csv's 128 KiB limit
        raise LilouInputError(f"{path}, line {reader.line_num}: not CSV as a profile writes it ({exc})") from None
    header = lines[0] if lines else None
    if header is None or tuple(header) != ROW_COLUMNS:
        raise LilouInputError(f"{path}: the header is not that of `lilou profile ops` ({', '.join(ROW_COLUMNS[:4])} ...)")
    count = 0
    seen: dict[tuple[str, ...], int] = {}
    units: set[tuple[str, str]] = set()
    for line, values in enumerate(lines[1:], start=2):
        row = dict(zip(ROW_COLUMNS, values))
        problem = _row_problem(row, len(values), device, kind, timings)
        if problem is None and tuple(values) in seen:
            problem = f"the same row as line {seen[tuple(values)]} (a measurement is written once)"
        if problem:
            raise LilouInputError(f"{path}, line {line}: {problem}")
        seen[tuple(values)] = line
        units.add((row["dtype"], row["unit"]))
        count += 1
    if count == 0:
        raise LilouInputError(f"{path}: no rows (every case was skipped? see the \"skipped\" of {PROVENANCE_FILE})")
    return count, frozenset(units)


def _row_problem(row: dict[str, str], width: int, device: str, kind: str = "cuda",
                 timings: tuple[str, ...] | None = None) -> str | None:
    """What is wrong with one line of rows.csv, checked against what `lilou profile ops` writes, or None."""
    if width != len(ROW_COLUMNS):
        return f"{width} fields, the header has {len(ROW_COLUMNS)}"
    if row["device"] != device:
        return f"device {row['device']!r} differs from the provenance's {device!r}"
    if row["device_kind"] != kind:
        return f"device_kind {row['device_kind']!r} differs from the provenance's {kind!r}"
    if row["source"] != PROFILE_DATASET:
        return f"source {row['source']!r} is not {PROFILE_DATASET!r}"
    if row["family"] not in FAMILY_SHAPES or row["dtype"] not in DTYPES or row["timing"] not in TIMING_METHODS:
        return f"unknown family, dtype or timing ({row['family']!r}, {row['dtype']!r}, {row['timing']!r})"
    family, op, dtype = row["family"], row["op"], row["dtype"]
    if family not in SWEEP_OPS or op not in SWEEP_OPS[family]:
        return f"op {op!r} of family {family!r} is not one `lilou profile ops` times"
    if dtype not in SWEEP_UNITS or (dtype == "tf32" and family not in MATH_FAMILIES):
        return f"dtype {dtype!r} is not one `lilou profile ops` times for {family}"
    if row["mode"] != "forward":
        return f"mode {row['mode']!r}: `lilou profile ops` times forward calls only"
    units = SWEEP_UNITS[dtype] if family in MATH_FAMILIES and kind != "cpu" else ("",)
    if row["unit"] not in units:
        want = " or ".join(repr(u) for u in units) if units != ("",) else "empty"
        return f"unit {row['unit']!r} for a {dtype} {family} row (`lilou profile ops` writes {want})"
    if row["bias"] != SWEEP_BIAS.get(op, ""):
        return f"bias {row['bias']!r} for op {op!r} (`lilou profile ops` writes {SWEEP_BIAS.get(op, 'nothing')!r})"
    if row["timing"] not in SWEEP_TIMING[kind] or (timings is not None and row["timing"] not in timings):
        allowed = timings if timings is not None else SWEEP_TIMING[kind]
        return f"timing {row['timing']!r} is not what the provenance's {kind} run used ({', '.join(allowed)})"
    if not _DECIMAL.fullmatch(row["latency_ms"]):
        return f"latency_ms {row['latency_ms'][:40]!r} is not a positive number"
    latency = float(row["latency_ms"])
    for name in SHAPE_COLUMNS:
        if row[name] != "" and not (_INTEGER.fullmatch(row[name]) and int(row[name]) <= MAX_SHAPE):
            return f"shape field {name} {row[name][:40]!r} is not an integer from 0 to {MAX_SHAPE}"
    sizes = {name: int(row[name]) for name in SHAPE_COLUMNS if row[name] != ""}
    low, high = LATENCY_RANGE_MS
    if not low <= latency <= high:
        return f"latency_ms {row['latency_ms']} is outside {low:g} to {high:g} ms, not a kernel's time"
    wanted = SWEEP_SHAPES[family]
    if set(sizes) != set(wanted):
        missing, extra = [n for n in wanted if n not in sizes], [n for n in sizes if n not in wanted]
        return (f"a {family} row needs its shape fields {', '.join(wanted)}"
                + (f" (missing: {', '.join(missing)})" if missing else "")
                + (f" (not a {family} field: {', '.join(extra)})" if extra else ""))
    if any(size == 0 for name, size in sizes.items() if name not in ("pad_h", "pad_w")):
        return "a zero shape field"
    return None


def add_profile(folder: str | os.PathLike[str], data_dir: str | os.PathLike[str] | None = None,
                name: str | None = None, force: bool = False) -> tuple[Profile, Path, str]:
    """Check ``folder`` and copy it into the data root's profiles; returns the profile, where it went and the
    database GPU its device is."""
    profile = read_profile(folder)
    if profile.kind == "cpu":
        raise LilouInputError(f"{profile.folder}: measured on a CPU ({profile.device}), a dry run of the sweep; only "
                              "GPU profiles enter the kernel table")
    if profile.kind == "mig" or " MIG " in profile.device:
        raise LilouInputError(f"{profile.folder}: measured on a MIG slice ({profile.device}); the kernel table has no "
                              "MIG column yet, so the rows would be taken for the whole GPU's: not added")
    spec = database_gpu(profile.folder, profile.device)
    gpu = spec.name
    problem = _unit_problem(profile.units, spec.compute_capability)
    if problem:
        raise LilouInputError(f"{profile.folder}: {problem} on {gpu} (compute capability {spec.compute_capability}), "
                              "not what `lilou profile ops` measures there: not added")
    target_name = profile.folder.resolve().name if name is None else name
    if not _SAFE_NAME.fullmatch(target_name):
        raise LilouInputError(f"{target_name!r} is not a folder name for the profile: give --name of letters, digits "
                              "and . _ + - (not starting with . or -), at most 100 characters")
    root = data_root(data_dir)
    if root.exists() and not root.is_dir():
        raise LilouInputError(f"--data-dir {root}: not a folder")
    curated = _curated_note(root)
    if curated is not None:
        raise LilouInputError(f"{root} is a curated mirror (it has {curated.relative_to(root)}); `lilou data add` never "
                              "writes into it: choose another data root with --data-dir")
    target = root / PROFILE_DATASET / target_name
    if target.exists() and not force:
        raise LilouInputError(f"{target}: a profile of that name is already added (--name another, or --force)")
    lines = set(_data_lines(profile.folder / ROWS_FILE))
    for other in sorted(target.parent.glob(f"*/{ROWS_FILE}")):
        shared = other.parent.name != target_name and len(lines.intersection(_data_lines(other)))
        if shared:
            raise LilouInputError(f"{profile.folder}: {shared} of its {profile.rows} rows are already added as "
                                  f"{other.parent}; the same measurements twice would count double")
    try:
        target.mkdir(parents=True, exist_ok=True)
        for file in (ROWS_FILE, PROVENANCE_FILE):
            shutil.copyfile(profile.folder / file, target / file)
    except OSError as exc:
        raise LilouInputError(f"cannot write {target}: {exc.strerror or exc}; choose another --data-dir") from None
    return profile, target, gpu


def _data_lines(path: Path) -> list[str]:
    """The lines of an added ``rows.csv`` after its header (each a measurement, written once; capped like any)."""
    try:
        return _capped_text(path, MAX_ROWS_BYTES).splitlines()[1:]
    except LilouInputError:  # a file put there by hand that no profile could be: nothing to compare
        return []


def database_gpu(folder: Path, device: str):
    """The GPU database's entry for the device string PyTorch reported in ``folder``; a name the database lacks, or
    one that stands for several boards (PyTorch names the board, ``NVIDIA A100-SXM4-80GB``, never the family), is a
    one-line :class:`LilouInputError` naming the folder."""
    from lilou.hardware import find_gpu
    from lilou.hardware.database import ambiguity_note, name_family

    try:
        spec = find_gpu(device)
    except LilouInputError:
        raise LilouInputError(f"{folder}: {device[:100]!r} is not in the GPU database (`lilou gpus`); add it to "
                              "lilou/hardware/gpus.yaml with its sources first") from None
    if ambiguity_note(device):
        raise LilouInputError(f"{folder}: {device!r} stands for several GPUs of the database "
                              f"({', '.join(name_family(device))}), not the one measured")
    return spec


def _unit_problem(units: frozenset[tuple[str, str]], compute_capability: str) -> str | None:
    """Rows in a precision the GPU lacks (TF32 and BF16 before compute capability 8.0, which the sweep skips), or
    FP16 math on the wrong unit (tensor cores from 7.0), as lilou.profile.runner derives it."""
    major = int(compute_capability.split(".")[0])
    for dtype, unit in sorted(units):
        if dtype in ("tf32", "bf16") and major < 8:
            return f"{dtype} rows"
        if unit in ("fp16", "fp16_tensor") and unit != ("fp16_tensor" if major >= 7 else "fp16"):
            return f"{dtype} rows on the unit {unit!r}"
    return None


def _curated_note(root: Path) -> Path | None:
    """The first note of a curated mirror (``<source>/SOURCE`` ...) under the data root ``root``, as `lilou data fetch`
    detects one; None when ``root`` is no curated mirror."""
    from lilou.data.fetch import CURATED_NOTES
    from lilou.data.sources import DATASETS

    for dataset in DATASETS:
        for note in CURATED_NOTES:
            if (root / dataset / note).is_file():
                return root / dataset / note
    return None


# ------------------------------------------------------------------------------------------ model labels

LABEL_FILE = "label.json"
MODEL_DTYPES = ("fp32", "fp16", "bf16")
TF32_MODES = ("off", "conv", "on")


@dataclass(frozen=True)
class ModelLabel:
    """One end-to-end latency measured by `lilou profile model` (``label.json``)."""

    folder: Path
    model: str
    batch: int
    seq: int | None
    image_size: int | None
    dtype: str
    tf32: str
    latency_ms: float
    timing: str
    device: str   # the device string PyTorch reported
    kind: str     # cuda, mig or cpu

    @property
    def mig_profile(self) -> str | None:
        """The MIG profile a MIG slice's device string names (``NVIDIA A100-SXM4-80GB MIG 1g.10gb``)."""
        return self.device.split(" MIG ", 1)[1].strip() if " MIG " in self.device else None

    @property
    def gpu_name(self) -> str:
        return self.device.split(" MIG ", 1)[0].strip()


def read_model_label(folder: str | os.PathLike[str]) -> ModelLabel:
    """Check a model profile directory's ``label.json``; a one-line :class:`LilouInputError` names the problem."""
    folder = Path(folder)
    if not folder.is_dir():
        raise LilouInputError(f"{folder}: not a directory (give the --out folder of `lilou profile model`)")
    path = folder / LABEL_FILE
    label = _load_json(path, f"the --out folder of `lilou profile model` holds {LABEL_FILE}")
    problem = _label_problem(label)
    if problem:
        raise LilouInputError(f"{path}: {problem}")
    device = label["device"]
    return ModelLabel(folder, label["model"], label["batch"], label.get("seq"), label.get("image_size"),
                      label["dtype"], label["tf32"], float(label["latency_ms"]), label["timing"], device["name"],
                      device["kind"])


def _label_problem(label: Any) -> str | None:
    if not isinstance(label, dict) or label.get("format") != FORMAT_VERSION:
        return f"not a format-{FORMAT_VERSION} label of `lilou profile model`"
    if not isinstance(label.get("model"), str) or not label["model"]:
        return "no model name"
    for key in ("batch", "seq", "image_size"):
        value = label.get(key)
        if (value is not None or key == "batch") and not (type(value) is int and 0 < value <= 1 << 20):
            return f"{key} {value!r} is not a positive integer"
    if label.get("dtype") not in MODEL_DTYPES or label.get("tf32") not in TF32_MODES:
        return f"dtype {label.get('dtype')!r} or tf32 {label.get('tf32')!r} unknown"
    if label.get("timing") not in TIMING_METHODS:
        return f"unknown timing {label.get('timing')!r}"
    latency = label.get("latency_ms")
    if not (isinstance(latency, int | float) and not isinstance(latency, bool) and math.isfinite(latency)
            and latency > 0):
        return f"latency_ms {latency!r} is not a positive number"
    if not LATENCY_RANGE_MS[0] <= latency <= LATENCY_RANGE_MS[1]:
        return f"latency_ms {latency!r} is outside {LATENCY_RANGE_MS[0]:g} to {LATENCY_RANGE_MS[1]:g} ms, not a measurement"
    device = label.get("device")
    if not isinstance(device, dict) or not isinstance(device.get("name"), str) or device.get("kind") not in DEVICE_KINDS:
        return "no device name and kind"
    return None
