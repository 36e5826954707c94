"""`lilou infer MODEL.onnx --gpu NAME`: predicted end-to-end latency, kernel by kernel."""
from __future__ import annotations

import argparse
import csv
import sys

from lilou.commands._common import (add_backend_option, add_format_option, add_launch_gap_option, add_precision_options,
                                    add_shape_options, check_plot_path, console, input_values, launch_gap_ms, new_table,
                                    print_json, shape_overrides, shorten, warn)
from lilou.graph.report import human


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "infer", help="predict end-to-end latency of a model on a GPU or MIG slice",
        description="Predict the inference latency of an ONNX model on one GPU or MIG slice, without the "
                    "GPU: kernel groups of the backend -> per-kernel latency -> sum with launch overhead. "
                    "Weight-free ONNX files work.")
    parser.add_argument("model", help="path to an ONNX file")
    parser.add_argument("--gpu", required=True, metavar="NAME", help="GPU name or alias, e.g. a10g (see `lilou gpus`)")
    parser.add_argument("--mig", metavar="PROFILE", default=None, help="MIG profile of that GPU, e.g. 1g.10gb")
    add_shape_options(parser)
    add_precision_options(parser)
    add_backend_option(parser)
    add_launch_gap_option(parser)
    add_format_option(parser, ("table", "json", "csv"))
    parser.add_argument("--plot", metavar="OUT.png", default=None,
                        help="also write a bar chart of the kernels with the most predicted time")
    parser.add_argument("--top", type=int, default=10, metavar="N", help="kernels listed in the table (default 10)")
    parser.set_defaults(handler=run, quick_exit=True)  # lilou.cli.entry: leave without teardown


def run(args: argparse.Namespace) -> int:
    from lilou.graph.reading import read_graph

    check_plot_path(args.plot)
    if args.top < 0:
        from lilou.errors import LilouInputError

        raise LilouInputError(f"--top {args.top}: give the number of kernels the table lists, 0 or more")

    gap = launch_gap_ms(args)
    # The file is shaped in a child process from here on, while the predictor is imported and loaded.
    with read_graph(args.model, batch=args.batch, shapes=shape_overrides(args), values=input_values(args),
                    backend=args.backend) as reading:
        from lilou.api import Predictor

        predictor = Predictor(backend=args.backend, launch_gap_ms=gap)
        prediction = predictor.predict(reading, gpu=args.gpu, mig=args.mig, precision=args.precision, tf32=args.tf32)
    if args.plot:
        from lilou.report.plot import plot_breakdown

        plot_breakdown(prediction, args.plot)
    if args.format == "json":
        print_json(prediction.to_json())
    elif args.format == "csv":
        _write_csv(prediction)
        for message in prediction.warnings:
            warn(message)
    else:
        _print_table(prediction, args.top)
    if args.plot and args.format == "table":
        console().print(f"wrote {args.plot}")
    return 0


#: latency_ms = launch_wait_ms + gpu_ms (the kernel's GPU time in the running model, KernelEstimate.work_ms: work_ms
#: times the back-to-back scale `make fit-e2e` fitted; docs/end_to_end.md); work_ms is the kernel model's time for
#: the kernel timed alone (KernelEstimate.alone_ms).
CSV_COLUMNS = ("index", "ops", "nodes", "type", "category", "bound", "fallback", "latency_ms", "launch_wait_ms",
               "gpu_ms", "work_ms", "flops", "bytes")


def _write_csv(prediction) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for i, k in enumerate(prediction.kernels):
        writer.writerow([i, "+".join(k.ops), " ".join(k.nodes), k.type, k.category, k.bound, int(k.fallback),
                         f"{k.latency_ms:.6f}", f"{k.host_wait_ms:.6f}", f"{k.latency_ms - k.host_wait_ms:.6f}",
                         f"{k.alone_ms:.6f}", k.flops, k.bytes])


def _print_table(prediction, top: int) -> None:
    out = console()
    device = prediction.gpu if prediction.mig is None else f"{prediction.gpu} MIG {prediction.mig}"
    batch = "" if prediction.batch is None else f", batch {prediction.batch}"
    table = new_table(title=f"top {min(top, len(prediction.kernels))} of {len(prediction.kernels)} kernels by predicted time")
    for column in ("#", "ops", "first node", "type", "bound", "ms", "90 % interval", "launch wait", "share"):
        table.add_column(column, justify="right" if column in ("#", "ms", "90 % interval", "launch wait", "share")
                         else "left")
    order = {id(k): i for i, k in enumerate(prediction.kernels)}
    total = sum(k.latency_ms for k in prediction.kernels) or 1.0  # the kernels' own sum: the total is rounded
    for k in prediction.top(top):
        ops = "+".join(dict.fromkeys(k.ops))
        table.add_row(str(order[id(k)]), shorten(ops, 40), shorten(k.nodes[0], 40),
                      k.type, k.bound, f"{k.latency_ms:.4f}",
                      f"{k.interval_ms[0]:.4f}-{k.interval_ms[1]:.4f}" + (" *" if k.extrapolated else ""),
                      f"{k.host_wait_ms:.4f}",
                      f"{100 * k.latency_ms / total:.1f} %")
    if top:
        out.print(table)
    # TF32 is what FP32 convolutions and matmuls run in: said of FP32 models (the JSON carries it always)
    tf32 = f", TF32 {prediction.tf32}" if prediction.precision in ("fp32", "tf32") else ""
    out.print(f"[bold]{prediction.model}[/bold] on [bold]{device}[/bold] ({prediction.backend}{batch}, "
              f"{prediction.precision.upper()}{tf32}): "
              f"[bold]{prediction.latency_ms:.3f} ms[/bold] (90 % interval {prediction.interval_ms[0]:.3f} to "
              f"{prediction.interval_ms[1]:.3f} ms), {len(prediction.kernels)} kernels, "
              f"{human(sum(k.flops for k in prediction.kernels), 'FLOPs')}")
    if prediction.precision_path != "native":  # weight-only, emulated, or no runtime runs it (a lower bound)
        out.print(f"precision path: {prediction.precision_path.replace('_', ' ')}: {prediction.precision_note}",
                  markup=False)
    extrapolated = [k for k in prediction.kernels if k.extrapolated]
    out.print(f"extrapolated: {len(extrapolated)} kernels (* in the table: outside the measured range for this GPU "
              f"class and dtype, or on the fallback), {100 * prediction.extrapolated_share:.1f} % of the predicted time")
    fallback = prediction.fallback_kernels
    out.print(f"fallback: {len(fallback)} kernels, {100 * prediction.fallback_share:.1f} % of the predicted time")
    out.print(f"launch-bound: the GPU waits for the host to launch kernels {100 * prediction.host_wait_share:.1f} % "
              "of the time")
    shares = sorted(prediction.category_shares().items(), key=lambda item: -item[1])
    out.print("by category (launch waits included): " + ", ".join(f"{name} {100 * share:.1f} %"
                                                                  for name, share in shares if share > 0))
    for message in prediction.warnings:
        out.print(f"[yellow]warning:[/yellow] {message}")
