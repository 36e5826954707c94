"""What a source reader hands the kernel table: a DuckDB relation in the table's columns.

A reader turns a source's files, as they are upstream, into a relation with any subset of
:data:`lilou.data.kernel_schema.COLUMN_NAMES` plus ``drop_reason`` (null for a row to keep,
else one short reason why the row cannot enter the table). :func:`select` fills the columns a
reader leaves out with typed nulls, so every reader's SQL stays about its own source.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from lilou.data.kernel_schema import COLUMNS
from lilou.errors import MissingDataError


@dataclass(frozen=True)
class SourceRows:
    """A reader's result: the rows (with ``drop_reason``) and the files they were read from."""

    relation: duckdb.DuckDBPyRelation
    files: tuple[Path, ...]
    #: device string -> canonical GPU name, where the database lookup of the string would be wrong or ambiguous
    gpu_overrides: Mapping[str, str] = field(default_factory=dict)


def select(expressions: Mapping[str, str], from_clause: str, drop_reason: str = "NULL") -> str:
    """``SELECT`` of every table column: ``expressions[column]`` where given, else a typed null."""
    unknown = set(expressions) - set(COLUMNS)
    if unknown:
        raise ValueError(f"not columns of the kernel table: {sorted(unknown)}")
    parts = [f'CAST({expressions[name]} AS {kind}) AS "{name}"' if name in expressions else f'NULL::{kind} AS "{name}"'
             for name, (kind, _) in COLUMNS.items()]
    parts.append(f"CAST({drop_reason} AS VARCHAR) AS drop_reason")
    return "SELECT " + ",\n       ".join(parts) + f"\n{from_clause}"


def sql_string(path: Path | str) -> str:
    """A DuckDB string literal of a file path (a quote in it doubled: ``/home/o'brien`` is one path, not an
    unterminated string)."""
    return "'" + str(path).replace("'", "''") + "'"


def sql_list(paths: list[Path] | tuple[Path, ...]) -> str:
    """A DuckDB list literal of file paths."""
    return "[" + ", ".join(sql_string(p) for p in paths) + "]"


def require_files(folder: Path, pattern: str, source: str) -> list[Path]:
    """Files matching ``pattern`` under ``folder``; a one-line error naming the source when there are none."""
    found = sorted(folder.glob(pattern))
    if not found:
        raise MissingDataError(f"{source}: no {pattern} under {folder}: run `lilou data fetch {source}` "
                              "or point LILOU_DATA_DIR at a mirror such as ../shared/datasets")
    return found
