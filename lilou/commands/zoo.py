"""`lilou zoo`: list the model zoo, export a zoo model to ONNX."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from lilou.commands._common import add_format_option, console, new_table, print_json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("zoo", help="list and export real architectures (random weights)")
    sub = parser.add_subparsers(dest="zoo_command", metavar="ACTION", parser_class=type(parser))
    sub.required = True

    list_parser = sub.add_parser("list", help="list the catalogue (generators accept any seed)")
    add_format_option(list_parser)
    list_parser.set_defaults(handler=_list)

    export = sub.add_parser("export", help="export a zoo model to ONNX")
    export.add_argument("name", metavar="NAME", help="catalogue name or <generator>-<seed>, e.g. resnet50, cnn-7")
    export.add_argument("-o", "--output", required=True, type=Path, metavar="FILE", help="ONNX file to write")
    export.add_argument("--batch", type=int, help="batch size (default: the entry's)")
    export.add_argument("--seq", type=int, help="sequence length of text models (default: the entry's)")
    export.add_argument("--image-size", type=int, help="image side of vision models (default: the entry's)")
    export.add_argument("--strip-weights", action="store_true",
                        help="keep initializer names/shapes but not their bytes (small file, no weight memory)")
    export.add_argument("--optimize", action="store_true",
                        help="run the exporter's optimiser (folds BatchNorm/Pad into Conv; not what eager runs)")
    export.add_argument("--torchscript", action="store_true", help="use the TorchScript exporter instead of dynamo")
    export.add_argument("--dynamic-batch", action="store_true",
                        help="export the batch dim as a symbol, so `lilou graph --batch N` can set it")
    export.add_argument("-v", "--verbose", action="store_true", help="show the exporter's own messages")
    export.set_defaults(handler=_export)


def _list(args: argparse.Namespace) -> int:
    from lilou.zoo.catalogue import list_models

    entries = list_models()
    if args.format == "json":
        print_json([dataclasses.asdict(entry) for entry in entries])
        return 0
    table = new_table("name", "family", "kind", "batch", "seq", "image", "description")
    for e in entries:
        table.add_row(e.name, e.family, e.kind, str(e.batch), str(e.seq or "-"), str(e.image_size or "-"),
                      e.description)
    console().print(table)
    return 0


def _export(args: argparse.Namespace) -> int:
    from lilou.zoo.catalogue import get_entry

    get_entry(args.name)  # unknown names fail here, before torch is imported (or found missing)
    from lilou.zoo.export import check_destination, export_onnx

    check_destination(args.output)  # and an unwritable destination, before minutes of export work
    path = export_onnx(
        args.name,
        args.output,
        batch=args.batch,
        seq=args.seq,
        image_size=args.image_size,
        strip_weights=args.strip_weights,
        optimize=args.optimize,
        dynamo=not args.torchscript,
        dynamic_batch=args.dynamic_batch,
        verbose=args.verbose,
    )
    size_kb = path.stat().st_size / 1024
    console().print(f"wrote {path} ({size_kb:,.0f} KiB{', weights stripped' if args.strip_weights else ''})")
    return 0
