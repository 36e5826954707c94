"""One module per `lilou` sub-command; each exposes ``register(subparsers)``.

A handler is stored with ``parser.set_defaults(handler=fn)`` and returns the
exit status.
"""
from __future__ import annotations

import argparse


def register_all(subparsers: argparse._SubParsersAction) -> None:
    from lilou.commands import data, fuse, gpus, graph, infer, llm, plan, profile, rank, serve, zoo
    from lilou.commands import eval as eval_cmd

    graph.register(subparsers)
    gpus.register(subparsers)
    zoo.register(subparsers)
    data.register(subparsers)
    infer.register(subparsers)
    fuse.register(subparsers)
    rank.register(subparsers)
    eval_cmd.register(subparsers)
    serve.register(subparsers)
    llm.register(subparsers)
    plan.register(subparsers)
    profile.register(subparsers)
