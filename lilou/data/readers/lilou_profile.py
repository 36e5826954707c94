"""Profiles measured by Lilou itself (`lilou profile ops`, added with `lilou data add`) -> kernel-table rows.

``<data root>/lilou_profile/<name>/rows.csv`` is already in the table's columns (:mod:`lilou.data.profiles`); the
profile's folder name is the row's ``subset``. `lilou data add` only adds whole-GPU profiles, but a folder copied in
by hand may hold a CPU dry run or a MIG slice: those rows are dropped with their reason.
"""
from __future__ import annotations

from pathlib import Path

import duckdb

from lilou.data.profiles import PROFILE_DATASET, ROW_COLUMNS, ROWS_FILE, SHAPE_COLUMNS
from lilou.data.readers.base import SourceRows, require_files, select, sql_list

NAME = PROFILE_DATASET


def read(folder: Path, con: duckdb.DuckDBPyConnection) -> SourceRows:
    files = require_files(folder, f"*/{ROWS_FILE}", NAME)
    text = {name: f'"{name}"' for name in ROW_COLUMNS
            if name not in SHAPE_COLUMNS and name not in ("bias", "latency_ms", "device_kind")}
    expressions = {
        **text,
        "source": f"'{NAME}'",
        "subset": "split_part(replace(filename, '\\', '/'), '/', -2)",
        **{name: f'TRY_CAST("{name}" AS BIGINT)' for name in SHAPE_COLUMNS},
        "bias": 'TRY_CAST("bias" AS BOOLEAN)',
        "latency_ms": 'TRY_CAST("latency_ms" AS DOUBLE)',
    }
    drop = ("CASE WHEN device_kind = 'cpu' THEN 'measured on a CPU (a dry run of the sweep)' "
            "WHEN device_kind = 'mig' THEN 'measured on a MIG slice (the table has no MIG column)' "
            "WHEN device_kind IS NULL OR device_kind NOT IN ('cuda') THEN 'unknown device kind' END")
    source = (f"FROM read_csv({sql_list(files)}, union_by_name = true, filename = true, all_varchar = true, "
              "header = true)")
    return SourceRows(con.sql(select(expressions, source, drop)), tuple(files))
