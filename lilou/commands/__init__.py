"""One module per `lilou` sub-command; each exposes ``register(subparsers)``.

A handler is stored with ``parser.set_defaults(handler=fn)`` and returns the
exit status. Commands whose models do not exist yet are registered as stubs
that exit 2 with "not available yet" (they never print invented numbers).
"""
from __future__ import annotations

import argparse

from lilou.errors import LilouInputError


def _stub(name: str, help_text: str, subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(name, help=f"{help_text} (not available yet)")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def handler(args: argparse.Namespace) -> int:
        raise LilouInputError(f"`lilou {name}` is not available yet in this version")

    parser.set_defaults(handler=handler)


def register_all(subparsers: argparse._SubParsersAction) -> None:
    from lilou.commands import data, fuse, graph, gpus, infer, rank, zoo
    from lilou.commands import eval as eval_cmd

    graph.register(subparsers)
    gpus.register(subparsers)
    zoo.register(subparsers)
    data.register(subparsers)
    infer.register(subparsers)
    fuse.register(subparsers)
    rank.register(subparsers)
    eval_cmd.register(subparsers)
