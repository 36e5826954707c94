"""The `lilou` command line: a thin layer over the library.

Every command handler returns an exit status. Bad user input is raised as
:class:`lilou.errors.LilouInputError` anywhere below and turned here into one
line on stderr and exit status 2; anything else is an internal error (1).
"""
from __future__ import annotations

import argparse
import errno
import os
import sys
import traceback
from collections.abc import Sequence

# numpy's matrix products here are small (the fusion GNN's 64-wide layers over a few thousand nodes, the
# kernel MLP): OpenBLAS's worker threads cost more to wake than they save. On a BERT-large graph the GNN takes
# 0.05 s on one thread and 0.13-0.4 s on two, the worst when other processes hold the cores (a server, a CI
# runner). It must be set before numpy loads; a user's own setting wins. torch (training) has its own pool.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from lilou.errors import LilouInputError  # noqa: E402


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
        status = int(args.handler(args) or 0)
        sys.stdout.flush()
        return status
    except LilouInputError as exc:
        print(f"lilou: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lilou: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except OSError as exc:  # e.g. stdout on a full device (> /dev/full), or a file that cannot be written
        _silence_stdout()
        where = f": {exc.filename}" if exc.filename else ""
        what = "cannot write output" if exc.errno in _WRITE_ERRNOS else "input/output failed"
        print(f"lilou: error: {what} ({exc.strerror or exc}{where})", file=sys.stderr)
        _debug_traceback()
        return 1
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, no traceback
        print(f"lilou: internal error: {type(exc).__name__}: {_one_line(exc)} (set LILOU_DEBUG=1 for the traceback)",
              file=sys.stderr)
        _debug_traceback()
        return 1


_WRITE_ERRNOS = {errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500]


def _debug_traceback() -> None:
    if os.environ.get("LILOU_DEBUG") == "1":
        traceback.print_exc()


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush cannot fail again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (captured by tests)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
