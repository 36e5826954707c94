"""`lilou plan MODEL.onnx --slo-ms T`: per GPU and MIG slice, the largest batch whose 90 % upper bound meets
the SLO, its throughput, memory fit, cost and Kubernetes resource (``--llm`` for decoder LLMs)."""
from __future__ import annotations

import argparse

from lilou.commands._common import (add_backend_option, add_columns, add_format_option, add_launch_gap_option,
                                    add_precision_options, add_value_option, check_plot_path, console, input_values,
                                    launch_gap_ms, new_table, precision_cell, precision_legend, print_json,
                                    shape_overrides, warn)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan", help="capacity plan: the device, batch and cost that meet a latency SLO",
        description="For every GPU and MIG slice (or the listed ones): the largest batch whose 90 % upper "
                    "bound meets the SLO, its throughput, memory fit, $ per million inferences (with --prices) "
                    "and the Kubernetes resource that requests it; sorted by cost, or by throughput without "
                    "prices. The graph is read once per batch, not once per device.")
    parser.add_argument("model", help="ONNX file, or with --llm a built-in LLM name or a config.json")
    parser.add_argument("--slo-ms", type=float, default=None, metavar="T",
                        help="end-to-end latency SLO (ms); required, but with --llm (which takes --itl-slo-ms)")
    parser.add_argument("--gpus", default=None, metavar="a,b,...",
                        help="GPUs (whole) and MIG slices as GPU/PROFILE, e.g. a10g,t4,a100-80gb/1g.10gb "
                             "(default: every GPU and MIG profile)")
    parser.add_argument("--batches", default=None, metavar="1,2,4,...",
                        help="batch sizes to try; without it each device's largest batch that meets the SLO(s) and "
                             "fits is searched exactly, from the ladder 1,4,16,64,256 (an ONNX plan: 1,2,4,...,256) up "
                             "to what its memory holds (an ONNX plan searches its first 4 rows exactly, the others to "
                             "the ladder's rung; a model whose batch is fixed in the file tries 1,2,4,...,128). An "
                             "ONNX plan's batch is the one priced with the most inferences/s at the upper bound "
                             "within the SLO, the largest beside it (JSON max_batch)")
    parser.add_argument("--prices", default=None, metavar="FILE.csv",
                        help="CSV with a header line device,usd_per_hour; MIG slices without a line cost their "
                             "GPU's price times their share of its compute slices")
    parser.add_argument("--plot", default=None, metavar="OUT.png",
                        help="also write latency and its interval against batch per device, with the SLO line")
    parser.add_argument("--shape", action="append", default=[], metavar="INPUT=D1xD2...",
                        help="set one input's full shape, e.g. input_ids=1x512, or a named dynamic dimension in "
                             "every input, e.g. sequence_length=512; the leading dim follows each batch tried "
                             "(repeatable)")
    add_value_option(parser)
    add_precision_options(parser)
    add_backend_option(parser)
    add_launch_gap_option(parser)
    llm = parser.add_argument_group("decoder LLMs (lilou llm)")
    llm.add_argument("--llm", action="store_true", help="MODEL is a decoder LLM: plan over `lilou llm`")
    llm.add_argument("--itl-slo-ms", type=float, default=None, metavar="T", help="inter-token latency SLO (ms)")
    llm.add_argument("--ttft-slo-ms", type=float, default=None, metavar="T",
                     help="time-to-first-token SLO (ms), optional: a batch is kept only where the TTFT's 90 %% upper "
                          "bound meets it too; TTFT is lilou llm's at that batch, the prefill of `batch` prompts "
                          "arriving together: the first token of the last of a burst of `batch` requests, the worst "
                          "case at that concurrency (JSON: ttft_kind \"burst\")")
    llm.add_argument("--input-len", type=int, default=None, metavar="I", help="prompt tokens per request")
    llm.add_argument("--output-len", type=int, default=None, metavar="O", help="generated tokens per request")
    llm.add_argument("--dtype", default=None, metavar="D", help="LLM weight/compute dtype (default: lilou llm's)")
    llm.add_argument("--kv-dtype", default=None, metavar="D", help="KV-cache dtype (default: lilou llm's)")
    llm.add_argument("--tp", default=None, metavar="N[,N...]",
                     help="tensor-parallel GPUs per replica (default 1): each device is planned as a group of N, "
                          "priced as N; several (2,4,8) plan each device at each, compared by cost")
    llm.add_argument("--engine", default="vllm", choices=("vllm", "hf"), help="serving engine (default vllm)")
    add_format_option(parser)
    parser.set_defaults(handler=run, quick_exit=True)  # lilou.cli.entry: leave without teardown


def run(args: argparse.Namespace) -> int:
    from lilou.errors import LilouInputError
    from lilou.plan.planner import parse_batches

    check_plot_path(args.plot)
    gpus = None if args.gpus is None else args.gpus.split(",")
    batches = parse_batches(args.batches)
    prices = None
    if args.prices is not None:
        from lilou.plan.prices import read_prices

        prices = read_prices(args.prices)
    if args.llm:
        if args.launch_gap_us is not None:
            raise LilouInputError("--launch-gap-us applies to ONNX models; with --llm the engine's host time is "
                                  "lilou llm's own (--engine)")
        if args.value:
            raise LilouInputError("--value applies to ONNX models; lilou llm prices a decoder step by step itself")
        onnx_only = [option for option, given in (("--slo-ms", args.slo_ms is not None), ("--shape", bool(args.shape)),
                                                   ("--precision", args.precision is not None),
                                                   ("--tf32", args.tf32 is not None), ("--backend", args.backend != "eager"))
                     if given]
        if onnx_only:  # an LLM plan with --precision fp32 was priced in BF16 without a word (as the service was)
            verb = "applies" if len(onnx_only) == 1 else "apply"
            raise LilouInputError(f"{', '.join(onnx_only)} {verb} to ONNX models; with --llm a decoder LLM is planned "
                                  "with --itl-slo-ms, --input-len and --output-len, its precision set by --dtype")
        plan = _plan_llm(args, gpus, batches, prices)
    else:
        from lilou.api import Predictor
        from lilou.plan.planner import plan_model

        llm_only = [option for option, value in (("--itl-slo-ms", args.itl_slo_ms),
                                                  ("--ttft-slo-ms", args.ttft_slo_ms), ("--input-len", args.input_len),
                                                  ("--output-len", args.output_len), ("--dtype", args.dtype),
                                                  ("--kv-dtype", args.kv_dtype), ("--tp", args.tp))
                    if value is not None]
        if llm_only:
            verb = "applies" if len(llm_only) == 1 else "apply"
            raise LilouInputError(f"{', '.join(llm_only)} {verb} with --llm (a decoder LLM planned over lilou llm); an "
                                  "ONNX model is planned with --slo-ms T, its precision set by --precision")
        _refuse_a_built_in_llm(args.model)
        if args.slo_ms is None:
            raise LilouInputError("plan needs --slo-ms T (or --llm MODEL --itl-slo-ms T --input-len I --output-len O)")
        predictor = Predictor(backend=args.backend, launch_gap_ms=launch_gap_ms(args))
        plan = plan_model(args.model, args.slo_ms, gpus=gpus, batches=batches, prices=prices, predictor=predictor,
                          shapes=shape_overrides(args), precision=args.precision, tf32=args.tf32,
                          values=input_values(args))
    if args.plot:
        from lilou.plan.plot import plot_plan

        plot_plan(plan, args.plot)
    if args.format == "json":
        print_json(plan.to_json())
        for message in plan.warnings:
            warn(message)
        if plan.message:
            warn(plan.message)
        return 0
    _print_table(plan)
    if args.plot:
        console().print(f"wrote {args.plot}")
    return 0


def _refuse_a_built_in_llm(model: str) -> None:
    """A built-in LLM's name without --llm was read as an ONNX file's path: "no such file: llama-3.1-8b"."""
    import os

    from lilou.errors import LilouInputError
    from lilou.llm.config import builtin_name

    name = None if os.path.lexists(model) else builtin_name(model)
    if name is not None:
        raise LilouInputError(f"no such file: {model}; it names the built-in LLM {name}: plan it with "
                              "--llm --itl-slo-ms T --input-len I --output-len O")


def _plan_llm(args, gpus, batches, prices):
    from lilou.errors import LilouInputError
    from lilou.plan.planner import parse_tps, plan_llm

    missing = [flag for flag, value in (("--itl-slo-ms", args.itl_slo_ms), ("--input-len", args.input_len),
                                        ("--output-len", args.output_len)) if value is None]
    if missing:
        raise LilouInputError(f"plan --llm needs {', '.join(missing)}")
    return plan_llm(args.model, args.itl_slo_ms, input_len=args.input_len, output_len=args.output_len, gpus=gpus,
                    batches=batches, prices=prices, dtype=args.dtype, engine=args.engine,
                    tp=1 if args.tp is None else parse_tps(args.tp), kv_dtype=args.kv_dtype, ttft_slo_ms=args.ttft_slo_ms)


def _print_table(plan) -> None:
    out = console()
    llm = plan.kind == "llm"
    what = "ITL SLO" if llm else "SLO"
    if llm and plan.ttft_slo_ms is not None:
        what = f"ITL SLO of {plan.slo_ms:g} ms and the TTFT SLO of {plan.ttft_slo_ms:g} ms (90 % upper bounds)"
    else:
        what = f"{what} of {plan.slo_ms:g} ms (90 % upper bound)"
    order = "cheapest first ($ at the upper bound's throughput)" if plan.sort == "cost" else \
        "highest throughput at the upper bound first"
    if plan.entries:
        searched = ("batch: of those priced that meet the SLO(s) and fit, the most tokens/s at the bound; the largest "
                    "(JSON max_batch) searched batch by batch; "
                    if plan.batch_search == "exact" else "")
        caption = (f"{searched}ITL: with --engine vllm, the steady state of a server keeping `batch` requests running "
                   "(lilou llm's steady_state, prompts chunked in); with --engine hf, the static batch's decode step. "
                   "TTFT: lilou llm's at that batch, the prefill of `batch` prompts arriving together, when the last "
                   "of the burst gets its first token (estimate, 90 % upper bound)") if llm else _onnx_caption(plan)
        groups = f" (in groups of {plan.tp}, tensor-parallel)" if plan.tp > 1 else ""
        considered = f"{len(plan.devices)} devices"
        if plan.tps:
            degrees = ", ".join(str(t) for t in plan.tps[:-1]) + f" or {plan.tps[-1]}"
            considered, groups = f"{len(plan.devices) * len(plan.tps)} configurations", \
                f" (each device in tensor-parallel groups of {degrees})"
        table = new_table(title=f"{plan.model}: {len(plan.entries)} of {considered}{groups} meet the "
                          f"{what}, {order}", caption=caption)
        rate = "tokens/s" if llm else "inf/s"
        # the bound's throughput first: the order and the cost follow it (the estimate's alone looked unsorted)
        most = not llm and plan.batch_search == "exact"  # an ONNX plan's searched batches: the largest, beside
        columns = ["#", "device", "k8s resource", "batch", *(["max batch"] if most else []), "ITL ms" if llm else "ms",
                   "90 % interval",
                   *(["TTFT ms (bound)"] if llm else []), f"{rate} at bound", f"{rate} at estimate", "memory GiB"]
        if plan.sort == "cost":
            columns += ["$/h", "$/M tokens" if llm else "$/M inf"]
        rows = []
        for i, entry in enumerate(plan.entries, 1):
            point = entry.point
            resource = _resource(entry) if entry.gpus == 1 else f"{entry.gpus} x {_resource(entry)}"
            largest = f"{entry.max_batch}+" if entry.exact is False else str(entry.max_batch)
            row = [str(i), entry.device.name, resource, str(point.batch), *([largest] if most else []),
                   f"{point.latency_ms:.3f}",
                   f"{point.interval_ms[0]:.3f}-{point.interval_ms[1]:.3f}",
                   *([_ttft(point)] if llm else []),
                   f"{entry.throughput_per_s_at_upper:,.1f}", f"{entry.throughput_per_s:,.1f}",
                   f"{point.memory_gb:.2f} / {round(entry.device.memory_gib, 2):g}"]
            if plan.sort == "cost":
                cost = entry.usd_per_million
                row += ["-" if entry.usd_per_hour is None else _usd(entry.usd_per_hour),
                        "-" if cost is None else _usd(cost)]
            rows.append(row)
        paths = [entry.point.precision_path for entry in plan.entries]
        if any(path not in (None, "native") for path in paths):  # weight-only FP8 on an A100 says so on its row
            columns.insert(3, "precision")
            for row, entry in zip(rows, plan.entries):
                row.insert(3, precision_cell(entry.point.precision, entry.point.precision_path))
        add_columns(table, columns, rows, out.width, identifying=("device", "k8s resource"))
        for row in rows:
            table.add_row(*row)
        out.print(table)
        for line in precision_legend(paths):
            out.print(line, markup=False)
        if plan.left_out:
            out.print(plan.left_out, markup=False)
    else:
        out.print(plan.message)
    for message in plan.warnings:
        out.print(f"[yellow]warning:[/yellow] {message}")


def _onnx_caption(plan) -> str | None:
    """How an ONNX plan's batches were chosen and, when searched, found."""
    caption = ("batch: of the batches priced that meet the SLO and fit, the one with the most inferences/s at the bound "
               "(ties: the larger)")
    if plan.batch_search != "exact":
        return caption
    ladder = ", ".join(str(b) for b in plan.batches)
    caption += "; max batch: the largest that meets the SLO and fits, searched batch by batch"
    if any(entry.exact is False for entry in plan.entries):
        # (the exact ones are the ladder's best rows, which the searched batches may reorder: "the first" was wrong)
        caption += (f" for {sum(bool(entry.exact) for entry in plan.entries)} of the {len(plan.entries)} rows; one "
                    f"marked + is the largest of the ladder {ladder} that does (a larger one may too)")
    return caption


def _ttft(point) -> str:
    """An LLM plan's TTFT cell: the estimate and, in brackets, the 90 % upper bound its SLO is held to."""
    from lilou.plan.planner import ttft_upper

    if point.ttft_ms is None:
        return "-"
    return f"{point.ttft_ms:,.0f}" + ("" if point.ttft_interval_ms is None else f" ({ttft_upper(point):,.0f})")


def _usd(value: float) -> str:
    """3 decimals, or 2 significant digits below a tenth of a cent (not 0.000)."""
    return f"{value:,.3f}" if value >= 0.0005 else f"{value:.2g}"


def _resource(entry) -> str:
    from lilou.plan.kubernetes import resource_name

    return resource_name(entry.device)
