"""`lilou fuse MODEL.onnx`: which ONNX nodes run together as one GPU kernel.

By default the fusion GNN predicts the groups from the graph alone; ``--oracle``
asks the backend's ground truth instead (eager: the dynamo exporter's metadata;
tvm: Apache TVM's own FuseOps), where it can run.
"""
from __future__ import annotations

import argparse

from lilou.commands._common import (add_format_option, add_shape_options, console, ellipsis, input_values, new_table,
                                    print_json, shape_overrides, warn)
from lilou.errors import LilouInputError
from lilou.fusion.backends import BACKENDS


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("fuse", help="predict kernel groups (fused ONNX nodes) for a backend")
    parser.add_argument("model", help="path to an ONNX file")
    parser.add_argument("--backend", default="eager", choices=BACKENDS,
                        help="runtime whose kernels are predicted (default: eager, PyTorch eager on CUDA)")
    parser.add_argument("--oracle", action="store_true",
                        help="the backend's ground-truth groups instead of the GNN's prediction")
    add_shape_options(parser)
    add_format_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from lilou.fusion.backends import check_backend
    from lilou.fusion.predict import predict_partition
    from lilou.graph.dag import load_graph
    from lilou.graph.loading import load_onnx
    from lilou.graph.names import synthetic_nodes

    backend = check_backend(args.backend)
    # the oracles label the file's own nodes: no batch norm folded into a convolution is put back for them (nor for
    # TVM's prediction: TVM compiles the file as written)
    graph = load_graph(args.model, batch=args.batch, shapes=shape_overrides(args), restore_folded=not args.oracle,
                       values=input_values(args), backend=backend)
    if not graph.runtime_nodes():
        raise LilouInputError(f"{args.model} has no nodes to run: nothing to fuse")
    if args.oracle:
        from lilou.fusion.oracles import oracle_partition

        partition = oracle_partition(args.backend, args.model, graph)
    else:
        partition = predict_partition(graph, args.backend)
    warnings = [*graph.warnings, *partition.warnings]
    if not args.oracle:  # a fusion folder LILOU_CHECKPOINTS lacks is the shipped one: said, not silently swapped
        from lilou.checkpoints import FUSION_GNN, FUSION_RULES, checkpoint_notes

        warnings += checkpoint_notes((FUSION_GNN, FUSION_RULES))
    folded = list(graph.dag.graph.get("folded", ()))  # a quantized file's Q/DQ nodes, folded into the ops beside them
    if args.format == "json":
        # the contract's backend and kernels, with where the groups come from and what the table warns of
        payload = partition.to_json()
        if folded:
            payload["no_kernel"].append({"nodes": folded, "reason": "folded"})
        print_json({**payload, "source": partition.source, "warnings": warnings,
                    "synthetic_nodes": synthetic_nodes(load_onnx(args.model), graph)})
        for warning in warnings:
            warn(warning)
        return 0
    out = console()
    kernels = partition.kernels
    source = {"oracle": f"{args.backend} oracle", "gnn": "fusion GNN", "rules": "rule baseline"}[partition.source]
    table = new_table(title=f"{graph.name}: {len(kernels)} {args.backend} kernels ({source}), "
                      f"{len(graph.runtime_nodes())} runtime nodes")
    for column in ("#", "ops", "nodes"):
        table.add_column(column, justify="right" if column == "#" else "left")
    for i, kernel in enumerate(kernels):
        ops = " + ".join(graph.dag.nodes[n]["op"] for n in kernel.nodes)
        shown = ", ".join(kernel.nodes[:3]) + (f" {ellipsis()} (+{len(kernel.nodes) - 3})" if len(kernel.nodes) > 3 else "")
        table.add_row(str(i), ops, shown)
    out.print(table)
    silent = [g for g in partition.groups if not g.launches and g.reason == "view"]
    if silent:
        out.print(f"{sum(len(g.nodes) for g in silent)} view/metadata node(s) launch no kernel")
    if folded:
        out.print(f"{len(folded)} quantize/dequantize node(s) are folded into the ops beside them")
    for warning in warnings:
        out.print(f"[yellow]warning:[/yellow] {warning}")
    return 0
