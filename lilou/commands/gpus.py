"""`lilou gpus [NAME...]`: the GPU database, MIG profiles included (``--format json``: every field).

A name ``GPU/PROFILE`` shows one MIG slice as the latency model sees it (:class:`lilou.hardware.Device`: the
slice's SMs, memory, share of bandwidth and L2, peaks scaled by its share of SMs)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from lilou.commands._common import add_format_option, console, new_table, print_json, warn
from lilou.hardware import Device, GPUSpec, all_gpus, find_gpu, resolve_device

if TYPE_CHECKING:
    from rich.table import Table


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("gpus", help="list the known GPUs and their MIG profiles")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="show only these GPUs (any alias, e.g. a10g, 'NVIDIA A100 80GB PCIe'), or one MIG "
                             "slice as GPU/PROFILE (a100-80gb/3g.40gb): its resources as the model sees them")
    add_format_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from lilou.caveats import ambiguity_notes

    slices = [name for name in args.names if "/" in name]
    found = [find_gpu(name) if "/" not in name else resolve_device(name.strip()) for name in args.names]
    for note in ambiguity_notes(args.names):  # a100: which board is shown
        warn(note)
    if args.format == "json":
        print_json([entry.to_dict() for entry in found] if args.names else [gpu.to_dict() for gpu in all_gpus()])
        return 0
    gpus = [entry for entry in found if isinstance(entry, GPUSpec)] if args.names else all_gpus()
    out = console()
    if gpus or not slices:
        out.print(_table(gpus))
    if any(gpu.supports_mig for gpu in gpus):
        out.print(_mig_table(gpus))
    if slices:
        out.print(_slice_table([entry for entry in found if isinstance(entry, Device)]))
    return 0


def _table(gpus: list[GPUSpec]) -> Table:
    table = new_table(title=f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}",
                      caption="FP32 / TC (tensor cores, FP32 accumulate): dense peak TFLOPS; - where the unit or dtype "
                              "is absent; CC: compute capability; MIG: profiles (unlisted: the GPU runs MIG, its profiles "
                              "are not in this database yet)")
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
            str(len(gpu.mig_profiles)) if gpu.supports_mig else "unlisted" if gpu.mig_unlisted else "-",
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


def _slice_table(devices: list[Device]) -> Table:
    """MIG slices as the latency model sees them: the slice's own SMs and memory, its share of the GPU's bandwidth and
    L2, and peaks scaled by its share of SMs."""
    table = new_table(title=f"{len(devices)} MIG slice{'s' if len(devices) != 1 else ''}",
                      caption="GiB seen: `nvidia-smi mig -lgip`'s memory, what fits are judged against (- : not in a "
                              "public listing, the nominal size is used); GB/s and L2: the slice's share of the GPU's; "
                              "FP32 / TC: dense peak TFLOPS scaled by the slice's share of SMs")
    table.add_column("slice", no_wrap=True)
    for column in ("SMs", "memory GB", "GiB seen", "GB/s", "L2 MB", "FP32", "FP16 TC", "BF16 TC", "FP8 TC",
                   "SM share"):
        table.add_column(column, justify="right")
    for device in devices:
        peaks = device.peak_tflops
        seen = "-" if device.memory_gib_source == "nominal" else _number(round(device.memory_gib, 2))
        table.add_row(device.name, str(device.sms), _number(device.memory_gb), seen,
                      _number(round(device.memory_bandwidth_gbs, 1)), _number(round(device.l2_mb, 2)),
                      _number(round(device.fp32_tflops, 1)), _optional(_rounded(peaks["fp16_tensor"])),
                      _optional(_rounded(peaks["bf16_tensor"])), _optional(_rounded(peaks["fp8_tensor"])),
                      f"{device.sm_fraction:.0%}")
    return table


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _number(value: float) -> str:
    """Figures as the datasheets print them: 40, 5.5, 547.6 (no trailing .0)."""
    return f"{value:g}"


def _optional(value: float | None) -> str:
    """A peak, or "-" where the unit or dtype does not exist."""
    return "-" if value is None else _number(value)
