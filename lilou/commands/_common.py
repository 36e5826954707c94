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
    # one write of the whole text: json.dump writes each of its thousands of pieces (3.5 of 6.5 ms on BERT-large)
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def console() -> Console:
    """The console every table and text line goes through.

    - It never fails on stdout's encoding (an ASCII locale, ``PYTHONIOENCODING=ascii``): what the stream cannot
      encode is written escaped (``\\xfc``), and Lilou's own ``…`` as ``...`` (:func:`shorten` too).
    - Piped or redirected, tables are laid out 160 columns wide (not wrapped into unreadable columns), and free text
      (warnings) is printed unwrapped, one line per message, for ``grep``.
    - A reader closing the pipe early (``| head``) is left to the command line's handling: rich's own exits with
      status 1, an internal error's."""
    from rich.console import Console

    tty = sys.stdout.isatty()

    class _PipedConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "the reader closed the pipe")

        def print(self, *objects: Any, **options: Any) -> None:
            if not tty and all(isinstance(o, str) for o in objects):  # free text, not a table
                options.setdefault("soft_wrap", True)
            super().print(*objects, **options)

    return _PipedConsole(file=_LenientStream(sys.stdout), width=None if tty else piped_width())


#: Width of a piped or redirected table when ``COLUMNS`` does not set one.
PIPED_WIDTH = 160


def piped_width() -> int:
    """The width tables are laid out at when stdout is not a terminal: ``COLUMNS`` where it is a positive whole
    number (it was ignored: ``COLUMNS=260 lilou plan ... | cat`` cut the device names at 160), else 160."""
    import os

    text = os.environ.get("COLUMNS", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else PIPED_WIDTH


class _LenientStream:
    """``stream`` whose ``write`` escapes the characters its encoding cannot hold instead of raising (the rest of
    the text stream is passed through)."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except UnicodeEncodeError:  # the text stream encodes the whole text before writing any of it
            encoding = getattr(self._stream, "encoding", None) or "utf-8"
            text = text.replace(ELLIPSIS, "...") if not _encodes(ELLIPSIS, encoding) else text
            return self._stream.write(text.encode(encoding, "backslashreplace").decode(encoding))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


ELLIPSIS = "\u2026"


def _encodes(text: str, encoding: str) -> bool:
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def ellipsis() -> str:
    """``…``, or ``...`` where stdout's encoding cannot hold it."""
    return ELLIPSIS if _encodes(ELLIPSIS, getattr(sys.stdout, "encoding", None) or "utf-8") else "..."


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the cut marked with :func:`ellipsis`."""
    if len(text) <= width:
        return text
    mark = ellipsis()
    return text[: width - len(mark)] + mark


def new_table(*columns: str, **options: Any) -> Table:
    """A rich table, imported on first use (``--format json`` never pays for rich)."""
    from rich.table import Table

    return Table(*columns, **options)


def add_columns(table: Table, columns: list[str], rows: list[list[str]], width: int, *,
                identifying: tuple[str, ...] = (), left: tuple[str, ...] = ()) -> None:
    """Add ``columns`` to ``table`` (the caller adds ``rows``) laid out ``width`` characters wide, so that nothing is
    cut: rich shrank every column alike and cut each cell with ``…`` (``h100-sxm/7g.8…`` was any H100 slice).

    - The ``identifying`` columns (a device, its Kubernetes resource) are never wrapped nor shrunk: each is as wide
      as its longest cell.
    - The others are at least as wide as their longest figure, a cell of two figures (``1,494 (2,462)``) at worst on
      two lines; the room left goes first to whole cells, then to whole headers.
    - Where that does not fit in ``width``, the other columns fold their cells onto more lines (never cut), and the
      identifying ones too when they leave under 5 characters to each other column."""
    def two_lines(text: str) -> int:
        cuts = [i for i, char in enumerate(text) if char == " "]
        return min([max(len(text[:i].rstrip()), len(text[i:].lstrip())) for i in cuts], default=len(text))

    n = len(columns)
    cells = [[row[i] for row in rows] for i in range(n)]
    whole = [max((len(text) for text in cells[i]), default=1) for i in range(n)]
    natural = [max(whole[i], len(column)) for i, column in enumerate(columns)]
    low = [natural[i] if column in identifying else
           max(max((two_lines(text) for text in cells[i]), default=1), *(len(word) for word in column.split()))
           for i, column in enumerate(columns)]
    room = width - 3 * n - 1  # a border and a space either side of each column
    fits = sum(low) <= room
    kept = fits or room - sum(natural[i] for i, c in enumerate(columns) if c in identifying) \
        >= 5 * sum(c not in identifying for c in columns)
    widths = list(low)
    if fits and room < sum(natural):
        budget = room - sum(low)
        for target in (whole, natural):
            for i in sorted(range(n), key=lambda i: target[i] - widths[i]):
                grow = min(max(target[i] - widths[i], 0), budget)
                widths[i], budget = widths[i] + grow, budget - grow
    for i, column in enumerate(columns):
        justify = "left" if column in left or column in identifying else "right"
        if column in identifying and kept:
            table.add_column(column, justify=justify, no_wrap=True, min_width=natural[i])
        elif not fits:
            table.add_column(column, justify=justify, overflow="fold")
        else:
            table.add_column(column, justify=justify, width=widths[i] if room < sum(natural) else None)


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
                             "INPUT=V1,V2,... for a short 1-D input); or the iterations of a Loop its data stops, "
                             "by the Loop node's name: /Loop=12")


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


#: A table's precision cell beside the format where the device does not run it natively (PRECISION_PATHS).
PRECISION_MARKS = {"native": "", "weight_only": " weight-only", "emulated": " emulated",
                   "no_runtime": " no runtime!"}


def precision_cell(precision: str | None, path: str | None) -> str:
    """``fp8``, ``fp8 weight-only``, ``fp8 no runtime!`` ... (a row of rank or plan)."""
    return f"{precision or '-'}{PRECISION_MARKS.get(path or 'native', '')}"


def precision_legend(paths: list[str | None]) -> list[str]:
    """The lines under a table that explain its marked precision cells, one per kind present."""
    said = {"weight_only": "weight-only: the format's weights on the 16-bit tensor cores, FP16 activations (no tensor "
                           "cores of the format)",
            "emulated": "emulated: run with FP32 math on the CUDA cores (no tensor cores of the format)",
            "no_runtime": "no runtime!: no known runtime runs the format on that device; its latency is a lower bound "
                          "priced on other units, not a deployment"}
    return [said[path] for path in ("weight_only", "emulated", "no_runtime") if path in paths]


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
