"""NVIDIA AIConfigurator per-op parquet tables -> kernel-table rows.

``data/<system>/<family>/<backend>/<version>/<table>.parquet``: ``gemm_perf``,
``context_attention_perf`` (prefill), ``generation_attention_perf`` (decode) and ``moe_perf``,
measured inside vLLM, TensorRT-LLM and SGLang as the mean of CUDA-graph replays (no launch
overhead), latency in ms. GEMMs are Y[m, n] = X[m, k] . W[n, k]^T with per-GPU shards.

Where one (system, backend) holds two version folders of a table (TRT-LLM ``moe`` on the
Blackwell systems: ``1.3.0rc23`` re-measured some shapes of ``1.3.0rc20``), the newer version
wins on a clash of shape keys, as AIConfigurator itself reads them; the superseded rows are
counted as dropped. The Intel Arc Pro B60 rows are not NVIDIA and are dropped by device.
"""
from __future__ import annotations

from pathlib import Path

import duckdb

from lilou.data.readers.base import SourceRows, require_files, select, sql_list

NAME = "aiconfigurator"
TIMING = "cuda-graph-replay"

#: ``gemm_dtype`` / ``moe_dtype`` / ``attn_dtype`` -> (dtype, quant, unit that bounds the math)
DTYPES: dict[str, tuple[str, str | None, str]] = {
    "bfloat16": ("bf16", None, "bf16_tensor"),
    "fp8": ("fp8", "fp8-per-tensor", "fp8_tensor"),
    "fp8_block": ("fp8", "fp8-block", "fp8_tensor"),
    "nvfp4": ("fp4", "nvfp4", "fp4_tensor"),
    "int8_wo": ("int8", "int8-weight-only", "bf16_tensor"),
    "int4_wo": ("int4", "int4-weight-only", "bf16_tensor"),
    "sq": ("int8", "w8a8-smoothquant", "int8_tensor"),
    "w4a16_mxfp4": ("fp4", "w4a16-mxfp4", "bf16_tensor"),
    "w4a8_mxfp4_mxfp8": ("fp4", "w4a8-mxfp4-mxfp8", "fp8_tensor"),
}
KV_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}
#: The README: "vLLM fp8_block GEMM is timed eagerly, without a graph". Those calls take 57-293 us at their 2nd
#: percentile by GPU where TRT-LLM's and SGLang's graph-replayed fp8_block GEMMs take 4-12 us: the time is the
#: collector host's Python path, not the GPU's, so the rows are dropped (counted) rather than mislabelled.
EAGER_FP8_BLOCK = "vLLM fp8_block GEMM timed eagerly: host time, not GPU work (README)"

_COMMON = {
    "source": f"'{NAME}'",
    "subset": "system",
    "device": "device",
    "mode": "'forward'",
    "provider": "kernel_source",
    "latency_ms": "latency",
    "latency_stat": "'mean of CUDA-graph replays'",
    "timing": f"'{TIMING}'",
    "framework": "concat(framework, ' ', version)",
}


def _case(column: str, position: int) -> str:
    """``CASE column WHEN <upstream dtype> THEN <DTYPES[...][position]> ... END``."""
    whens = " ".join(f"WHEN '{raw}' THEN {'NULL' if value[position] is None else repr(value[position])}"
                     for raw, value in DTYPES.items())
    return f"CASE {column} {whens} END"


def _dtype_drop(column: str) -> str:
    known = ", ".join(f"'{raw}'" for raw in DTYPES)
    return f"CASE WHEN {column} NOT IN ({known}) THEN concat('unknown dtype ', {column}) END"


def _tables(files: list[Path], table: str) -> list[Path]:
    return [path for path in files if path.stem == table]


def _scan(paths: list[Path]) -> str:
    """Rows of ``paths`` with ``system``, ``backend`` and ``version_dir`` taken from each file's path."""
    return (f"(SELECT *, split_part(filename, '/', -5) AS system, split_part(filename, '/', -3) AS backend, "
            f"split_part(filename, '/', -2) AS version_dir FROM read_parquet({sql_list(paths)}, union_by_name = true, "
            "filename = true))")


def _newest_wins(scan: str, keys: str) -> str:
    """``scan`` with each row flagged ``superseded`` when a newer version folder of the same system
    and backend measured the same key."""
    return (f"(SELECT *, version_dir <> max(version_dir) OVER (PARTITION BY system, backend, {keys}) AS superseded "
            f"FROM {scan})")


def read(folder: Path, con: duckdb.DuckDBPyConnection) -> SourceRows:
    files = require_files(folder, "data/*/*/*/*/*.parquet", NAME)
    gemm = select({
        **_COMMON, "family": "'gemm'", "op": "op_name", "dtype": _case("gemm_dtype", 0), "quant": _case("gemm_dtype", 1),
        "unit": _case("gemm_dtype", 2), "batch": "1", "m": "m", "n": "n", "k": "k", "bias": "FALSE",
        "includes": "CASE WHEN gemm_dtype IN ('fp8', 'fp8_block', 'nvfp4', 'sq') THEN 'activation quantisation' END",
    }, f"FROM {_scan(_tables(files, 'gemm_perf'))}",
        f"coalesce({_dtype_drop('gemm_dtype')}, CASE WHEN framework = 'VLLM' AND gemm_dtype = 'fp8_block' "
        f"THEN '{EAGER_FP8_BLOCK}' END)")

    attention = " UNION ALL ".join(select({
        **_COMMON, "family": f"'{family}'", "op": "op_name",
        "dtype": "CASE attn_dtype WHEN 'bfloat16' THEN 'bf16' WHEN 'fp8' THEN 'fp8' END",
        "quant": "CASE attn_dtype WHEN 'fp8' THEN 'fp8-fmha' END",
        "unit": "CASE attn_dtype WHEN 'bfloat16' THEN 'bf16_tensor' WHEN 'fp8' THEN 'fp8_tensor' END",
        "kv_dtype": "CASE kv_cache_dtype WHEN 'bfloat16' THEN 'bf16' WHEN 'fp8' THEN 'fp8' END",
        "batch": "batch_size", length: length_expression, "heads": "num_heads", "kv_heads": "num_key_value_heads",
        "head_dim": "head_dim", "window": "coalesce(window_size, 0)",
        "includes": "CASE WHEN framework = 'VLLM' THEN 'KV-cache write where the backend does it separately' END",
    }, f"FROM {_scan(_tables(files, table))}",
        "CASE WHEN attn_dtype NOT IN ('bfloat16', 'fp8') OR kv_cache_dtype NOT IN ('bfloat16', 'fp8') "
        "THEN concat('unknown dtype ', attn_dtype, '/', kv_cache_dtype) END")
        for family, table, length, length_expression in (
            ("attention-prefill", "context_attention_perf", "seq_len", "isl"),
            ("attention-decode", "generation_attention_perf", "kv_len", "step")))

    moe_keys = "moe_dtype, num_tokens, hidden_size, inter_size, topk, num_experts, moe_tp_size, moe_ep_size, distribution"
    moe = select({
        **_COMMON, "family": "'moe'", "op": "op_name", "dtype": _case("moe_dtype", 0), "quant": _case("moe_dtype", 1),
        "unit": _case("moe_dtype", 2), "tokens": "num_tokens", "hidden": "hidden_size", "inter": "inter_size",
        "topk": "topk", "experts": "num_experts", "tp": "moe_tp_size", "ep": "moe_ep_size",
        "distribution": "distribution",
        "includes": "'routing, expert GEMMs, activation and finalize; no all-to-all'",
    }, f"FROM {_newest_wins(_scan(_tables(files, 'moe_perf')), moe_keys)}",
        f"CASE WHEN superseded THEN 'superseded by a newer version of the same shape' ELSE {_dtype_drop('moe_dtype')} END")

    relation = con.sql(f"{gemm}\nUNION ALL\n{attention}\nUNION ALL\n{moe}")
    return SourceRows(relation, tuple(files))
