"""The `lilou` command line: a thin layer over the library.

Every command handler returns an exit status. Bad user input is raised as
:class:`lilou.errors.LilouInputError` anywhere below and turned here into one
line on stderr and exit status 2; anything else is an internal error (1).
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import gc
import io
import os
import sys
import traceback
import warnings
from collections.abc import Sequence
from typing import NoReturn

# numpy's matrix products here are small (the fusion GNN's 64-wide layers over a few thousand nodes, the
# kernel MLP): OpenBLAS's worker threads cost more to wake than they save. On a BERT-large graph the GNN takes
# 0.05 s on one thread and 0.13-0.4 s on two, the worst when other processes hold the cores (a server, a CI
# runner). It must be set before numpy loads; a user's own setting wins. torch (training) has its own pool.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from lilou.errors import LilouInputError, interrupted_query, one_line  # noqa: E402


class _ArgumentParser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line with exit status 2: ``lilou: error: infer: ...`` (the
    command line adds ``lilou: error:``)."""

    _arguments: list[str] = []

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        self._arguments = list(sys.argv[1:] if args is None else args)  # for error()'s hints
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        if "required: COMMAND" in message and self._arguments[:1] and self._arguments[0].startswith("-"):
            message = f"unrecognized arguments: {self._arguments[0]}"  # `lilou --bogus`: not a missing command
        elif "are required" in message:
            # a file whose name starts with a dash is read as an option: `lilou infer -model.onnx`
            dashed = next((a for a in self._arguments if a.startswith("-") and len(a) > 1 and os.path.isfile(a)), None)
            if dashed:
                message += f" ({dashed} is read as an option: write ./{dashed}, or put -- before it)"
        command = self.prog.removeprefix("lilou").strip()  # "infer" in a sub-command's parser
        raise LilouInputError(f"{command}: {message}" if command else message)


#: What ``lilou --help`` says of the environment variables Lilou reads (they were named only in README and errors).
ENVIRONMENT = """environment:
  LILOU_DATA_DIR     the local mirror of the measurements (lilou data, eval, training; --data-dir first);
                     default the checkout's datasets/, else ~/.cache/lilou/datasets
  LILOU_CHECKPOINTS  a folder of your own checkpoints, laid out like the shipped ones; a folder it lacks is the
                     shipped one, and each prediction says so
  LILOU_CACHE_DIR    the kernel table's cache, the GPU database's parsed copy and, outside a checkout, lilou eval's
                     exports (~/.cache/lilou)
  LILOU_DEBUG=1      print the traceback of an internal error"""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `lilou` parser; with ``command`` (the first argument, when it names a sub-command) only that
    sub-command's parser is built under it (``lilou COMMAND ...`` parses the same; ``lilou --help`` lists all)."""
    from lilou import __version__

    parser = _ArgumentParser(prog="lilou", description=__doc__.splitlines()[0], epilog=ENVIRONMENT,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"lilou {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_ArgumentParser)
    sub.required = True

    from lilou.commands import register_all
    register_all(sub, only=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit status (the library's entry point, which tests call in-process)."""
    return run_command(argv)[0]


def entry() -> NoReturn:
    """The `lilou` console script: :func:`run_command`, then :func:`leave`."""
    leave(*run_command(None, quick_exit=True))


def leave(status: int, quick: bool) -> NoReturn:
    """Exit with ``status``; when ``quick``, at once, without the interpreter's teardown.

    A command that only reads and prints (``infer``, ``rank``, ``plan``, ``llm``: ``quick_exit`` in its parser's
    defaults) runs a fraction of a second, and the teardown (a garbage collection over what the command built,
    then every module freed one by one) cost a fresh ``lilou infer`` of BERT-large about 50 ms, a tenth of its
    time, to free memory the process hands back anyway. Its cyclic garbage collector is off for the same reason
    (about 30 ms of collections that free nothing the process keeps). Output is flushed first; these commands
    write no file but through ``with`` blocks, and register nothing to run at exit but the removal of a temporary
    matplotlib folder (``--plot`` with a read-only HOME), done here."""
    if quick:
        with contextlib.suppress(OSError):  # run_command flushed stdout and handled its errors already
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:  # closed when the process started
                    stream.flush()
        if "lilou.report.mpl" in sys.modules:
            sys.modules["lilou.report.mpl"].remove_config_dir()
        os._exit(status)
    sys.exit(status)


def run_command(argv: Sequence[str] | None, quick_exit: bool = False) -> tuple[int, bool]:
    """Run one command: (exit status, whether the process may :func:`leave` at once: ``quick_exit`` asked and the
    command allows it; its garbage collector is then off)."""
    # The fusion GNN's feature-version warning (lilou.fusion.gnn_predictor.StaleFusionCheckpointWarning, matched by
    # message so that no model module is imported here) is for the library and the scripts: the CLI's stderr holds
    # one line per error (issue 17), and the shipped checkpoint's version is recorded in its config.json.
    warnings.filterwarnings("ignore", message=r"fusion checkpoint .* (was trained on features of version|records no "
                                              r"feature version)")
    argv = sys.argv[1:] if argv is None else list(argv)
    closed = sys.stdout is None  # started with stdout closed (`lilou ... >&-`): Python leaves None there
    if closed:
        sys.stdout = _ClosedStdout()
    try:
        return _run(argv, quick_exit)
    finally:
        if closed:
            sys.stdout = None


def _run(argv: list[str], quick_exit: bool) -> tuple[int, bool]:
    quick = False
    try:
        args = build_parser(argv[0] if argv else None).parse_args(argv)
        quick = quick_exit and getattr(args, "quick_exit", False)
        if quick:
            gc.disable()
        status = int(args.handler(args) or 0)
        sys.stdout.flush()
        return status, quick
    except LilouInputError as exc:
        print(f"lilou: error: {_one_line(exc)}", file=sys.stderr)
        return 2, quick
    except KeyboardInterrupt:
        print("lilou: interrupted", file=sys.stderr)
        return 130, quick
    except BrokenPipeError:
        _silence_stdout()
        return 0, quick
    except ImportError as exc:
        extra = _extra_for(exc, argv[0] if argv else "")
        if extra is None:
            return _internal_error(exc), quick
        print(f"lilou: error: {argv[0]} needs {exc.name.partition('.')[0]}, which lilou's base install leaves out: "
              f"pip install 'lilou[{extra}]'", file=sys.stderr)
        _debug_traceback()
        return 2, quick
    except OSError as exc:  # e.g. stdout on a full device (> /dev/full), or a file that cannot be written
        _silence_stdout()
        where = f": {exc.filename}" if exc.filename else ""
        what = "cannot write output" if exc.errno in _WRITE_ERRNOS else "input/output failed"
        print(f"lilou: error: {what} ({exc.strerror or exc}{where})", file=sys.stderr)
        _debug_traceback()
        return 1, quick
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, no traceback
        if interrupted_query(exc):  # DuckDB's KeyboardInterrupt
            print("lilou: interrupted", file=sys.stderr)
            return 130, quick
        return _internal_error(exc), quick


def _internal_error(exc: BaseException) -> int:
    print(f"lilou: internal error: {type(exc).__name__}: {_one_line(exc)} (set LILOU_DEBUG=1 for the traceback)",
          file=sys.stderr)
    _debug_traceback()
    return 1


#: Modules that only an extra of pyproject.toml brings (the base install predicts without them): the extra of each.
#: torch is in `train` and `zoo`; which one a command needs is :data:`COMMAND_EXTRAS`' say.
OPTIONAL_MODULES = {"torch": "train", "torch_geometric": "train", "lightning": "train", "lightning_fabric": "train",
                    "pytorch_lightning": "train", "hydra": "train", "omegaconf": "train", "tensorboard": "train",
                    "transformers": "zoo", "onnxscript": "zoo", "tvm": "tvm"}
#: Commands whose torch (transformers ...) is the model zoo's, or both extras'.
COMMAND_EXTRAS = {"zoo": "zoo", "profile": "zoo", "eval": "train,zoo"}


def _extra_for(exc: ImportError, command: str) -> str | None:
    """The extra that brings the missing module (``lilou zoo export`` without torch: ``zoo``); None for a module the
    base install has, or one that is there but fails to import (an internal error)."""
    module = (exc.name or "").partition(".")[0]
    if not isinstance(exc, ModuleNotFoundError) or module not in OPTIONAL_MODULES:
        return None
    if module == "tvm":
        return "tvm"
    return COMMAND_EXTRAS.get(command, OPTIONAL_MODULES[module])


_WRITE_ERRNOS = {errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EBADF}


class _ClosedStdout(io.TextIOBase):
    """stdout when the process was started with it closed: writing is ``cannot write output (Bad file descriptor)``,
    exit 1, as ``>/dev/full`` is (it was an internal AttributeError and a traceback); a command that prints nothing
    runs as it would."""

    def write(self, text: str) -> int:
        if not text:
            return 0
        raise OSError(errno.EBADF, "stdout is closed")

    def isatty(self) -> bool:
        return False


def _one_line(exc: BaseException) -> str:
    return one_line(exc)


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
    entry()
