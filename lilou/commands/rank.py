"""`lilou rank MODEL.onnx [--gpus a,b,...]`: predicted latency on every GPU and MIG slice, fastest first."""
from __future__ import annotations

import argparse

from lilou.commands._common import (add_backend_option, add_columns, add_format_option, add_launch_gap_option,
                                    add_precision_options, add_shape_options, console, input_values, launch_gap_ms,
                                    new_table, precision_cell, precision_legend, print_json, shape_overrides, warn)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "rank", help="rank GPUs and MIG slices by predicted latency",
        description="Predicted end-to-end latency of an ONNX model on every GPU and MIG slice of the database "
                    "(or the listed ones), fastest first. The graph is read and grouped into kernels once.")
    parser.add_argument("model", help="path to an ONNX file")
    parser.add_argument("--gpus", default=None, metavar="a,b,...",
                        help="comma-separated GPUs (whole GPU) and MIG slices as GPU/PROFILE, "
                             "e.g. a10g,t4,a100-80gb/1g.10gb (default: every GPU and MIG profile)")
    add_shape_options(parser)
    add_precision_options(parser)
    add_backend_option(parser)
    add_launch_gap_option(parser)
    add_format_option(parser)
    parser.set_defaults(handler=run, quick_exit=True)  # lilou.cli.entry: leave without teardown


def run(args: argparse.Namespace) -> int:
    from lilou.graph.reading import read_graph

    gpus = None if args.gpus is None else args.gpus.split(",")
    gap = launch_gap_ms(args)
    # The file is shaped in a child process from here on, while the predictor is imported and loaded.
    with read_graph(args.model, batch=args.batch, shapes=shape_overrides(args), values=input_values(args),
                    backend=args.backend) as reading:
        from lilou.api import Predictor

        predictor = Predictor(backend=args.backend, launch_gap_ms=gap)
        ranking = predictor.rank(reading, gpus=gpus, precision=args.precision, tf32=args.tf32)
    if args.format == "json":
        print_json(ranking.to_json())
        for message in ranking.warnings:
            warn(message)
        return 0
    out = console()
    table = new_table(title=f"{ranking.model} ({ranking.backend}): {len(ranking)} devices, fastest first")
    columns = ["#", "gpu", "mig", "ms", "90 % interval", "GPU work ms", "extrapolated", "vs fastest"]
    fastest = ranking[0].latency_ms
    rows = [[str(i), entry.gpu, entry.mig or "-", f"{entry.latency_ms:.3f}",
             f"{entry.interval_ms[0]:.3f}-{entry.interval_ms[1]:.3f}", f"{entry.gpu_work_ms:.3f}",
             f"{100 * entry.extrapolated_share:.0f} %", f"{entry.latency_ms / fastest:.2f}x" if fastest else "-"]
            for i, entry in enumerate(ranking, 1)]
    paths = [entry.precision_path for entry in ranking]
    if any(path != "native" for path in paths):  # a device that does not run the format natively says so on its row
        columns.insert(3, "precision")
        for row, entry in zip(rows, ranking):
            row.insert(3, precision_cell(entry.precision, entry.precision_path))
    add_columns(table, columns, rows, out.width, identifying=("gpu", "mig"))  # a GPU's name is never cut
    for row in rows:
        table.add_row(*row)
    out.print(table)
    for line in precision_legend(paths):
        out.print(line, markup=False)
    for message in ranking.warnings:
        out.print(f"[yellow]warning:[/yellow] {message}")
    return 0
