"""A fixed sample of the kernel table: at most ``per_group`` rows per (source, GPU, dtype, family).

The table is large (millions of AIConfigurator rows); the rows are picked by a hash of the row, so the
sample is the same on every run, for training (``experiment=kernel_table``) and for the folds.
"""
from __future__ import annotations

_COLUMNS = ("source", "gpu", "dtype", "quant", "family", "op", "unit", "timing", "provider", "batch", "m", "n", "k",
            "bias", "in_c", "in_h", "in_w", "out_c", "kernel_h", "kernel_w", "stride_h", "stride_w", "pad_h", "pad_w",
            "groups", "rows", "cols", "mode", "latency_ms")


def checked_per_group(per_group, setting: str = "per_group") -> int:
    """``per_group`` when it is a positive integer; else a one-line input error (0 or -1 sampled no row and the
    folds scored an empty table, exit 0; 2.5 took 2 rows, None was an SQL error)."""
    from lilou.errors import LilouInputError

    if isinstance(per_group, bool) or not isinstance(per_group, int) or per_group < 1:
        raise LilouInputError(f"{setting}={per_group}: give a positive whole number of rows per source, GPU, dtype "
                              "and family")
    return per_group


def sample_table(relation, per_group: int = 2000, mode: str = "forward") -> dict[str, list]:
    """At most ``per_group`` rows of ``mode`` (forward passes unless told) per (source, GPU, dtype, family), as
    ``{column: values}``."""
    per_group = checked_per_group(per_group)
    columns = ", ".join(f'"{c}"' for c in _COLUMNS)
    partition = "source, gpu, dtype, family"
    if mode not in ("forward", "backward-data"):
        raise ValueError(f"no sample of {mode!r} rows")
    sampled = relation.filter(f"mode = '{mode}'").project(
        f"{columns}, row_number() OVER (PARTITION BY {partition} ORDER BY hash(source, gpu, op, m, n, k, rows, cols, "
        f"in_c, out_c, in_h, latency_ms)) AS pick").filter(f"pick <= {per_group}").order(f"{partition}, pick")
    table = sampled.to_arrow_table()
    return {c: table.column(c).to_pylist() for c in _COLUMNS}
