"""DeepBench's upstream workbooks (``results/**/DeepBench_NV_<GPU>.xlsx``) read as they are.

:func:`read_workbooks` turns the twelve NVIDIA workbooks of baidu-research/DeepBench into three
tables, ``gemm``, ``conv`` and ``rnn``, with the columns of the mirror's derived ``*_tidy.csv``
files (``datasets/deepbench/README.md`` says what each column means). Those CSVs are not
downloadable, so ``lilou data fetch deepbench`` users get only the workbooks; this module is
what lets Lilou use them.

Workbook layout
---------------
Each workbook has one or more result sheets and a ``Specs`` sheet (``GPU Model``, ``CUDA
Version``, ``Cudnn Version`` ... as label/value pairs in columns A and B). A result sheet starts
with ``Precision`` in A1 and its label in B1 (B2 continues it on the inference sheets); the
label says the precision of every section (:data:`PRECISIONS`). Then come sections, each
titled in column A (``Dense Matrix Multiplication``, ``Sparse Matrix Multiplication``,
``Convolution``, ``Recurrent Layers - Vanilla / LSTM / GRU``, ``All-Reduce``), each with its
own header row (on the title row, or on the next row for ``Convolution``) and data rows down
to the next title. Column B of a data row holds the application (``app``) where upstream
names one. The columns of a section are found by their header text, never by their letter:
the workbooks do not agree on the order (the convolution headers of 1080Ti, P100 and TitanXp
train read ``R, S, pad_h, pad_w, Vertical stride, Horizontal stride``; the others ``S, R,
pad_w, pad_h, Horizontal stride, Vertical stride``).

Rules (the ones the tidy CSVs were built with)
----------------------------------------------
* Numbers are the cells' cached values (``data_only=True``), taken as they are (no rounding).
* A row without its main time (GEMM time, forward time of a convolution or RNN) is dropped:
  empty, an Excel error (``#DIV/0!``) or ``N/A``. Other measurement cells without a value
  (``N/A*``: no backward wrt inputs for first layers, a blank) become null.
* A shape listed more than once in a section keeps its first listing; ``listings`` counts
  the listings with a time (convolution: 4 repeats per sheet, 60 in all; none for GEMM/RNN).
* Convolution ``out_h``/``out_w`` are ⌊(in + 2·pad − filter)/stride⌋ + 1, not upstream's P/Q
  columns (their meaning swaps between workbooks and some are fractional). S is the filter
  width and R the filter height in every workbook.
* All-Reduce sections (multi-GPU, mostly empty) are not read.
* Cell text is kept verbatim, including upstream's typos (``fwd_algo`` ``LICIT_PRECOMP_GEMM``
  on two T4 FP32 Speaker-ID rows, ``Results - Psuedo FP16``).

The result equals the tidy CSVs row for row (``tests/test_deepbench_xlsx.py`` checks every
column of every row): no row of the CSVs is left unreproduced.

An unreadable or unexpected workbook raises :class:`~lilou.errors.LilouInputError` with one
line that names the file (and the sheet, section and row where that helps).
"""
from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow as pa

from lilou.data.paths import fetch_hint
from lilou.errors import LilouInputError, MissingDataError

DATASET = "deepbench"
WORKBOOK_GLOB = "results/**/DeepBench_NV_*.xlsx"
GPU_PREFIX = "DeepBench_NV_"
SUITES = {"train": "train", "inference": "inference"}   # first folder under results/ -> suite
SPECS_SHEET = "Specs"

#: Precision label of a result sheet (B1, then B2 joined with " ; ") -> precision of each section kind.
PRECISIONS: dict[str, dict[str, str]] = {
    "Float": dict.fromkeys(("dense", "sparse", "conv", "rnn"), "fp32"),
    "16 bit inputs, 32 bit multiplication, 32 bit addition":
        dict.fromkeys(("dense", "sparse", "conv", "rnn"), "fp16_storage_fp32_math"),
    "16 bit inputs, 16 bit multiplication, 32 bit addition":
        dict.fromkeys(("dense", "sparse", "conv", "rnn"), "fp16_mixed"),
    "GEMM, Conv: Int8 multiplication, 32 bit accumulation ; Sparse Ops, RNN: single precision":
        {"dense": "int8", "conv": "int8", "sparse": "fp32", "rnn": "fp32"},
}

#: Section title in column A -> (table, kind); All-Reduce is recognised and skipped.
SECTIONS: dict[str, tuple[str, str] | None] = {
    "dense matrix multiplication": ("gemm", "dense"),
    "sparse matrix multiplication": ("gemm", "sparse"),
    "convolution": ("conv", "conv"),
    "recurrent layers - vanilla": ("rnn", "vanilla"),
    "recurrent layers - lstm": ("rnn", "lstm"),
    "recurrent layers - gru": ("rnn", "gru"),
    "all-reduce": None,
}

_CONTEXT = [("gpu", pa.string()), ("gpu_model", pa.string()), ("suite", pa.string()), ("precision", pa.string()),
            ("app", pa.string())]
_SOURCE = [("listings", pa.int64()), ("sheet", pa.string()), ("precision_label", pa.string()), ("cuda", pa.string()),
           ("cudnn", pa.string()), ("source_file", pa.string())]
_I, _F, _S = pa.int64(), pa.float64(), pa.string()
SCHEMAS: dict[str, pa.Schema] = {
    "gemm": pa.schema(_CONTEXT + [
        ("kind", _S), ("M", _I), ("N", _I), ("K", _I), ("a_t", _S), ("b_t", _S), ("sparsity", _F),
        ("time_ms", _F), ("tflops", _F), ("dense_time_ms", _F), ("speedup_vs_dense", _F), ("padded", _I)] + _SOURCE),
    "conv": pa.schema(_CONTEXT + [
        ("batch", _I), ("in_c", _I), ("in_h", _I), ("in_w", _I), ("out_c", _I), ("filter_h", _I), ("filter_w", _I),
        ("pad_h", _I), ("pad_w", _I), ("stride_h", _I), ("stride_w", _I), ("out_h", _I), ("out_w", _I),
        ("fwd_ms", _F), ("bwd_inputs_ms", _F), ("bwd_params_ms", _F), ("total_ms", _F),
        ("fwd_tflops", _F), ("bwd_inputs_tflops", _F), ("bwd_params_tflops", _F), ("fwd_algo", _S),
        ("padded", _I)] + _SOURCE),
    "rnn": pa.schema(_CONTEXT + [
        ("cell", _S), ("hidden", _I), ("batch", _I), ("timesteps", _I),
        ("fwd_ms", _F), ("bwd_inputs_ms", _F), ("bwd_weights_ms", _F), ("bwd_ms", _F), ("total_ms", _F),
        ("fwd_tflops", _F), ("bwd_inputs_tflops", _F), ("bwd_weights_tflops", _F), ("bwd_tflops", _F)] + _SOURCE),
}

#: Text in a measurement cell that means "no value".
_NO_VALUE = frozenset({"", "n/a", "n/a*", "-"})
_TRANSPOSES = frozenset({"N", "T"})

Row = tuple[Any, ...]


# ----------------------------------------------------------------------------- public API


def read_workbooks(folder: Path) -> dict[str, pa.Table]:
    """{"gemm": ..., "conv": ..., "rnn": ...} parsed from <folder>/results/**/DeepBench_NV_*.xlsx

    ``folder`` is the dataset folder (``<data root>/deepbench``). Rows come in workbook order
    (workbooks sorted by path, then sheet, section and row), one per GPU x suite x precision x
    shape; the columns are :data:`SCHEMAS`.
    """
    folder = Path(folder)
    paths = sorted(folder.glob(WORKBOOK_GLOB), key=lambda p: p.relative_to(folder).as_posix())
    if not paths:
        raise MissingDataError(f"no {WORKBOOK_GLOB} under {folder}: {fetch_hint(DATASET)}")
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in SCHEMAS}
    for path in paths:
        for table, table_rows in _parse_workbook(folder, path).items():
            rows[table].extend(table_rows)
    return {name: pa.Table.from_pylist(rows[name], schema=schema) for name, schema in SCHEMAS.items()}


# ----------------------------------------------------------------------------- workbooks and sheets


@dataclass(frozen=True)
class _Where:
    """Names a place in a workbook for error messages: ``deepbench/<file>, sheet 'X', row 12``."""

    file: str
    sheet: str | None = None

    def error(self, message: str, row: int | None = None) -> LilouInputError:
        place = self.file if self.sheet is None else f"{self.file}, sheet {self.sheet!r}"
        if row is not None:
            place += f", row {row}"
        return LilouInputError(f"{place}: {message}")


@dataclass(frozen=True)
class _Sheet:
    """What the rows of one result sheet share (the leading columns and the trailing source columns)."""

    gpu: str
    gpu_model: str
    suite: str
    sheet: str
    precision_label: str
    precisions: dict[str, str]
    cuda: str
    cudnn: str
    source_file: str

    def row(self, kind: str, app: str | None, fields: dict[str, Any], listings: int) -> dict[str, Any]:
        precision = self.precisions["rnn" if kind in ("vanilla", "lstm", "gru") else kind]
        return {"gpu": self.gpu, "gpu_model": self.gpu_model, "suite": self.suite, "precision": precision,
                "app": app, **fields, "listings": listings, "sheet": self.sheet,
                "precision_label": self.precision_label, "cuda": self.cuda, "cudnn": self.cudnn,
                "source_file": self.source_file}


def _read_cells(path: Path, where: _Where) -> dict[str, list[Row]]:
    """Every sheet's rows of cached cell values, read in one go so that damage surfaces here, not mid-parse."""
    import openpyxl   # imported here: only this reader needs it

    try:
        with warnings.catch_warnings():   # "Unknown extension is not supported": upstream's Excel extensions
            warnings.filterwarnings("ignore", category=UserWarning, module="openpyxl")
            workbook = openpyxl.load_workbook(path, read_only=True, data_only=True)
            try:
                return {sheet.title: list(sheet.iter_rows(values_only=True)) for sheet in workbook.worksheets}
            finally:
                workbook.close()
    # Only openpyxl runs in this block; a damaged file makes it raise anything from BadZipFile, zlib.error
    # and XML ParseError to KeyError, TypeError or ValueError.
    except Exception as exc:
        detail = (str(exc).splitlines() or [""])[0][:120]
        raise LilouInputError(f"{where.file} is not a readable xlsx workbook: re-fetch it with "
                              f"`lilou data fetch {DATASET}` ({type(exc).__name__}{': ' + detail if detail else ''})"
                              ) from exc


def _parse_workbook(folder: Path, path: Path) -> dict[str, list[dict[str, Any]]]:
    relative = path.relative_to(folder).as_posix()
    where = _Where(f"{DATASET}/{relative}")
    parts = PurePosixPath(relative).parts
    if len(parts) < 3 or parts[1] not in SUITES:
        raise where.error(f"expected results/{{{','.join(SUITES)}}}/.../{GPU_PREFIX}<GPU>.xlsx")
    suite, gpu = SUITES[parts[1]], path.stem[len(GPU_PREFIX):]
    sheets = _read_cells(path, where)
    if SPECS_SHEET not in sheets:
        raise where.error(f"no {SPECS_SHEET!r} sheet (sheets: {', '.join(sheets)})")
    specs = _read_specs(sheets[SPECS_SHEET], _Where(where.file, SPECS_SHEET))
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in SCHEMAS}
    results = [name for name in sheets if name != SPECS_SHEET]
    if not results:
        raise where.error("no result sheet")
    for name in results:
        sheet_where = _Where(where.file, name)
        rows = sheets[name]
        label, body_start = _precision_label(rows, sheet_where)
        if label not in PRECISIONS:
            raise sheet_where.error(f"unknown precision label {label!r}; known: {'; '.join(PRECISIONS)}")
        sheet = _Sheet(gpu=gpu, gpu_model=specs["gpu model"], suite=suite, sheet=name, precision_label=label,
                       precisions=PRECISIONS[label], cuda=specs["cuda version"], cudnn=specs["cudnn version"],
                       source_file=relative)
        for section in _sections(rows, body_start, sheet_where):
            out[section.table].extend(_PARSERS[section.kind](section, sheet, sheet_where))
    return out


def _read_specs(rows: Sequence[Row], where: _Where) -> dict[str, str]:
    """``Specs``: label in column A, value in column B (``GPU Model | NVIDIA T4``)."""
    specs = {_norm(row[0]): _text(row[1]) for row in rows if len(row) >= 2 and isinstance(row[0], str)}
    for key in ("gpu model", "cuda version", "cudnn version"):
        if not specs.get(key):
            raise where.error(f"no {key!r} value in column B")
    return specs


def _precision_label(rows: Sequence[Row], where: _Where) -> tuple[str, int]:
    """``Precision`` in A1, its label in B1 and any continuation in B2, B3 ... (joined with " ; ").

    Returns the label and the index of the first row after it.
    """
    if not rows or _cell(rows[0], 0) is None or _norm(_cell(rows[0], 0)) != "precision":
        raise where.error("expected 'Precision' in cell A1 (not a DeepBench result sheet)")
    parts, index = [], 0
    while index < len(rows) and (index == 0 or _cell(rows[index], 0) is None) and isinstance(_cell(rows[index], 1), str):
        parts.append(" ".join(_cell(rows[index], 1).split()))
        index += 1
    if not parts:
        raise where.error("no precision label in cell B1")
    return " ; ".join(parts), index


@dataclass(frozen=True)
class _Section:
    """One titled section of a result sheet: its header (normalised text -> column index) and data rows."""

    title: str                       # as in the sheet, for messages
    table: str                       # gemm, conv, rnn
    kind: str                        # dense, sparse, conv, vanilla, lstm, gru
    header: dict[str, int]
    header_row: int                  # 1-based row numbers, for messages
    data: list[tuple[int, Row]]


def _sections(rows: Sequence[Row], start: int, where: _Where) -> Iterator[_Section]:
    """Split a result sheet at its section titles (text in column A) into sections.

    The header row is the title row when it has column headers (text from column C on), else
    the next row that has. Data rows run to the next title. Numbers in column A (stray values
    upstream left beside two TitanX_Pascal vanilla-RNN rows) are not titles.
    """
    titles = [i for i in range(start, len(rows)) if isinstance(_cell(rows[i], 0), str) and rows[i][0].strip()]
    for n, title_index in enumerate(titles):
        title = " ".join(rows[title_index][0].split())
        if title.lower() not in SECTIONS:
            raise where.error(f"unknown section title {title!r}; known: {', '.join(SECTIONS)}", title_index + 1)
        end = titles[n + 1] if n + 1 < len(titles) else len(rows)
        if SECTIONS[title.lower()] is None:
            continue
        table, kind = SECTIONS[title.lower()]
        header_index = next((i for i in range(title_index, end) if any(isinstance(v, str) for v in rows[i][2:])), None)
        if header_index is None:
            raise where.error(f"section {title!r} has no header row", title_index + 1)
        header: dict[str, int] = {}
        for column, value in enumerate(rows[header_index]):
            if column >= 2 and isinstance(value, str) and value.strip():
                header.setdefault(_header_key(value), column)
        yield _Section(title, table, kind, header, header_index + 1,
                       [(i + 1, rows[i]) for i in range(header_index + 1, end)])


# ----------------------------------------------------------------------------- section parsers


@dataclass(frozen=True)
class _Column:
    """One output field: the header texts that name it (normalised, see :func:`_header_key`), how to read it."""

    field: str
    headers: tuple[str, ...]
    read: str   # "shape" (integer, part of the row's identity), "flag" (other integer), "value" (measurement), "text"
    required: bool = True


Parsed = tuple[str | None, dict[str, Any]]          # (app, fields) of one data row


def _read_rows(section: _Section, columns: Sequence[_Column], main_time: str, where: _Where) -> Iterator[Parsed]:
    """The (app, fields) of each data row of ``section`` that has its shape and its ``main_time``.

    Rows with no shape cell filled (blank rows, footnotes) are skipped; a row with only some of
    its shape cells is an error. Rows without ``main_time`` are dropped.
    """
    index: dict[str, int | None] = {}
    for column in columns:
        index[column.field] = next((section.header[h] for h in column.headers if h in section.header), None)
        if index[column.field] is None and column.required:
            raise where.error(f"{section.title} section has no {column.headers[0]!r} column "
                              f"(headers: {', '.join(section.header)})", section.header_row)
    shape = [c for c in columns if c.read == "shape"]
    for row_number, row in section.data:
        cells = {c.field: _cell(row, index[c.field]) for c in columns}
        missing = [c.headers[0] for c in shape if _integer(cells[c.field]) is None]
        if len(missing) == len(shape):
            continue
        if missing:
            raise where.error(f"{section.title} row has no integer {', '.join(map(repr, missing))}", row_number)
        fields: dict[str, Any] = {}
        for c in columns:
            value = cells[c.field]
            if c.read in ("shape", "flag"):
                fields[c.field] = _integer(value)
            elif c.read == "value":
                fields[c.field] = _measurement(value, where, row_number, c.headers[0])
            else:
                fields[c.field] = value.strip() if isinstance(value, str) else value
        if fields[main_time] is not None:
            app = _cell(row, 1)
            yield (app.strip() or None) if isinstance(app, str) else None, fields


def _first_listings(parsed: Iterator[Parsed], key: Callable[[dict[str, Any]], tuple]) -> list[tuple[str | None, dict, int]]:
    """The first listing of each shape, with how many times the shape is listed (``listings``)."""
    first: dict[tuple, list] = {}
    for app, fields in parsed:
        entry = first.setdefault(key(fields), [app, fields, 0])
        entry[2] += 1
    return [(app, fields, listings) for app, fields, listings in first.values()]


def _present(columns: Sequence[_Column], section: _Section) -> list[_Column]:
    """Drop the optional ``padded`` column where the section has no ``Padded Kernels`` (training sheets)."""
    return [c for c in columns if c.field != "padded" or "padded kernels" in section.header]


_GEMM_SHAPE = (_Column("M", ("m",), "shape"), _Column("N", ("n",), "shape"), _Column("K", ("k",), "shape"),
               _Column("a_t", ("a transpose",), "text"), _Column("b_t", ("b transpose",), "text"))
_DENSE = _GEMM_SHAPE + (
    _Column("time_ms", ("time",), "value"), _Column("tflops", ("teraflops",), "value", required=False),
    _Column("padded", ("padded kernels",), "flag", required=False),
)
_SPARSE = _GEMM_SHAPE + (
    _Column("sparsity", ("sparsity",), "value"), _Column("time_ms", ("sparse time",), "value"),
    _Column("dense_time_ms", ("dense time",), "value", required=False),
    _Column("tflops", ("sparseteraflops", "sparse teraflops"), "value", required=False),
    _Column("speedup_vs_dense", ("speedup wrt dense",), "value", required=False),
)


def _parse_dense_gemm(section: _Section, sheet: _Sheet, where: _Where) -> list[dict[str, Any]]:
    """``Dense Matrix Multiplication``: headers on the title row.

    ``M | N | K | A Transpose | B Transpose | (note) | Time (msec) | TERAFLOPS`` from column C;
    inference sheets add ``Padded Kernels`` (0/1). Column H holds a note on one row
    (``(both matrices are 2560x7133)``), which is not read.
    """
    return _gemm_rows(section, _read_rows(section, _present(_DENSE, section), "time_ms", where), sheet, where)


def _parse_sparse_gemm(section: _Section, sheet: _Sheet, where: _Where) -> list[dict[str, Any]]:
    """``Sparse Matrix Multiplication`` (inference sheets, FP32): headers on the title row.

    ``M | N | K | A Transpose | B Transpose | Sparsity | | Sparse Time (msec) | Dense Time (msec)
    | SparseTERAFLOPS | Speedup wrt dense`` from column C. ``Sparsity`` is the fraction of zeros
    (0.9, 0.95). T4 lists the shapes without times (``#DIV/0!``), so it has no rows.
    """
    return _gemm_rows(section, _read_rows(section, _SPARSE, "time_ms", where), sheet, where)


def _gemm_rows(section: _Section, rows: Iterator[Parsed], sheet: _Sheet, where: _Where) -> list[dict[str, Any]]:
    out = []
    key = lambda f: (f["M"], f["N"], f["K"], f["a_t"], f["b_t"], f.get("sparsity"))  # noqa: E731
    for app, fields, listings in _first_listings(rows, key):
        for name in ("a_t", "b_t"):
            if fields[name] not in _TRANSPOSES:
                raise where.error(f"{section.title} M={fields['M']} N={fields['N']} K={fields['K']}: "
                                  f"{name} is {fields[name]!r}, expected N or T")
        out.append(sheet.row(section.kind, app, {"kind": section.kind, **fields}, listings))
    return out


_CONV = (
    _Column("batch", ("n",), "shape"), _Column("in_c", ("c",), "shape"), _Column("in_h", ("h",), "shape"),
    _Column("in_w", ("w",), "shape"), _Column("out_c", ("k",), "shape"),
    _Column("filter_h", ("r",), "shape"), _Column("filter_w", ("s",), "shape"),
    _Column("pad_h", ("pad_h",), "shape"), _Column("pad_w", ("pad_w",), "shape"),
    _Column("stride_h", ("vertical stride",), "shape"), _Column("stride_w", ("horizontal stride",), "shape"),
    _Column("fwd_ms", ("forward",), "value"),
    _Column("bwd_inputs_ms", ("wrt inputs",), "value", required=False),
    _Column("bwd_params_ms", ("wrt parameters",), "value", required=False),
    _Column("total_ms", ("total time",), "value", required=False),
    _Column("fwd_tflops", ("fwd teraflops",), "value", required=False),
    _Column("bwd_inputs_tflops", ("bwd inputs teraflops",), "value", required=False),
    _Column("bwd_params_tflops", ("bwd parms teraflops", "bwd params teraflops"), "value", required=False),
    _Column("fwd_algo", ("forward algorithm",), "text", required=False),
    _Column("padded", ("padded kernels",), "flag", required=False),
)
_CONV_SHAPE = tuple(c.field for c in _CONV if c.read == "shape")


def _parse_convolution(section: _Section, sheet: _Sheet, where: _Where) -> list[dict[str, Any]]:
    """``Convolution``: the title alone on its row, headers on the next.

    Train: ``W | H | C | N | K | S (Filter width) | R (Filter height) | pad_w | pad_h | Horizontal
    stride | Vertical stride | Forward (msec) | wrt Inputs (msec) | wrt Parameters (msec) | | P | Q
    | Total Time (msec) | FWD TERAFLOPS | BWD INPUTS TERAFLOPS | BWD PARMS TERAFLOPS | Forward
    Algorithm`` from column C; 1080Ti, P100 and TitanXp put R before S, pad_h before pad_w and
    the vertical stride first. Inference: ``W (input - time) | H (input) | C (channels) | N (batch
    size) | K (number of filters) | S | R | pad_w | pad_h | strides | Forward (msec) | P | Q | FWD
    TERAFLOPS | Padded Kernels``. Input [N, C, H, W], K filters of R x S (height x width).
    ``wrt Inputs`` reads ``N/A*`` for first layers. P/Q are not read (see the module docstring).
    """
    rows = _read_rows(section, _present(_CONV, section), "fwd_ms", where)
    out = []
    for app, fields, listings in _first_listings(rows, lambda f: tuple(f[name] for name in _CONV_SHAPE)):
        if fields["stride_h"] <= 0 or fields["stride_w"] <= 0:
            raise where.error(f"{section.title} with stride {fields['stride_h']}x{fields['stride_w']}")
        fields["out_h"] = (fields["in_h"] + 2 * fields["pad_h"] - fields["filter_h"]) // fields["stride_h"] + 1
        fields["out_w"] = (fields["in_w"] + 2 * fields["pad_w"] - fields["filter_w"]) // fields["stride_w"] + 1
        out.append(sheet.row("conv", app, fields, listings))
    return out


_RNN = (
    _Column("hidden", ("hidden units", "input"), "shape"), _Column("batch", ("n",), "shape"),
    _Column("timesteps", ("timesteps",), "shape"),
    _Column("fwd_ms", ("time forward",), "value"),
    _Column("bwd_inputs_ms", ("time backward wrt inputs",), "value", required=False),
    _Column("bwd_weights_ms", ("time backward wrt weights",), "value", required=False),
    _Column("bwd_ms", ("time backward",), "value", required=False),
    _Column("total_ms", ("total time",), "value", required=False),
    _Column("fwd_tflops", ("teraflops fwd", "fwd teraflops"), "value", required=False),
    _Column("bwd_inputs_tflops", ("teraflops bwd inputs",), "value", required=False),
    _Column("bwd_weights_tflops", ("teraflops bwd params", "teraflops bwd weights"), "value", required=False),
    _Column("bwd_tflops", ("teraflops bwd",), "value", required=False),
)


def _parse_recurrent(section: _Section, sheet: _Sheet, where: _Where) -> list[dict[str, Any]]:
    """``Recurrent Layers - Vanilla / LSTM / GRU``: headers on the title row (``Source`` in B).

    Train: ``Hidden Units | N | Timesteps | | Time Forward (msec) | Time Backward wrt inputs (msec)
    | Time Backward wrt weights (msec) | TERAFLOPS FWD | TERAFLOPS BWD Inputs | TERAFLOPS BWD
    Params (or Weights) | Total Time`` from column C; ``N`` is the batch. On 1080Ti and TitanX
    (LSTM, GRU) the wrt-inputs TFLOPS header is a bare ``TERAFLOPS BWD``. The P100 FP16
    sheet has one ``Time Backward (msec)`` and ``TERAFLOPS FWD | TERAFLOPS BWD`` (-> ``bwd_ms``,
    ``bwd_tflops``) and no total. Inference: ``Input`` (LSTM; the hidden size) or ``Hidden units``
    (GRU) ``| N | Timesteps | | Time Forward (msec) | FWD TERAFLOPS``.
    """
    columns = list(_RNN)
    if "time backward wrt inputs" in section.header and "teraflops bwd inputs" not in section.header:
        columns = [_Column("bwd_inputs_tflops", ("teraflops bwd",), "value", required=False)
                   if c.field == "bwd_inputs_tflops" else c for c in columns if c.field != "bwd_tflops"]
    rows = _read_rows(section, columns, "fwd_ms", where)
    return [sheet.row(section.kind, app, {"cell": section.kind, **fields}, listings)
            for app, fields, listings in _first_listings(rows, lambda f: (f["hidden"], f["batch"], f["timesteps"]))]


_PARSERS: dict[str, Callable[[_Section, _Sheet, _Where], list[dict[str, Any]]]] = {
    "dense": _parse_dense_gemm, "sparse": _parse_sparse_gemm, "conv": _parse_convolution,
    "vanilla": _parse_recurrent, "lstm": _parse_recurrent, "gru": _parse_recurrent,
}


# ----------------------------------------------------------------------------- cells


def _cell(row: Row, index: int | None) -> Any:
    return row[index] if index is not None and index < len(row) else None


def _norm(value: Any) -> str:
    return " ".join(str(value).split()).lower()


def _header_key(text: str) -> str:
    """``'Time Forward (msec) '`` -> ``'time forward'``, ``'K  (number of filters)'`` -> ``'k'``."""
    return _norm(re.sub(r"\([^)]*\)", " ", text))


def _text(value: Any) -> str:
    """A Specs value as text: ``8`` -> ``'8'``, ``'7.5.18'`` unchanged."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def _integer(value: Any) -> int | None:
    """An integer cell (a dimension, a flag), or None when the cell holds none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _measurement(value: Any, where: _Where, row: int, header: str) -> float | None:
    """A measurement cell: a number, or None for a blank, an Excel error (``#DIV/0!``) or ``N/A``."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    if text.lower() in _NO_VALUE or text.startswith("#"):
        return None
    try:
        return float(text)
    except ValueError:
        raise where.error(f"{header!r} cell holds {value!r}, not a number", row) from None
