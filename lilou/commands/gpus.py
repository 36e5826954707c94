"""`lilou gpus [NAME...]`: the GPU database, MIG profiles included (``--format json``: every field)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from lilou.commands._common import add_format_option, console, new_table, print_json, warn
from lilou.hardware import GPUSpec, all_gpus, find_gpu

if TYPE_CHECKING:
    from rich.table import Table


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("gpus", help="list the known GPUs and their MIG profiles")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="show only these GPUs (any alias, e.g. a10g, 'NVIDIA A100 80GB PCIe')")
    add_format_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from lilou.caveats import ambiguity_notes

    gpus = [find_gpu(name) for name in args.names] if args.names else all_gpus()
    for note in ambiguity_notes(args.names):  # a100: which board is shown, and the others the name could mean
        warn(note)
    if args.format == "json":
        print_json([gpu.to_dict() for gpu in gpus])
    else:
        out = console()
        out.print(_table(gpus))
        if any(gpu.supports_mig for gpu in gpus):
            out.print(_mig_table(gpus))
    return 0


def _table(gpus: list[GPUSpec]) -> Table:
    table = new_table(title=f"{len(gpus)} GPUs",
                      caption="FP32 / TC (tensor cores, FP32 accumulate): dense peak TFLOPS; - where the unit or dtype "
                              "is absent; CC: compute capability; MIG: profiles")
    table.add_column("name", no_wrap=True)
    table.add_column("arch", no_wrap=True)
    for column in ("CC", "SMs", "clock MHz", "memory GB"):
        table.add_column(column, justify="right")
    table.add_column("memory")
    for column in ("GB/s", "L2 MB", "FP32", "FP16 TC", "BF16 TC", "FP8 TC", "MIG"):
        table.add_column(column, justify="right")
    for gpu in gpus:
        peaks = gpu.peak_tflops
        table.add_row(
            gpu.name,
            gpu.architecture,
            gpu.compute_capability,
            str(gpu.sms),
            str(gpu.boost_clock_mhz),
            _number(gpu.memory_gb),
            gpu.memory_type,
            _number(gpu.memory_bandwidth_gbs),
            _number(gpu.l2_mb),
            _number(gpu.fp32_tflops),
            _optional(gpu.tensor_tflops),
            _optional(peaks["bf16_tensor"]),
            _optional(peaks["fp8_tensor"]),
            str(len(gpu.mig_profiles)) if gpu.supports_mig else "-",
        )
    return table


def _mig_table(gpus: list[GPUSpec]) -> Table:
    """The MIG profiles of the GPUs that have them, one row per GPU."""
    table = new_table(title="MIG profiles")
    table.add_column("name", no_wrap=True)
    table.add_column("MIG profiles")
    for gpu in gpus:
        if gpu.supports_mig:
            table.add_row(gpu.name, ", ".join(profile.name for profile in gpu.mig_profiles))
    return table


def _number(value: float) -> str:
    """Figures as the datasheets print them: 40, 5.5, 547.6 (no trailing .0)."""
    return f"{value:g}"


def _optional(value: float | None) -> str:
    """A peak, or "-" where the unit or dtype does not exist."""
    return "-" if value is None else _number(value)
