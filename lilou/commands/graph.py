"""`lilou graph MODEL.onnx`: the annotated DAG, per node and in total."""
from __future__ import annotations

import argparse
from collections import defaultdict
from typing import TYPE_CHECKING

from lilou.commands._common import (add_format_option, add_shape_options, console, input_values, new_table, print_json,
                                    shape_overrides)
from lilou.graph.report import graph_to_json, human, shape_text

if TYPE_CHECKING:
    from rich.table import Table


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("graph", help="per-node ops, shapes, FLOPs and bytes of an ONNX model")
    parser.add_argument("model", help="path to an ONNX file")
    add_shape_options(parser)
    parser.add_argument("--all", action="store_true", help="the table also lists constant/shape-computing nodes "
                        "(the JSON lists every node, each with its constant flag)")
    add_format_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from lilou.graph.dag import load_graph

    graph = load_graph(args.model, batch=args.batch, shapes=shape_overrides(args), values=input_values(args))
    if args.format == "json":
        print_json(graph_to_json(graph))
        return 0
    out = console()
    nodes = graph.nodes_in_order() if args.all else graph.runtime_nodes()
    table = new_table(title=f"{graph.name}: {len(nodes)} nodes", show_lines=False)
    for column in ("node", "op", "output shape", "FLOPs", "read", "written"):
        table.add_column(column, justify="right" if column in ("FLOPs", "read", "written") else "left")
    for name in nodes:
        data = graph.dag.nodes[name]
        table.add_row(name, data["op"] + (" (const)" if data["constant"] else ""),
                      ", ".join(shape_text(t) for t in data["outputs"]),
                      human(data["flops"]), human(data["bytes_read"], "B"), human(data["bytes_written"], "B"))
    out.print(table)
    out.print(_by_op_table(graph, nodes))
    totals = graph.totals()
    inputs = ", ".join(f"{t.name}={shape_text(t)}" for t in graph.inputs)
    out.print(f"inputs: {inputs}")
    out.print(f"total: {totals['nodes']} runtime nodes, {human(totals['flops'], 'FLOPs')} "
              f"({totals['flops']:,}), {human(totals['bytes'], 'B')} moved")
    for warning in graph.warnings:
        out.print(f"[yellow]warning:[/yellow] {warning}")
    return 0


def _by_op_table(graph, nodes: list[str]) -> Table:
    flops: dict[str, int] = defaultdict(int)
    count: dict[str, int] = defaultdict(int)
    for name in nodes:
        data = graph.dag.nodes[name]
        flops[data["op"]] += data["flops"]
        count[data["op"]] += 1
    total = max(1, sum(flops.values()))
    table = new_table(title="by op type")
    for column in ("op", "nodes", "FLOPs", "share"):
        table.add_column(column, justify="left" if column == "op" else "right")
    for op in sorted(flops, key=lambda o: -flops[o]):
        table.add_row(op, str(count[op]), human(flops[op]), f"{100 * flops[op] / total:.1f} %")
    return table
