"""NeuSight (ASPLOS 2025) per-operator CSVs -> kernel-table rows.

``kernels/train/<op>/<GPU>.csv`` and ``kernels/test/{bmm,linear,elem,ln,softmax}.csv``
(``vec.csv`` is elem + ln + softmax again and is skipped). PyTorch 2.1 eager, FP32 with TF32
off, CUDA events, latency in ms. Shapes: ``linear`` is ``nn.Linear(N, K, bias=True)`` on
[B, M, N] (a GEMM of B*M rows, reduction N, K outputs, bias in the epilogue); ``bmm`` is
[B, M, N] x [B, N, K]; ``conv`` is ``nn.Conv2d`` without bias on a square input
(``Kernel_Szie`` is upstream's spelling); the rest act on [B, H].
"""
from __future__ import annotations

from pathlib import Path

import duckdb

from lilou.data.readers.base import SourceRows, require_files, select, sql_list

NAME = "neusight"
TIMING = "cuda-events-eager"
TEST_FILES = ("bmm", "linear", "elem", "ln", "softmax")
ELEMENTWISE_OPS = ("add", "mul", "div", "pow", "addu", "mulu", "divu", "powu", "relu", "gelu", "tanh")


def _int(column: str) -> str:
    return f'TRY_CAST("{column}" AS BIGINT)'


def read(folder: Path, con: duckdb.DuckDBPyConnection) -> SourceRows:
    train = require_files(folder, "kernels/train/*/*.csv", NAME)
    test = [folder / "kernels" / "test" / f"{stem}.csv" for stem in TEST_FILES]
    test = [path for path in test if path.is_file()]
    files = train + test
    elementwise = ", ".join(f"'{op}'" for op in ELEMENTWISE_OPS)
    family = (f"CASE WHEN OPName = 'linear' THEN 'gemm' WHEN OPName = 'bmm' THEN 'bmm' WHEN OPName = 'conv' THEN 'conv' "
              f"WHEN OPName IN ({elementwise}) THEN 'elementwise' WHEN OPName = 'ln' THEN 'norm' "
              "WHEN OPName = 'softmax' THEN 'softmax' END")
    gemm = "OPName IN ('linear', 'bmm')"
    vector = f"OPName IN ({elementwise}, 'ln', 'softmax')"
    expressions = {
        "source": f"'{NAME}'",
        "subset": "CASE WHEN filename LIKE '%/kernels/test/%' THEN 'test' ELSE 'train' END",
        "device": "Device",
        "dtype": "'fp32'",
        "unit": "CASE WHEN OPName IN ('linear', 'bmm', 'conv') THEN 'fp32' END",
        "family": family,
        "op": "OPName",
        "mode": "'forward'",
        "provider": '"Kernel Name"',
        "batch": f"CASE WHEN OPName = 'linear' THEN 1 WHEN OPName IN ('bmm', 'conv') THEN {_int('B')} END",
        "m": f"CASE WHEN OPName = 'linear' THEN {_int('B')} * {_int('M')} WHEN OPName = 'bmm' THEN {_int('M')} END",
        "n": f"CASE WHEN {gemm} THEN {_int('K')} END",
        "k": f"CASE WHEN {gemm} THEN {_int('N')} END",
        "bias": "CASE WHEN OPName = 'linear' THEN TRUE WHEN OPName = 'bmm' THEN FALSE END",
        **{out: f"CASE WHEN OPName = 'conv' THEN {_int(col)} END" for out, col in (
            ("in_c", "Input_Channel"), ("out_c", "Output_Channel"), ("in_h", "Input_Size"), ("in_w", "Input_Size"),
            ("kernel_h", "Kernel_Szie"), ("kernel_w", "Kernel_Szie"), ("stride_h", "Stride"), ("stride_w", "Stride"),
            ("pad_h", "Padding"), ("pad_w", "Padding"))},
        "groups": "CASE WHEN OPName = 'conv' THEN 1 END",
        "rows": f"CASE WHEN {vector} THEN {_int('B')} END",
        "cols": f"CASE WHEN {vector} THEN {_int('H')} END",
        "latency_ms": "TRY_CAST(Latency AS DOUBLE)",
        "latency_stat": "'mean of the fastest repeats'",
        "timing": f"'{TIMING}'",
        "includes": "CASE WHEN OPName = 'linear' THEN 'bias add' END",
        "framework": "concat('PyTorch ', ltrim(\"Torch Version\", 'p'), ' ', \"CUDA Version\", ' cuDNN ', \"CUDNN Version\")",
    }
    drop = (f"CASE WHEN {family} IS NULL THEN concat('unknown NeuSight op ', OPName) "
            "WHEN TRY_CAST(Latency AS DOUBLE) IS NULL THEN 'no latency' END")
    source = f"FROM read_csv({sql_list(files)}, union_by_name = true, filename = true, all_varchar = true, header = true)"
    return SourceRows(con.sql(select(expressions, source, drop)), tuple(files))
