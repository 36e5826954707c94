"""Baidu DeepBench cuBLAS GEMM, cuDNN conv and cuDNN RNN times -> kernel-table rows.

The upstream workbooks (``results/**/DeepBench_NV_<GPU>.xlsx``) are parsed by
:mod:`lilou.data.readers.deepbench_xlsx`; a mirror that carries the tidy CSVs derived from them
(``gemm_tidy.csv``, ``conv_tidy.csv``, ``rnn_tidy.csv``, same columns) is read from those instead.
Times are a host clock around 400 (GEMM), 300 (conv) or 100 (RNN) back-to-back calls divided by
the count, in ms at 1 us resolution. GEMM is C[M, N] = op(A)[M, K] . op(B)[K, N].

Precisions: ``fp32``; P100 ``fp16_storage_fp32_math`` (FP16 operands, FP32 math on CUDA cores);
V100/T4 ``fp16_mixed`` (tensor cores, FP32 accumulate); inference ``int8`` (tensor cores on the
T4, DP4A on the Pascal cards). Sparse GEMMs (cuSPARSE) have no family in the table and are
dropped with that reason. Each conv and RNN shape gives one row per measured pass (forward,
backward-data, backward-filter); a pass the sheet leaves empty is no row.

Board variants: the V100 ran in a DGX-1 (SXM2; read as the 16 GB part); the P100's board is not
stated and is read as the PCIe 16 GB part that NeuSight also measured.
"""
from __future__ import annotations

from pathlib import Path

import duckdb

from lilou.data.readers.base import SourceRows, select, sql_list
from lilou.errors import MissingDataError

NAME = "deepbench"
TIMING = "host-timer-loop"
TIDY = ("gemm_tidy.csv", "conv_tidy.csv", "rnn_tidy.csv")

#: DeepBench's file tag -> canonical GPU name (the ``device`` column keeps the Specs sheet's model)
GPU_OF_TAG = {"M40": "m40", "TitanX": "titan-x", "1080Ti": "gtx-1080-ti", "TitanX_Pascal": "titan-x-pascal",
              "TitanXp": "titan-xp", "P100": "p100-pcie-16gb", "V100": "v100-sxm2-16gb", "T4": "t4"}
PASCAL_TAGS = ("1080Ti", "TitanX_Pascal", "TitanXp", "P100")

_DTYPE = ("CASE precision WHEN 'fp32' THEN 'fp32' WHEN 'fp16_storage_fp32_math' THEN 'fp16' "
          "WHEN 'fp16_mixed' THEN 'fp16' WHEN 'int8' THEN 'int8' END")
_UNIT = ("CASE WHEN precision IN ('fp32', 'fp16_storage_fp32_math') THEN 'fp32' WHEN precision = 'fp16_mixed' "
         "THEN 'fp16_tensor' WHEN precision = 'int8' AND gpu IN (" + ", ".join(f"'{t}'" for t in PASCAL_TAGS) + ") "
         "THEN 'int8' WHEN precision = 'int8' THEN 'int8_tensor' END")
_QUANT = ("CASE precision WHEN 'int8' THEN 'int8-multiply-int32-accumulate' WHEN 'fp16_storage_fp32_math' "
          "THEN 'fp16-storage-fp32-math' WHEN 'fp16_mixed' THEN 'fp16-multiply-fp32-accumulate' END")
_GPU = "CASE gpu " + " ".join(f"WHEN '{tag}' THEN '{name}'" for tag, name in GPU_OF_TAG.items()) + " END"


def _common(mode: str) -> dict[str, str]:
    return {
        "source": f"'{NAME}'", "subset": "suite", "gpu": _GPU, "device": "gpu_model", "dtype": _DTYPE,
        "quant": _QUANT, "unit": _UNIT, "mode": f"'{mode}'", "latency_stat": "'mean of back-to-back calls'",
        "timing": f"'{TIMING}'", "framework": "concat('CUDA ', cuda, ' cuDNN ', cudnn)",
    }


def _drop(time_column: str) -> str:
    return (f"CASE WHEN {_DTYPE} IS NULL THEN concat('unknown precision ', precision) "
            f"WHEN TRY_CAST({time_column} AS DOUBLE) IS NULL THEN 'no time' "
            f"WHEN {_GPU} IS NULL THEN concat('unknown DeepBench GPU ', gpu) END")


def _sources(folder: Path, con: duckdb.DuckDBPyConnection) -> tuple[dict[str, str], tuple[Path, ...]]:
    """FROM clauses of the gemm / conv / rnn tables: the tidy CSVs if present, else the parsed workbooks."""
    tidy = [folder / name for name in TIDY]
    if all(path.is_file() for path in tidy):
        return ({stem: f"FROM read_csv({sql_list([path])}, header = true, all_varchar = true)"
                 for stem, path in zip(("gemm", "conv", "rnn"), tidy)}, tuple(tidy))
    workbooks = sorted(folder.glob("results/**/DeepBench_NV_*.xlsx"))
    if not workbooks:
        raise MissingDataError(f"{NAME}: no results/**/DeepBench_NV_*.xlsx under {folder}: "
                               f"run `lilou data fetch {NAME}` or point LILOU_DATA_DIR at a mirror")
    from lilou.data.readers.deepbench_xlsx import read_workbooks

    tables = read_workbooks(folder)
    clauses = {}
    for stem, table in tables.items():
        view = f"deepbench_{stem}_workbook"
        con.register(view, table)
        clauses[stem] = f"FROM (SELECT * REPLACE ({_as_text(table.column_names)}) FROM {view})"
    return clauses, tuple(workbooks)


def _as_text(columns: list[str]) -> str:
    """Every column cast to text, so the workbook tables and the CSVs (read as text) share one SQL."""
    return ", ".join(f'CAST("{c}" AS VARCHAR) AS "{c}"' for c in columns)


def read(folder: Path, con: duckdb.DuckDBPyConnection) -> SourceRows:
    sources, files = _sources(folder, con)
    gemm_shape = {"family": "'gemm'", "op": "concat(kind, '_gemm')", "batch": "1", "m": "M", "n": "N", "k": "K",
                  "layout": "concat(a_t, b_t)", "bias": "FALSE", "latency_ms": "time_ms",
                  "includes": "CASE WHEN padded = '1' THEN 'dimensions padded for int8' END"}
    gemm = select({**_common("forward"), **gemm_shape}, sources["gemm"],
                  f"CASE WHEN kind = 'sparse' THEN 'sparse GEMM (cuSPARSE): no family for it' ELSE {_drop('time_ms')} END")

    conv_shape = {"family": "'conv'", "op": "'conv2d'", "batch": "batch", "in_c": "in_c", "in_h": "in_h", "in_w": "in_w",
                  "out_c": "out_c", "kernel_h": "filter_h", "kernel_w": "filter_w", "stride_h": "stride_h",
                  "stride_w": "stride_w", "pad_h": "pad_h", "pad_w": "pad_w", "groups": "1"}
    conv = "\nUNION ALL\n".join(
        select({**_common(mode), **conv_shape, "latency_ms": column,
                "provider": "fwd_algo" if mode == "forward" else "NULL"},
               f"{sources['conv']} WHERE coalesce({column}, '') <> ''", _drop(column))
        for mode, column in (("forward", "fwd_ms"), ("backward-data", "bwd_inputs_ms"),
                             ("backward-filter", "bwd_params_ms")))

    rnn_shape = {"family": "'rnn'", "op": "cell", "batch": "batch", "hidden": "hidden", "timesteps": "timesteps",
                 "unit": "CASE WHEN precision = 'fp16_mixed' THEN 'fp16_tensor' ELSE 'fp32' END"}
    rnn = "\nUNION ALL\n".join(
        select({**_common(mode), **rnn_shape, "latency_ms": column},
               f"{sources['rnn']} WHERE coalesce({column}, '') <> ''", _drop(column))
        for mode, column in (("forward", "fwd_ms"), ("backward-data", "bwd_inputs_ms"),
                             ("backward-filter", "bwd_weights_ms"), ("backward", "bwd_ms")))
    relation = con.sql(f"{gemm}\nUNION ALL\n{conv}\nUNION ALL\n{rnn}")
    return SourceRows(relation, files)
