"""DeepBench's upstream xlsx workbooks, read by :mod:`lilou.data.readers.deepbench_xlsx`.

The real-data tests compare the parsed tables with the mirror's derived ``*_tidy.csv`` files
(built by a script we do not have) and skip without the mirror (``datasets_dir``). Every
column of every row matches, in the same order: there is no row of the tidy CSVs that the
reader cannot reproduce. The synthetic-workbook tests need no data.
"""
from __future__ import annotations

import math
import shutil
import time
from pathlib import Path

import openpyxl
import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest

from lilou.data.readers.deepbench_xlsx import SCHEMAS, read_workbooks
from lilou.errors import LilouInputError, MissingDataError

#: Columns that identify a row (one per GPU x suite x precision x shape); unique in each table.
IDENTITY = {
    "gemm": ("gpu", "suite", "sheet", "precision", "kind", "M", "N", "K", "a_t", "b_t", "sparsity"),
    "conv": ("gpu", "suite", "sheet", "precision", "batch", "in_c", "in_h", "in_w", "out_c", "filter_h", "filter_w",
             "pad_h", "pad_w", "stride_h", "stride_w"),
    "rnn": ("gpu", "suite", "sheet", "precision", "cell", "hidden", "batch", "timesteps"),
}
PARSE_BUDGET_S = 10.0   # all 12 workbooks, on a 2-core CI machine


# ----------------------------------------------------------------------------- the real workbooks


@pytest.fixture(scope="module")
def deepbench_dir(datasets_dir: Path) -> Path:
    folder = datasets_dir / "deepbench"
    if not (folder / "results").is_dir():
        pytest.skip(f"no DeepBench workbooks in {folder}")
    return folder


@pytest.fixture(scope="module")
def parsed(deepbench_dir: Path) -> tuple[dict[str, pa.Table], float]:
    start = time.perf_counter()
    tables = read_workbooks(deepbench_dir)
    return tables, time.perf_counter() - start


@pytest.fixture(scope="module")
def tables(parsed) -> dict[str, pa.Table]:
    return parsed[0]


def _tidy(deepbench_dir: Path, name: str) -> pa.Table:
    types = {field.name: field.type for field in SCHEMAS[name]}
    options = pa_csv.ConvertOptions(column_types=types, strings_can_be_null=True)
    return pa_csv.read_csv(deepbench_dir / f"{name}_tidy.csv", convert_options=options)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)   # both are the cell's double: equal in practice
    return a == b


@pytest.mark.parametrize("name", ["gemm", "conv", "rnn"])
def test_tables_equal_the_tidy_csvs_row_for_row(tables, deepbench_dir, name):
    """Every row and column of the tidy CSV, compared on sorted identities; every mismatch is reported."""
    ours, tidy = tables[name], _tidy(deepbench_dir, name)
    assert ours.column_names == tidy.column_names
    assert ours.schema == tidy.schema
    key = IDENTITY[name]
    ours_rows = {tuple(r[c] for c in key): r for r in ours.to_pylist()}
    tidy_rows = {tuple(r[c] for c in key): r for r in tidy.to_pylist()}
    assert len(ours_rows) == ours.num_rows and len(tidy_rows) == tidy.num_rows, "identity columns are not unique"
    problems = [f"only in the workbooks: {k}" for k in sorted(ours_rows.keys() - tidy_rows.keys(), key=str)]
    problems += [f"only in {name}_tidy.csv: {k}" for k in sorted(tidy_rows.keys() - ours_rows.keys(), key=str)]
    for k in sorted(ours_rows.keys() & tidy_rows.keys(), key=str):
        for column in ours.column_names:
            a, b = ours_rows[k][column], tidy_rows[k][column]
            if not _same(a, b):
                problems.append(f"{k} {column}: workbook {a!r} != tidy {b!r}")
    assert not problems, f"{len(problems)} mismatches:\n" + "\n".join(problems[:40])


@pytest.mark.parametrize("name", ["gemm", "conv", "rnn"])
def test_rows_come_in_the_tidy_csvs_order(tables, deepbench_dir, name):
    """Workbooks sorted by path, then sheet, section and row: the order the tidy CSVs were written in."""
    key = IDENTITY[name]
    ours = [tuple(r[c] for c in key) for r in tables[name].select(list(key)).to_pylist()]
    tidy = [tuple(r[c] for c in key) for r in _tidy(deepbench_dir, name).select(list(key)).to_pylist()]
    assert ours == tidy


def test_parsing_all_workbooks_is_fast(parsed):
    tables, seconds = parsed
    assert sum(t.num_rows for t in tables.values()) == 2132 + 1402 + 684
    assert seconds < PARSE_BUDGET_S, f"read_workbooks took {seconds:.1f} s"


def _rows(table: pa.Table, **where) -> list[dict]:
    return [r for r in table.to_pylist() if all(r[k] == v for k, v in where.items())]


def _one(table: pa.Table, **where) -> dict:
    rows = _rows(table, **where)
    assert len(rows) == 1, f"{len(rows)} rows match {where}"
    return rows[0]


def test_counts_per_sheet_match_the_readme(tables):
    gemm, conv, rnn = tables["gemm"], tables["conv"], tables["rnn"]
    train_sheets = [("M40", "fp32"), ("TitanX", "fp32"), ("1080Ti", "fp32"), ("TitanX_Pascal", "fp32"),
                    ("TitanXp", "fp32"), ("P100", "fp32"), ("P100", "fp16_storage_fp32_math"), ("V100", "fp32"),
                    ("V100", "fp16_mixed"), ("T4", "fp32"), ("T4", "fp16_mixed")]
    servers = ["1080Ti", "TitanX_Pascal", "TitanXp"]
    for gpu, precision in train_sheets:
        assert len(_rows(gemm, gpu=gpu, suite="train", precision=precision, kind="dense")) == 160
        assert len(_rows(conv, gpu=gpu, suite="train", precision=precision)) == 90
        if gpu != "T4":   # T4 training RNN cells are empty
            counts = [len(_rows(rnn, gpu=gpu, suite="train", precision=precision, cell=c))
                      for c in ("vanilla", "lstm", "gru")]
            assert counts == [12, 22, 19], (gpu, precision)
    for gpu in [*servers, "T4"]:
        assert len(_rows(gemm, gpu=gpu, suite="inference", precision="int8", kind="dense")) == 75
        assert len(_rows(conv, gpu=gpu, suite="inference", precision="int8")) == 103
    for gpu in servers:
        assert len(_rows(gemm, gpu=gpu, suite="inference", precision="fp32", kind="sparse")) == 24
        assert len(_rows(rnn, gpu=gpu, suite="inference", precision="fp32", cell="lstm")) == 15
        assert len(_rows(rnn, gpu=gpu, suite="inference", precision="fp32", cell="gru")) == 54
    assert not _rows(gemm, gpu="T4", kind="sparse") and not _rows(rnn, gpu="T4")
    # 60 repeated convolution listings dropped (4 per sheet), none for GEMM or RNN
    assert sum(conv.column("listings").to_pylist()) - conv.num_rows == 60
    assert set(gemm.column("listings").to_pylist()) == {1} and set(rnn.column("listings").to_pylist()) == {1}


def test_first_t4_int8_gemm_row(tables):
    row = tables["gemm"].to_pylist()[0]
    assert row == {
        "gpu": "T4", "gpu_model": "NVIDIA T4", "suite": "inference", "precision": "int8", "app": None,
        "kind": "dense", "M": 5124, "N": 700, "K": 2048, "a_t": "N", "b_t": "N", "sparsity": None,
        "time_ms": 0.999, "tflops": pytest.approx(14.706239039039037), "dense_time_ms": None,
        "speedup_vs_dense": None, "padded": 0, "listings": 1, "sheet": "Results - Mixed Precision",
        "precision_label": "GEMM, Conv: Int8 multiplication, 32 bit accumulation ; Sparse Ops, RNN: single precision",
        "cuda": "10.1.243", "cudnn": "7.6.2.24", "source_file": "results/inference/DeepBench_NV_T4.xlsx",
    }
    # the check upstream's TFLOPS column allows: 2·M·N·K / time
    assert row["tflops"] == pytest.approx(2 * 5124 * 700 * 2048 / (row["time_ms"] * 1e-3) / 1e12)


def test_sparse_gemm_row(tables):
    row = _one(tables["gemm"], gpu="1080Ti", kind="sparse", M=7680, N=1, K=2560, sparsity=0.95)
    assert (row["precision"], row["time_ms"], row["dense_time_ms"]) == ("fp32", 0.034, 0.223)
    assert row["speedup_vs_dense"] == pytest.approx(6.5588235294117645)


def test_convolution_columns_follow_the_headers(tables):
    """1080Ti train lists R before S, pad_h before pad_w and the vertical stride first; M40 the other way."""
    shape = {"batch": 4, "in_c": 1, "in_h": 161, "in_w": 700, "out_c": 32, "pad_h": 0, "pad_w": 0,
             "stride_h": 2, "stride_w": 2}
    for gpu in ("1080Ti", "M40"):
        row = _one(tables["conv"], gpu=gpu, suite="train", **shape)
        assert (row["filter_h"], row["filter_w"], row["out_h"], row["out_w"]) == (5, 20, 79, 341), gpu
        assert row["fwd_algo"] == "IMPLICIT_PRECOMP_GEMM" and row["padded"] is None
    ti = _one(tables["conv"], gpu="1080Ti", suite="train", **shape)
    assert (ti["fwd_ms"], ti["bwd_inputs_ms"], ti["bwd_params_ms"]) == (0.122, pytest.approx(0.473), 0.257)
    m40 = _one(tables["conv"], gpu="M40", suite="train", **shape)
    assert m40["bwd_inputs_ms"] is None and m40["bwd_inputs_tflops"] is None   # 'N/A*': a first layer
    assert m40["bwd_params_ms"] == 0.369 and m40["total_ms"] == pytest.approx(0.593)
    # out_h/out_w from the formula even where upstream's P/Q are fractional (78.5, 340.5 on 1080Ti)
    odd = _one(tables["conv"], gpu="T4", suite="inference", batch=1, in_c=1, out_c=64, in_w=700)
    assert (odd["filter_h"], odd["pad_h"], odd["stride_h"], odd["out_h"], odd["out_w"]) == (5, 1, 2, 80, 349)


def test_repeated_convolution_keeps_its_first_listing(tables):
    row = _one(tables["conv"], gpu="TitanXp", suite="inference", batch=1, in_c=256, in_h=14, in_w=14, out_c=1024,
               filter_h=1, stride_h=1)
    assert row["listings"] == 2 and row["fwd_ms"] == 0.015   # sheet rows 193 (0.015) and 196 (0.017)


def test_recurrent_rows(tables):
    rnn = tables["rnn"]
    fp16 = _one(rnn, gpu="P100", precision="fp16_storage_fp32_math", cell="vanilla", hidden=1760, batch=16,
                timesteps=50)
    assert fp16["sheet"] == "Results - Psuedo FP16" and fp16["fwd_ms"] == 5.515
    assert fp16["bwd_ms"] == pytest.approx(3.824) and fp16["bwd_tflops"] == pytest.approx(1.2964351464435147)
    assert fp16["bwd_inputs_ms"] is None and fp16["bwd_weights_ms"] is None and fp16["total_ms"] is None
    # a bare "TERAFLOPS BWD" beside wrt-inputs and wrt-weights times is the wrt-inputs figure
    lstm = _one(rnn, gpu="1080Ti", suite="train", cell="lstm", hidden=512, batch=16, timesteps=25)
    assert lstm["app"] == "Machine Translation" and lstm["bwd_inputs_ms"] == 1.447
    assert lstm["bwd_inputs_tflops"] == pytest.approx(0.5797241188666205) and lstm["bwd_tflops"] is None
    inference = _one(rnn, gpu="1080Ti", suite="inference", cell="lstm", hidden=512, batch=1, timesteps=25)
    assert inference["fwd_ms"] == 0.89 and inference["bwd_inputs_ms"] is None and inference["app"] is None


def test_specs_values_become_text(tables):
    train = _rows(tables["gemm"], gpu="TitanX_Pascal", suite="train")[0]
    assert (train["gpu_model"], train["cuda"], train["cudnn"]) == ("Nvidia TitanX Pascal", "8", "5")   # int cells
    inference = _rows(tables["gemm"], gpu="TitanX_Pascal", suite="inference")[0]
    assert (inference["cuda"], inference["cudnn"]) == ("8.0.61", "6")


def test_truncated_workbook_names_the_file(deepbench_dir, tmp_path):
    source = deepbench_dir / "results/train/DeepBench_NV_V100.xlsx"
    target = tmp_path / "deepbench/results/train/DeepBench_NV_V100.xlsx"
    target.parent.mkdir(parents=True)
    target.write_bytes(source.read_bytes()[: source.stat().st_size // 2])
    with pytest.raises(LilouInputError) as caught:
        read_workbooks(tmp_path / "deepbench")
    message = str(caught.value)
    assert message.startswith("deepbench/results/train/DeepBench_NV_V100.xlsx is not a readable xlsx workbook: "
                              "re-fetch it with `lilou data fetch deepbench`")
    assert "\n" not in message


def test_non_nvidia_workbooks_are_ignored(deepbench_dir, tmp_path):
    folder = tmp_path / "deepbench"
    (folder / "results/train").mkdir(parents=True)
    shutil.copy(deepbench_dir / "results/train/DeepBench_NV_M40.xlsx", folder / "results/train")
    (folder / "results/train/DeepBench_AMD_MI25.xlsx").write_text("not read")
    tables = read_workbooks(folder)
    assert set(tables["gemm"].column("gpu").to_pylist()) == {"M40"} and tables["gemm"].num_rows == 160


# ----------------------------------------------------------------------------- synthetic workbooks (no data needed)

SPECS = [["CPU Model", "x"], ["GPU Model", "Nvidia Test"], ["CUDA Version", 8], ["Cudnn Version", "7.6.2.24"]]
DENSE_HEADER = ["Dense Matrix Multiplication", None, "M", "N", "K", "A Transpose", "B Transpose", None, "Time (msec)",
                "TERAFLOPS"]
RESULTS = [
    ["Precision", "Float"],
    [],
    DENSE_HEADER,
    [None, "DeepSpeech", 64, 32, 16, "N", "T", None, 0.005, 0.013],
    [None, "DeepSpeech", 64, 32, 16, "N", "T", None, 0.006, 0.011],       # a repeat: listings 2, first kept
    [None, None, 8, 8, 8, "N", "N", None, "#DIV/0!", "#DIV/0!"],           # no time: dropped
    [None, None, None, "a footnote", None, None, None, None, None, None],  # not a data row
    ["Convolution"],
    [None, None, "W", "H", "C", "N", "K ", "R", "S", "pad_h", "pad_w", "Vertical stride", "Horizontal stride",
     "Forward (msec)", "wrt Inputs (msec)", "wrt Parameters (msec)"],
    [None, "Vision", 224, 112, 3, 8, 64, 7, 5, 3, 2, 2, 1, 0.5, "N/A*", 0.7],
    ["Recurrent Layers - GRU", "Source", "Hidden units", "N", "Timesteps", None, "Time Forward (msec) ",
     "Time Backward wrt inputs (msec)", "Time Backward wrt weights (msec)", "TERAFLOPS FWD", "TERAFLOPS BWD",
     "TERAFLOPS BWD Params", "Total Time"],
    [None, "DeepSpeech", 512, 32, 1, None, 0.1, 0.2, 0.05, 1.5, 2.5, 3.5, 0.35],
    [1.25, None, 512, 64, 1, None, " ", None, None, None, None, None, 0],  # stray number in A, no time
    ["All-Reduce", None, "Size # floats", "# chips / accelerator cards"],
    [None, None, 100000, 2],
]


def _workbook(folder: Path, sheets: dict[str, list[list]], name: str = "results/train/DeepBench_NV_Test.xlsx") -> Path:
    workbook = openpyxl.Workbook()
    workbook.remove(workbook.active)
    for title, rows in sheets.items():
        sheet = workbook.create_sheet(title)
        for row in rows:
            sheet.append(row)
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    workbook.save(path)
    return path


def test_synthetic_workbook(tmp_path):
    tables = read_workbooks(_workbook(tmp_path, {"Results - FP32": RESULTS, "Specs": SPECS}).parents[2])
    (gemm,), (conv,), (rnn,) = (tables[n].to_pylist() for n in ("gemm", "conv", "rnn"))
    assert (gemm["gpu"], gemm["gpu_model"], gemm["suite"], gemm["precision"], gemm["app"]) == \
        ("Test", "Nvidia Test", "train", "fp32", "DeepSpeech")
    assert (gemm["M"], gemm["N"], gemm["K"], gemm["a_t"], gemm["b_t"], gemm["time_ms"], gemm["listings"]) == \
        (64, 32, 16, "N", "T", 0.005, 2)
    assert (gemm["cuda"], gemm["cudnn"], gemm["source_file"]) == ("8", "7.6.2.24", "results/train/DeepBench_NV_Test.xlsx")
    assert gemm["padded"] is None and gemm["precision_label"] == "Float"
    assert {k: conv[k] for k in ("in_h", "in_w", "filter_h", "filter_w", "pad_h", "pad_w", "stride_h", "stride_w",
                                 "out_h", "out_w")} == \
        {"in_h": 112, "in_w": 224, "filter_h": 7, "filter_w": 5, "pad_h": 3, "pad_w": 2, "stride_h": 2, "stride_w": 1,
         "out_h": 56, "out_w": 224}
    assert conv["bwd_inputs_ms"] is None and conv["bwd_params_ms"] == 0.7 and conv["total_ms"] is None
    assert (rnn["cell"], rnn["hidden"], rnn["batch"], rnn["timesteps"], rnn["total_ms"]) == ("gru", 512, 32, 1, 0.35)
    assert (rnn["bwd_inputs_tflops"], rnn["bwd_weights_tflops"], rnn["bwd_tflops"]) == (2.5, 3.5, None)


@pytest.mark.parametrize(("sheets", "expected"), [
    ({"Results - FP32": RESULTS}, "deepbench/results/train/DeepBench_NV_Test.xlsx: no 'Specs' sheet"),
    ({"Results - FP32": RESULTS, "Specs": SPECS[:2]},
     "deepbench/results/train/DeepBench_NV_Test.xlsx, sheet 'Specs': no 'cuda version' value"),
    ({"Results - FP8": [["Precision", "8 bit floats"]] + RESULTS[1:], "Specs": SPECS},
     "sheet 'Results - FP8': unknown precision label '8 bit floats'"),
    ({"Chart data": [["x", 1]], "Specs": SPECS}, "sheet 'Chart data': expected 'Precision' in cell A1"),
    ({"Results - FP32": RESULTS[:2] + [DENSE_HEADER[:8]] + RESULTS[3:], "Specs": SPECS},
     "sheet 'Results - FP32', row 3: Dense Matrix Multiplication section has no 'time' column"),
    ({"Results - FP32": RESULTS[:3] + [[None, None, 64, None, 16, "N", "T", None, 0.005]], "Specs": SPECS},
     "sheet 'Results - FP32', row 4: Dense Matrix Multiplication row has no integer 'n'"),
    ({"Results - FP32": RESULTS[:3] + [[None, None, 64, 32, 16, "N", "T", None, "fast"]], "Specs": SPECS},
     "row 4: 'time' cell holds 'fast', not a number"),
    ({"Results - FP32": RESULTS[:3] + [[None, None, 64, 32, 16, "X", "T", None, 0.005]], "Specs": SPECS},
     "a_t is 'X', expected N or T"),
    ({"Results - FP32": RESULTS[:2] + [["Pooling"]], "Specs": SPECS}, "row 3: unknown section title 'Pooling'"),
])
def test_unexpected_workbooks_raise_one_line_naming_file_and_sheet(tmp_path, sheets, expected):
    _workbook(tmp_path / "deepbench", sheets)
    with pytest.raises(LilouInputError) as caught:
        read_workbooks(tmp_path / "deepbench")
    assert expected in str(caught.value) and "\n" not in str(caught.value)
    assert str(caught.value).startswith("deepbench/results/train/DeepBench_NV_Test.xlsx")


def test_not_an_xlsx_file(tmp_path):
    path = tmp_path / "deepbench/results/inference/DeepBench_NV_Test.xlsx"
    path.parent.mkdir(parents=True)
    path.write_text("<html>404: Not Found</html>")
    with pytest.raises(LilouInputError, match=r"^deepbench/results/inference/DeepBench_NV_Test\.xlsx is not a "
                                              r"readable xlsx workbook: re-fetch it with `lilou data fetch deepbench`"):
        read_workbooks(tmp_path / "deepbench")


def test_no_workbooks(tmp_path):
    (tmp_path / "deepbench/results/train").mkdir(parents=True)
    with pytest.raises(MissingDataError, match="lilou data fetch deepbench"):
        read_workbooks(tmp_path / "deepbench")
