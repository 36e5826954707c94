"""`lilou profile ops|model|check`: measure this machine's GPU (docs/profile.md).

`ops` times a sweep of single operators and writes them as kernel-table rows with their provenance (`lilou data add
DIR` then makes them part of the table the kernel model trains on); `model` times a zoo model end to end beside its
ONNX export; `check` puts Lilou's prediction beside such labels. Measuring needs torch (prediction does not)."""
from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from pathlib import Path

from lilou.commands._common import add_launch_gap_option, console, launch_gap_ms
from lilou.errors import LilouInputError

_DEVICE = re.compile(r"^(cpu|cuda(:\d{1,2})?)$")
#: The most input positions (batch x sequence, or batch x image side squared) `check` exports a label's model at: its
#: example inputs are real tensors (6 GiB of FP32 RGB images at this size), and a label's batch may reach 2**20.
MAX_LABEL_INPUT = 2**29


def _names(text: str, option: str) -> tuple[str, ...]:
    """A comma-separated option's names (each once); checked against the sweep's by :func:`op_sweep`."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise LilouInputError(f"{option}: name at least one, comma-separated")
    return names


def register(subparsers: argparse._SubParsersAction) -> None:
    from lilou.data.profiles import MODEL_DTYPES, TF32_MODES
    from lilou.profile.sweep import DTYPES, FAMILIES, SIZES

    parser = subparsers.add_parser("profile", help="measure operators on this machine's GPU (needs torch)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    ops = actions.add_parser("ops", help="time a sweep of GEMMs, convolutions, elementwise ops, softmax and "
                                         "layer norms; write kernel-table rows and their provenance")
    ops.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (a dry run: CPU rows never enter the "
                                                      "table) (default: cuda)")
    ops.add_argument("--out", required=True, metavar="DIR", help="folder for rows.csv and provenance.json")
    ops.add_argument("--families", default=",".join(FAMILIES), metavar="F,...",
                     help=f"op families to time (default: all of {', '.join(FAMILIES)})")
    ops.add_argument("--dtypes", default=",".join(DTYPES), metavar="D,...",
                     help=f"precisions (default: {', '.join(DTYPES)}; tf32 applies to gemm, bmm and conv)")
    ops.add_argument("--size", choices=SIZES, default="quick", help="quick (688 cases) or full (1,564)")
    ops.add_argument("--timing", choices=("eager", "graph", "both"), default="eager",
                     help="eager: CUDA events around each eager call, its launch included (NeuSight's method); "
                          "graph: CUDA-graph replay (no launch); both (default: eager)")
    ops.add_argument("--repeats", type=int, default=20, help="timed calls per case, median kept (default: 20)")
    ops.add_argument("--warmup", type=int, default=5, help="untimed calls first (default: 5)")
    ops.add_argument("--max-elements", type=int, default=None, metavar="N",
                     help="skip cases whose tensors hold more than N elements in all")
    ops.add_argument("--quiet", action="store_true", help="no progress line (there is none when stderr is not a "
                                                          "terminal)")
    ops.add_argument("--force", action="store_true", help="replace the rows.csv and provenance.json of a profile "
                                                          "already in --out")
    ops.set_defaults(handler=run_ops)

    model = actions.add_parser("model", help="time a zoo model's eager forward pass end to end; write the label "
                                             "with the model's weight-free ONNX export")
    model.add_argument("name", help="a zoo model (`lilou zoo list`)")
    model.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (a dry run) (default: cuda)")
    model.add_argument("--out", required=True, metavar="DIR", help="folder for label.json and model.onnx")
    model.add_argument("--batch", type=int, default=None, help="batch size (default: the zoo entry's)")
    model.add_argument("--seq", type=int, default=None, help="sequence length of a text model")
    model.add_argument("--image-size", type=int, default=None, help="image size of a vision model")
    model.add_argument("--dtype", choices=MODEL_DTYPES, default="fp32", help="precision (default: fp32)")
    model.add_argument("--tf32", choices=TF32_MODES, default="conv",
                       help="TF32 for FP32 math: conv (PyTorch's default), on, off (default: conv)")
    model.add_argument("--timing", choices=("eager", "graph"), default="eager",
                       help="eager: CUDA events around each forward call (default); graph: CUDA-graph replay")
    model.add_argument("--repeats", type=int, default=20, help="timed calls, median kept (default: 20)")
    model.add_argument("--warmup", type=int, default=5, help="untimed calls first (default: 5)")
    model.add_argument("--no-export", action="store_true", help="do not write model.onnx")
    model.set_defaults(handler=run_model)

    check = actions.add_parser("check", help="put Lilou's prediction beside the labels of `lilou profile model`")
    check.add_argument("folders", nargs="+", metavar="DIR", help="--out folders of `lilou profile model`")
    check.add_argument("--format", choices=("table", "json"), default="table", help="output format (default: table)")
    add_launch_gap_option(check)
    check.set_defaults(handler=run_check)


def run_ops(args: argparse.Namespace) -> int:
    from lilou.profile.sweep import op_sweep

    try:
        cases = op_sweep(_names(args.families, "--families"), _names(args.dtypes, "--dtypes"), args.size)
    except ValueError as exc:  # an unknown family or dtype, named with the known ones
        raise LilouInputError(str(exc)) from None
    if not _DEVICE.match(args.device):
        raise LilouInputError(f"--device {args.device!r}: give cuda, cuda:N or cpu")
    _check_counts(args)
    if args.max_elements is not None and args.max_elements <= 0:
        raise LilouInputError(f"--max-elements {args.max_elements}: out of range")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise LilouInputError(f"--out {out}: exists and is not a folder")
    from lilou.data.profiles import PROVENANCE_FILE, ROWS_FILE

    held = [name for name in (ROWS_FILE, PROVENANCE_FILE) if (out / name).exists()]
    if held and not args.force:
        raise LilouInputError(f"--out {out}: already holds a profile ({' and '.join(held)}); choose another --out, or "
                              "--force to replace it")
    _check_torch(args.device)
    timings = {"eager": ("cuda-events-eager",), "graph": ("cuda-graph-replay",),
               "both": ("cuda-events-eager", "cuda-graph-replay")}[args.timing]
    if args.device == "cpu":
        timings = ("host-timer-loop",)
    return _profile(args, cases, timings, out)


def _check_counts(args: argparse.Namespace) -> None:
    """--repeats 1 to 10,000 and --warmup 0 to 10,000."""
    for name in ("repeats", "warmup"):
        value = getattr(args, name)
        if not (0 <= value <= 10_000) or (name == "repeats" and value == 0):
            raise LilouInputError(f"--{name} {value}: out of range")


def run_model(args: argparse.Namespace) -> int:
    import json

    from lilou.data.profiles import PROVENANCE_FILE
    from lilou.profile.model import profile_model
    from lilou.profile.provenance import describe_device, provenance

    if not _DEVICE.match(args.device):
        raise LilouInputError(f"--device {args.device!r}: give cuda, cuda:N or cpu")
    _check_counts(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise LilouInputError(f"--out {out}: exists and is not a folder")
    from lilou.zoo.catalogue import get_entry

    get_entry(args.name)  # an unknown name fails before anything runs
    _check_torch(args.device)
    started = dt.datetime.now(dt.UTC)
    info = describe_device(args.device)
    timing = "host-timer-loop" if args.device == "cpu" else \
        {"eager": "cuda-events-eager", "graph": "cuda-graph-replay"}[args.timing]
    label = profile_model(args.name, args.device, info, args.batch, args.seq, args.image_size, args.dtype, args.tf32,
                          timing, args.repeats, args.warmup)
    out.mkdir(parents=True, exist_ok=True)
    if not args.no_export:
        from lilou.zoo.export import export_onnx

        target = out / "model.onnx"
        if target.exists():
            target.unlink()
        export_onnx(args.name, target, batch=label["batch"], seq=args.seq, image_size=args.image_size,
                    strip_weights=True)
        label["onnx"] = target.name
    (out / "label.json").write_text(json.dumps(label, indent=1) + "\n", encoding="utf-8")
    settings = {key: getattr(args, key) for key in ("batch", "seq", "image_size", "dtype", "tf32", "repeats", "warmup")}
    (out / PROVENANCE_FILE).write_text(json.dumps(provenance(info, ["lilou", *sys.argv[1:]], settings, started, 1, {}),
                                                  indent=1) + "\n", encoding="utf-8")
    shell = console()
    shell.print(f"{args.name} (batch {label['batch']}, {args.dtype}, TF32 {args.tf32}) on {info.name}: "
                f"{label['latency_ms']:.3f} ms ({label['latency_stat']}, {timing}) -> {out}", highlight=False)
    if info.kind != "cpu" and not args.no_export:
        precision = "" if args.dtype == "fp32" else f" --precision {args.dtype}"
        shell.print(f"  compare: lilou infer {out / 'model.onnx'} --gpu '{info.name}'{precision} --tf32 {args.tf32}",
                    highlight=False)
    return 0


def run_check(args: argparse.Namespace) -> int:
    """Each label beside `lilou infer` of its model on its GPU (or MIG slice), in its precision, TF32 mode and
    timing (a CUDA-graph replay is composed without host gaps)."""
    from lilou.api import Predictor
    from lilou.commands._common import print_json
    from lilou.data.profiles import database_gpu, read_model_label
    from lilou.zoo.catalogue import get_entry

    labels = [read_model_label(folder) for folder in args.folders]  # every folder checked before any work
    for label in labels:
        if label.kind == "cpu":
            raise LilouInputError(f"{label.folder}: measured on a CPU ({label.device}), a dry run; no GPU to compare")
        gpu = database_gpu(label.folder, label.gpu_name)
        try:
            entry = get_entry(label.model)
            if label.mig_profile:
                gpu.mig_profile(label.mig_profile)
        except LilouInputError as exc:
            raise LilouInputError(f"{label.folder}: {exc}") from None
        side = label.image_size or entry.image_size or 1
        if label.batch * max(label.seq or entry.seq or 1, side * side) > MAX_LABEL_INPUT:
            raise LilouInputError(f"{label.folder}: batch {label.batch} of {label.model} at these shapes is more than "
                                  f"{MAX_LABEL_INPUT:,} tokens or pixels, more than the export here can hold")
    predictor = Predictor()
    eager = predictor.with_launch_gap(launch_gap_ms(args))  # the labels' host, where its gap was measured
    rows = []
    for label in labels:
        onnx_path = _label_model(label)
        chosen = predictor.with_launch_gap(0.0) if label.timing == "cuda-graph-replay" else eager
        prediction = chosen.predict(str(onnx_path), label.gpu_name, mig=label.mig_profile,
                                    precision=None if label.dtype == "fp32" else label.dtype, tf32=label.tf32)
        low, high = prediction.interval_ms
        rows.append({"folder": str(label.folder), "model": label.model, "gpu": prediction.gpu, "mig": prediction.mig,
                     "batch": label.batch, "dtype": label.dtype, "tf32": label.tf32, "timing": label.timing,
                     "measured_ms": round(label.latency_ms, 4), "predicted_ms": prediction.latency_ms,
                     "ape_pct": round(100 * abs(prediction.latency_ms - label.latency_ms) / label.latency_ms, 2),
                     "interval_ms": [low, high], "inside": low <= label.latency_ms <= high,
                     "extrapolated_share": prediction.extrapolated_share})
    if args.format == "json":
        print_json(rows)
        return 0
    from lilou.commands._common import new_table

    table = new_table(title=f"{len(rows)} measured label(s) beside Lilou's prediction")
    for column in ("model", "device", "batch", "dtype", "measured ms", "predicted ms", "APE %", "90 % interval"):
        table.add_column(column, justify="left" if column in ("model", "device", "dtype") else "right")
    for row in rows:
        device = row["gpu"] + (f"/{row['mig']}" if row["mig"] else "")
        table.add_row(row["model"], device, str(row["batch"]), row["dtype"], f"{row['measured_ms']:.3f}",
                      f"{row['predicted_ms']:.3f}", f"{row['ape_pct']:.1f}",
                      f"{row['interval_ms'][0]:.3f}-{row['interval_ms'][1]:.3f}" + ("" if row["inside"] else " (out)"))
    shell = console()
    shell.print(table)
    mape = sum(row["ape_pct"] for row in rows) / len(rows)
    shell.print(f"MAPE {mape:.1f} %, {sum(row['inside'] for row in rows)}/{len(rows)} inside the 90 % interval",
                highlight=False)
    return 0


def _label_model(label) -> Path:
    """The label's ONNX model: its folder's ``model.onnx``, exported (weight-free, the zoo's) where absent."""
    target = label.folder / "model.onnx"
    if not target.is_file():
        from lilou.zoo.export import export_onnx

        print(f"lilou: exporting {label.model} (batch {label.batch}) to {target}", file=sys.stderr)
        export_onnx(label.model, target, batch=label.batch, seq=label.seq, image_size=label.image_size,
                    strip_weights=True)
    return target


def _check_torch(device: str) -> None:
    try:
        import torch
    except ImportError:
        raise LilouInputError("lilou profile needs PyTorch (pip install 'lilou[zoo]', or a torch "
                              "build for this machine's CUDA); prediction does not") from None
    if device == "cpu":
        return
    if not torch.cuda.is_available():
        raise LilouInputError(f"--device {device}: PyTorch sees no CUDA device on this machine (use --device cpu for "
                              "a dry run)")
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    if index >= torch.cuda.device_count():
        raise LilouInputError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")


def _profile(args: argparse.Namespace, cases, timings: tuple[str, ...], out: Path) -> int:
    from lilou.data.profiles import write_profile
    from lilou.profile.provenance import describe_device, provenance
    from lilou.profile.runner import profile_ops

    started = dt.datetime.now(dt.UTC)
    info = describe_device(args.device)

    live = not args.quiet and sys.stderr.isatty()

    def progress(index: int, case) -> None:
        if live:
            print(f"\r{index + 1}/{len(cases)} {case.family} {case.dtype}      ", end="", file=sys.stderr, flush=True)

    result = profile_ops(cases, args.device, info, timings, args.repeats, args.warmup, args.max_elements, progress)
    if live:
        print(file=sys.stderr)
    settings = {"families": args.families.split(","), "dtypes": args.dtypes.split(","), "size": args.size,
                "timing": list(timings), "repeats": args.repeats, "warmup": args.warmup,
                "max_elements": args.max_elements, "cases": len(cases)}
    write_profile(out, result.rows, provenance(info, ["lilou", *sys.argv[1:]], settings, started, len(result.rows),
                                               dict(result.skipped)))
    shell = console()
    shell.print(f"{len(result.rows)} rows measured on {info.name} ({info.kind}) -> {out}", highlight=False)
    for reason, count in sorted(result.skipped.items(), key=lambda item: -item[1]):
        shell.print(f"  skipped {count}: {reason}", highlight=False)
    if info.kind == "cpu":
        shell.print("  a CPU dry run: these rows are not GPU data and `lilou data add` refuses them", highlight=False)
    else:
        floor = launch_floor_us(result.rows)
        if floor is not None:
            shell.print(f"  this host's launch floor: {floor:.1f} us per eager call (median of its one-element calls); "
                        f"`lilou infer/rank/plan --launch-gap-us {floor:.1f}` composes models with it", highlight=False)
        shell.print(f"  next: lilou data add {out}", highlight=False)
    return 0


def launch_floor_us(rows: list[dict]) -> float | None:
    """The median eager time of the sweep's one-element elementwise calls (their GPU work is nothing): the host's
    issue time per kernel, what end-to-end composition calls the launch gap (lilou.latency.composition.overhead)."""
    import statistics

    tiny = [r["latency_ms"] for r in rows if r["timing"] == "cuda-events-eager" and r["family"] == "elementwise"
            and r["rows"] * r["cols"] == 1]
    return 1000 * statistics.median(tiny) if tiny else None
