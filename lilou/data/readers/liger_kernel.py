"""Liger-Kernel benchmark CSVs -> kernel-table rows.

``all_benchmark_data*.csv``: speed (ms, the median of ``triton.testing.do_bench``) and peak
memory of LLM layers and losses, per provider (Liger's Triton kernels, PyTorch / Hugging Face
eager, torch.compile, cuTile / CuTe-DSL ports), across one swept dimension ``x_name`` with the
rest of the shape in ``extra_benchmark_config_str`` (JSON). These are whole layer calls, not
single kernels: ``swiglu``/``geglu`` time a Llama MLP (three projections and the activation),
the fused linear losses include the LM-head GEMM.

Memory rows are not latencies and rows whose config records no ``dtype`` (the script's default
applies, which the file does not say) are dropped, each with its reason. The shape is resolved
per family from ``x_name``/``x_value`` and the config (:func:`shape_fields`).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from lilou.data.kernel_schema import COLUMNS
from lilou.data.paths import fetch_hint
from lilou.data.readers.base import SourceRows, require_files, select, sql_list
from lilou.errors import LilouInputError

NAME = "liger_kernel"
TIMING = "triton-do-bench"

FAMILY_OF_KERNEL = {
    **dict.fromkeys(("rms_norm", "layer_norm", "group_norm", "poly_norm", "dyt", "fused_add_rms_norm"), "norm"),
    **dict.fromkeys(("softmax", "sparsemax"), "softmax"),
    **dict.fromkeys(("rope", "llama4_rope", "qwen2vl_mrope"), "elementwise"),
    **dict.fromkeys(("swiglu", "geglu", "tiled_swiglu", "tiled_geglu"), "mlp"),
    "embedding": "embedding",
    **dict.fromkeys(("fused_neighborhood_attention", "multi_token_attention", "sparse_multi_token_attention"),
                    "attention"),
}
#: every other kernel name (cross_entropy, jsd, kl_div, distill and fused linear losses) is a loss
DEFAULT_FAMILY = "loss"
DTYPES = {"torch.bfloat16": "bf16", "torch.float32": "fp32", "torch.float16": "fp16"}
#: The cuTile files sweep GroupNorm over tokens (``BT``) with ``hidden_size`` and ``H`` in the config, and record no
#: tensor shape. Read as [tokens, hidden_size, H] like the (M, C, H) rows, 8192 tokens would move 69 GB in the
#: measured 0.04-0.24 ms (about 1,000x any GPU's bandwidth): the rows are dropped rather than guessed.
GROUP_NORM_OVER_TOKENS = "group_norm swept over tokens: the tensor shape is not recorded"
MODES = {"forward": "forward", "backward": "backward", "full": "full", "no-grad-forward": "forward-no-grad"}


def _first(dims: dict[str, Any], *names: str) -> int | None:
    for name in names:
        value = dims.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    return None


def shape_fields(family: str, dims: dict[str, Any]) -> dict[str, int | None]:
    """The table's shape fields of one row from its swept value and config (``dims`` holds both)."""
    batch = _first(dims, "B", "bsz", "batch_size") or 1
    seq = _first(dims, "T", "seq_len", "L")
    tokens = _first(dims, "BT") or (batch * seq if seq is not None else None)
    hidden = _first(dims, "hidden_size", "H", "D", "N")
    if family == "norm":
        rows = _first(dims, "M") or tokens
        if "channels_per_group" in dims:  # GroupNorm on [M, C, H]: normalised over C / groups x H
            channels = _first(dims, "C", "hidden_size") or 0
            width = _first(dims, "H") or 1
            return {"rows": rows, "cols": channels * width, "groups": channels // max(dims["channels_per_group"], 1)}
        return {"rows": rows, "cols": _first(dims, "N", "H", "hidden_size")}
    if family == "softmax":
        return {"rows": _first(dims, "M") or tokens, "cols": _first(dims, "N", "V", "hidden_size")}
    if family == "elementwise":  # RoPE on q and k: (q heads + kv heads) x head_dim per token
        heads = _first(dims, "num_q_heads", "num_attention_heads")
        kv_heads = _first(dims, "num_kv_heads", "num_key_value_heads")
        width = hidden if hidden is not None and "num_q_heads" not in dims else None
        head_dim = (hidden // heads) if hidden and heads else _first(dims, "head_dim")
        cols = (heads + kv_heads) * head_dim if heads and kv_heads and head_dim else width
        return {"rows": tokens, "cols": cols}
    if family == "mlp":
        return {"rows": tokens, "cols": hidden, "inter": _first(dims, "intermediate_size")}
    if family == "embedding":
        return {"rows": tokens, "cols": _first(dims, "D", "hidden_size"), "vocab": _first(dims, "V", "vocab_size")}
    if family == "attention":
        heads = _first(dims, "num_heads")
        return {"batch": batch, "seq_len": seq, "heads": heads,
                "head_dim": hidden // heads if hidden and heads else None}
    return {"rows": tokens, "cols": hidden, "vocab": _first(dims, "V", "vocab_size")}


def _value(text: str | None) -> Any:
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return text


#: The upstream columns every row is read from: a file without one of them is refused by name (a renamed
#: ``kernel_name`` made every row of its file a ``loss`` kernel without an op, a renamed ``y_value_50`` dropped them
#: all as "no positive latency").
REQUIRED_COLUMNS = ("kernel_name", "kernel_provider", "kernel_operation_mode", "metric_name", "x_name", "x_value",
                    "y_value_50", "extra_benchmark_config_str", "gpu_name", "liger_version")
#: The drop reason of a line cut off or shorter than its header.
INCOMPLETE = "incomplete line (cut off, or fewer fields than the header)"


def _check_headers(files: list[Path]) -> None:
    for path in files:
        with path.open(newline="", encoding="utf-8", errors="replace") as handle:
            header = next(csv.reader(handle), [])
        missing = [name for name in REQUIRED_COLUMNS if name not in header]
        if missing:
            raise LilouInputError(f"{NAME}: {path.name} lacks the column(s) {', '.join(missing)}; is it the upstream "
                                  f"benchmark file? ({fetch_hint(NAME)})")


def _rows(con: duckdb.DuckDBPyConnection, files: list[Path]) -> pa.Table:
    """Every upstream row, parsed: the table's columns plus ``drop_reason``."""
    _check_headers(files)
    raw = con.sql(f"SELECT *, filename FROM read_csv({sql_list(files)}, union_by_name = true, filename = true, "
                  "header = true, all_varchar = true)").fetchall()
    names = [d[0] for d in con.sql(f"DESCRIBE SELECT *, filename FROM read_csv({sql_list(files)}, "
                                   "union_by_name = true, filename = true, header = true, all_varchar = true)").fetchall()]
    out: dict[str, list[Any]] = {name: [] for name in (*COLUMNS, "drop_reason")}
    for values in raw:
        row = dict(zip(names, values))
        try:
            config = json.loads(row["extra_benchmark_config_str"] or "{}")
        except ValueError:
            config = {}
        incomplete = any(row.get(name) is None for name in ("kernel_name", "metric_name", "x_name", "x_value",
                                                              "y_value_50", "gpu_name"))
        dims = config if incomplete else {**config, row["x_name"]: _value(row["x_value"])}
        family = FAMILY_OF_KERNEL.get(row["kernel_name"], DEFAULT_FAMILY)
        dtype = DTYPES.get(config.get("dtype", ""))
        reason = None
        if row["metric_name"] != "speed":
            reason = f"{row['metric_name']} metric, not a latency"
        elif "dtype" not in config:
            reason = "dtype not recorded (the benchmark script's default applies)"
        elif dtype is None:
            reason = f"unknown dtype {config['dtype']}"
        elif row["kernel_operation_mode"] not in MODES:
            reason = f"unknown mode {row['kernel_operation_mode']}"
        elif row["kernel_name"] == "group_norm" and "M" not in dims:
            reason = GROUP_NORM_OVER_TOKENS
        if incomplete:
            reason = INCOMPLETE
        record = {name: None for name in out}
        record.update(shape_fields(family, dims))
        record.update(
            source=NAME, subset=Path(row["filename"]).stem, device=row["gpu_name"], dtype=dtype, family=family,
            op=row["kernel_name"], mode=MODES.get(row["kernel_operation_mode"]), provider=row["kernel_provider"],
            shape=json.dumps(dims, sort_keys=True), latency_ms=_float(row["y_value_50"]),
            latency_stat="median of do_bench calls", timing=TIMING, framework=f"Liger-Kernel {row['liger_version']}",
            drop_reason=reason)
        for name, value in record.items():
            out[name].append(value)
    return pa.table(out)


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def read(folder: Path, con: duckdb.DuckDBPyConnection) -> SourceRows:
    files = require_files(folder, "all_benchmark_data*.csv", NAME)
    con.register("liger_kernel_rows", _rows(con, files))
    keep = {name: f'"{name}"' for name in COLUMNS}
    relation = con.sql(select(keep, "FROM liger_kernel_rows", "drop_reason"))
    return SourceRows(relation, tuple(files))
