"""Small helpers shared by command modules: output formats and consoles."""
from __future__ import annotations

import errno
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich takes 0.1-0.2 s to import: only the table format loads it
    from rich.console import Console
    from rich.table import Table


def add_format_option(parser, choices: tuple[str, ...] = ("table", "json")) -> None:
    parser.add_argument("--format", choices=choices, default="table", help="output format (default: table)")


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")


def console() -> Console:
    """A console that never wraps tables into unreadable columns when piped, and that leaves a reader closing the
    pipe early (``| head``) to the command line's handling: rich's own exits with status 1, an internal error's."""
    from rich.console import Console

    class _PipedConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "the reader closed the pipe")

    return _PipedConsole(width=None if sys.stdout.isatty() else 160)


def new_table(*columns: str, **options: Any) -> Table:
    """A rich table, imported on first use (``--format json`` never pays for rich)."""
    from rich.table import Table

    return Table(*columns, **options)


def add_shape_options(parser) -> None:
    """--batch and --shape, shared by every command that reads a model."""
    parser.add_argument("--batch", type=int, default=None, metavar="N",
                        help="set the leading (batch) dimension of every input")
    parser.add_argument("--shape", action="append", default=[], metavar="INPUT=D1xD2...",
                        help="set one input's full shape, e.g. input_ids=8x512, or a named dynamic dimension in "
                             "every input, e.g. sequence_length=512 (repeatable)")
    add_value_option(parser)


def add_value_option(parser) -> None:
    """--value: a run-time input's value, for inputs that pick the work (an If on a flag)."""
    parser.add_argument("--value", action="append", default=[], metavar="INPUT=V",
                        help="the value a run-time input has, e.g. use_cache_branch=false (a merged decoder's prompt "
                             "pass) or sr=16000: an If on it is priced as the branch that runs (repeatable; "
                             "INPUT=V1,V2,... for a short 1-D input)")


def shape_overrides(args) -> dict[str, tuple[int, ...]]:
    from lilou.graph.shapes import parse_shape_overrides

    return parse_shape_overrides(args.shape)


def input_values(args) -> dict[str, tuple[bool | int | float, ...]]:
    from lilou.graph.input_values import parse_input_values

    return parse_input_values(args.value)


def add_backend_option(parser) -> None:
    """--backend for commands that predict kernels: eager (the runtime of the real data) or tvm."""
    parser.add_argument("--backend", choices=("eager", "tvm"), default="eager",
                        help="runtime whose kernels are predicted: eager = PyTorch eager, the runtime of the "
                             "real latency measurements (default); tvm = Apache TVM fused kernels")


def warn(message: str) -> None:
    """One warning line on stderr (keeps stdout parseable)."""
    print(f"lilou: warning: {message}", file=sys.stderr)


def add_precision_options(parser) -> None:
    """--precision and --tf32, shared by the commands that predict latency."""
    parser.add_argument("--precision", default=None, metavar="P", type=str.lower,  # FP16 as the API takes it
                        choices=("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4", "fp4"),
                        help="precision the model computes in (default: read from the ONNX tensor types)")
    parser.add_argument("--tf32", default=None, type=str.lower, choices=("off", "conv", "on"),
                        help="what FP32 convolutions/matmuls run in (default: PyTorch's, TF32 convolutions "
                             "from compute capability 8.0 on)")


def add_launch_gap_option(parser) -> None:
    """--launch-gap-us, shared by the commands that compose kernels end to end (infer, rank, plan)."""
    parser.add_argument("--launch-gap-us", type=float, default=None, metavar="US",
                        help="the host's issue time per kernel in microseconds (default: about 30, NeuSight's 2023 "
                             "hosts; `lilou profile ops` measures yours: its one-element calls; 0 for CUDA-graph "
                             "replay)")


def launch_gap_ms(args) -> float | None:
    """--launch-gap-us in ms, checked in the unit the user gave (0 to 1000 us)."""
    from lilou.errors import LilouInputError

    gap = args.launch_gap_us
    if gap is None:
        return None
    if not 0 <= gap <= 1000:  # also refuses nan
        raise LilouInputError(f"--launch-gap-us {gap:g}: give 0 to 1000 microseconds per kernel")
    return gap / 1000.0


#: Image formats ``--plot`` writes (matplotlib's Agg canvas; the format comes from the file's extension).
PLOT_FORMATS = ("png", "pdf", "svg", "jpg", "jpeg", "webp", "tif", "tiff", "eps", "ps")


def check_plot_path(path: str | None) -> None:
    """``--plot OUT``: its folder exists and its extension names a format, checked before any work is done
    (matplotlib would fail only when saving, and add ``.png`` to a name without an extension)."""
    import os

    from lilou.errors import LilouInputError

    if path is None:
        return
    if not path.strip():  # --plot "" was taken as no plot, without a word
        raise LilouInputError("--plot: give a file name, e.g. --plot plan.png")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise LilouInputError(f"--plot: folder {folder!r} does not exist")
    extension = os.path.splitext(path)[1].lstrip(".").lower()
    if extension not in PLOT_FORMATS:
        raise LilouInputError(f"--plot {path}: give the file one of the extensions {', '.join(PLOT_FORMATS)} "
                              "(the image format follows it)")
