"""One module per `lilou` sub-command; each exposes ``register(subparsers)``.

A handler is stored with ``parser.set_defaults(handler=fn)`` and returns the
exit status.
"""
from __future__ import annotations

import argparse


#: Every sub-command, in the order `lilou --help` lists them; each is the module of its name under lilou.commands.
COMMANDS = ("graph", "gpus", "zoo", "data", "infer", "fuse", "rank", "eval", "serve", "llm", "plan", "profile")


def register_all(subparsers: argparse._SubParsersAction, only: str | None = None) -> None:
    """Register every sub-command, or only ``only`` when it names one: parsing a command's arguments needs its own
    parser alone, and building all twelve (and importing what their options list) is about 20 ms of a fresh
    ``lilou infer``."""
    import importlib

    names = [only] if only in COMMANDS else list(COMMANDS)
    for name in names:
        importlib.import_module(f"lilou.commands.{name}").register(subparsers)
