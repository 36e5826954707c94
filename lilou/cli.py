"""The `lilou` command line: a thin layer over the library.

Every command handler returns an exit status. Bad user input is raised as
:class:`lilou.errors.LilouInputError` anywhere below and turned here into one
line on stderr and exit status 2; anything else is an internal error (1).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from lilou.errors import LilouInputError


class _ArgumentParser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line with exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise LilouInputError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog="lilou", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_ArgumentParser)
    sub.required = True

    from lilou.commands import register_all
    register_all(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.handler(args) or 0)
    except LilouInputError as exc:
        print(f"lilou: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lilou: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
