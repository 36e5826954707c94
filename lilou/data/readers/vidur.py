"""Vidur (MLSys 2024) per-op profiles of one transformer block -> kernel-table rows.

``compute/<gpu>/<org>/<model>/mlp.csv``: one row per (``num_tokens`` x TP degree), one
``time_stats.<op>.median`` column per op, in ms; FP16, sarathi-serve layers, GPU kernel time
summed by ``torch.profiler`` (no launch overhead), statistics over 20 repeats. Each op is one
row here; its shape follows from the model columns (head_dim = n_embd / n_head; TP divides
heads, the QKV/up-projection outputs, the o/down-projection inputs and the vocabulary).

"a100" is an A100 80GB whose board (SXM or PCIe) Vidur does not record: it is read as the
SXM4 part, the one Vidur's DGX node config names (a PCIe board has 5 % less bandwidth).
"""
from __future__ import annotations

from pathlib import Path

import duckdb

from lilou.data.readers.base import SourceRows, require_files, select, sql_list

NAME = "vidur"
TIMING = "profiler-kernel-time"
GPU_OF_FOLDER = {"a100": "a100-sxm4-80gb", "a40": "a40"}

_HEAD_DIM = "(n_embd // n_head)"
_TP = "num_tensor_parallel_workers"
_UP = f"(CASE WHEN use_gated_mlp THEN 2 * n_expanded_embd ELSE n_expanded_embd END) // {_TP}"

#: op column -> (family, expressions of its shape fields)
OPS: dict[str, tuple[str, dict[str, str]]] = {
    "emb": ("embedding", {"rows": "num_tokens", "cols": "n_embd", "vocab": f"vocab_size // {_TP}"}),
    "input_layernorm": ("norm", {"rows": "num_tokens", "cols": "n_embd"}),
    "attn_pre_proj": ("gemm", {"batch": "1", "m": "num_tokens", "k": "n_embd",
                               "n": f"(n_head + 2 * n_kv_head) * {_HEAD_DIM} // {_TP}"}),
    "attn_rope": ("elementwise", {"rows": "num_tokens", "cols": f"(n_head + n_kv_head) * {_HEAD_DIM} // {_TP}"}),
    "attn_post_proj": ("gemm", {"batch": "1", "m": "num_tokens", "k": f"n_head * {_HEAD_DIM} // {_TP}", "n": "n_embd"}),
    "post_attention_layernorm": ("norm", {"rows": "num_tokens", "cols": "n_embd"}),
    "mlp_up_proj": ("gemm", {"batch": "1", "m": "num_tokens", "k": "n_embd", "n": _UP}),
    "mlp_act": ("elementwise", {"rows": "num_tokens", "cols": _UP}),
    "mlp_down_proj": ("gemm", {"batch": "1", "m": "num_tokens", "k": f"n_expanded_embd // {_TP}", "n": "n_embd"}),
    "add": ("elementwise", {"rows": "num_tokens", "cols": "n_embd"}),
}


def read(folder: Path, con: duckdb.DuckDBPyConnection) -> SourceRows:
    files = require_files(folder, "compute/*/*/*/mlp.csv", NAME)
    # Read the CSVs once: every op below is a view of the same rows.
    con.execute(f"CREATE OR REPLACE TEMP TABLE vidur_mlp AS SELECT *, split_part(filename, '/', -4) AS gpu_folder, "
                f"concat(split_part(filename, '/', -3), '/', split_part(filename, '/', -2)) AS model "
                f"FROM read_csv({sql_list(files)}, union_by_name = true, filename = true, header = true)")
    scan = "FROM vidur_mlp"
    parts = []
    for op, (family, shape) in OPS.items():
        median = f'"time_stats.{op}.median"'
        parts.append(select({
            "source": f"'{NAME}'", "subset": "model", "device": "gpu_folder", "dtype": "'fp16'",
            "unit": "'fp16_tensor'" if family == "gemm" else "NULL", "family": f"'{family}'", "op": f"'{op}'",
            "mode": "'forward'", **shape, "bias": "FALSE" if family == "gemm" else "NULL",
            "shape": f"json_object('model', model, 'num_tokens', num_tokens, 'tp', {_TP})",
            "latency_ms": median, "latency_stat": "'median of 20 repeats'", "timing": f"'{TIMING}'",
            "includes": "'every kernel launched inside the op'", "framework": "'sarathi-serve (vidur branch)'",
        }, scan, f"CASE WHEN {median} IS NULL THEN 'op absent from this model' END"))
    return SourceRows(con.sql("\nUNION ALL\n".join(parts)), tuple(files), gpu_overrides=GPU_OF_FOLDER)
