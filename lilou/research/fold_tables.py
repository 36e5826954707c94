"""Tables of the benchmarks: rich tables on the console, and the kernel-table folds as markdown.

Shared by ``scripts/bench_kernels.py`` (the shipped model on the kernel table's folds) and
``scripts/bench_kernel_table.py`` (the model trained on the whole table), so both print the same layout.
"""
from __future__ import annotations

from rich.console import Console
from rich.table import Table


TEXT_COLUMNS = ("family", "gpu", "split", "predictor", "source", "dtype", "architecture", "worst_gpu")


def print_table(title: str, rows: list[dict], columns: list[str]) -> None:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="left" if column in TEXT_COLUMNS else "right")
    for row in rows:
        table.add_row(*[(f"{row[c]:.2f}" if c.endswith("_scale") else f"{row[c]:.1f}") if isinstance(row.get(c), float)
                        else str(row.get(c, "-")) for c in columns])
    Console(width=200).print(table)


def markdown_folds(result: dict) -> str:
    """The part-5 tables as markdown (outputs/bench/kernel_folds.md; pasted into docs/kernel_model.md)."""
    def table(rows: list[dict], columns: list[str]) -> list[str]:
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        for row in rows:
            cells = [f"{row[c]:.1f}" if isinstance(row.get(c), float) else str(row.get(c, "-")) for c in columns]
            lines.append("| " + " | ".join(cells) + " |")
        return lines

    out = [f"{result['sampled_rows']:,} rows sampled (at most {result['per_group']} per source x GPU x dtype x family), "
           f"{result['priced_rows']:,} of a family the model prices.", "",
           "Leave-one-GPU-out (GPUs with >= 500 rows of the family; MAPE % is the mean over them of each GPU's MAPE):",
           ""]
    extra = ["neusight_mape"] if any("neusight_mape" in r for r in result["per_architecture"]) else []
    out += table(result["leave_one_gpu_out"], ["source", "dtype", "family", "gpus", "rows", "model_mape",
                                               "model_median_ape", "roofline_mape", *extra, "worst_gpu",
                                               "worst_gpu_mape"])
    out += ["", "Leave-one-architecture-out, all priced rows of each architecture (MAPE %):", ""]
    out += table(result["per_architecture"], ["architecture", "gpus", "rows", "model_mape", "model_median_ape",
                                              "roofline_mape", *extra])
    out += ["", "Leave-one-architecture-out by dtype and family (MAPE %):", ""]
    out += table(result["leave_one_architecture_out"], ["architecture", "dtype", "family", "gpus", "rows",
                                                        "model_mape", "model_median_ape", "roofline_mape", *extra])
    return "\n".join(out) + "\n"


def print_table_folds(result: dict) -> None:
    extra = ["neusight_mape"] if any("neusight_mape" in r for r in result["per_architecture"]) else []
    print(f"kernel table: {result['sampled_rows']:,} rows sampled (at most {result['per_group']} per source x GPU x "
          f"dtype x family), {result['priced_rows']:,} priced; not priced: {result['skipped']}")
    print_table("whole kernel table, leave-one-GPU-out (GPUs with >= 500 rows; mean over them of each GPU's MAPE %)",
                result["leave_one_gpu_out"], ["source", "dtype", "family", "gpus", "rows", "model_mape",
                                              "model_median_ape", "roofline_mape", *extra, "worst_gpu",
                                              "worst_gpu_mape"])
    print_table("whole kernel table, leave-one-architecture-out (MAPE %)", result["per_architecture"],
                ["architecture", "gpus", "rows", "model_mape", "model_median_ape", "roofline_mape", *extra])
    print_table("leave-one-architecture-out by dtype and family (MAPE %)", result["leave_one_architecture_out"],
                ["architecture", "dtype", "family", "gpus", "rows", "model_mape", "model_median_ape", "roofline_mape",
                 *extra])
