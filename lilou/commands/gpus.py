"""`lilou gpus [NAME...]`: the GPU database, MIG profiles included."""
from __future__ import annotations

import argparse

from rich.table import Table

from lilou.commands._common import add_format_option, console, print_json
from lilou.hardware import GPUSpec, all_gpus, find_gpu


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("gpus", help="list the known GPUs and their MIG profiles")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="show only these GPUs (any alias, e.g. a10g, 'NVIDIA A100 80GB PCIe')")
    add_format_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    gpus = [find_gpu(name) for name in args.names] if args.names else all_gpus()
    if args.format == "json":
        print_json([gpu.to_dict() for gpu in gpus])
    else:
        console().print(_table(gpus))
    return 0


def _table(gpus: list[GPUSpec]) -> Table:
    table = Table(title=f"{len(gpus)} GPUs")
    table.add_column("name", no_wrap=True)
    table.add_column("arch")
    for column in ("SMs", "clock MHz", "memory GB", "GB/s", "L2 MB", "FP32 TFLOPS", "FP16 tensor TFLOPS"):
        table.add_column(column, justify="right")
    table.add_column("MIG profiles")
    for gpu in gpus:
        table.add_row(
            gpu.name,
            gpu.architecture,
            str(gpu.sms),
            str(gpu.boost_clock_mhz),
            _number(gpu.memory_gb),
            _number(gpu.memory_bandwidth_gbs),
            _number(gpu.l2_mb),
            _number(gpu.fp32_tflops),
            "-" if gpu.tensor_tflops is None else _number(gpu.tensor_tflops),
            ", ".join(profile.name for profile in gpu.mig_profiles) or "-",
        )
    return table


def _number(value: float) -> str:
    """Figures as the datasheets print them: 40, 5.5, 547.6 (no trailing .0)."""
    return f"{value:g}"
