"""Errors that describe bad user input.

Anything raised as :class:`LilouInputError` is shown by the CLI as one line on
stderr with exit status 2; anything else is an internal error (exit status 1).
"""


class LilouInputError(Exception):
    """The user's input (file, option, name) cannot be used; the message says why."""

    #: Whether the same input fails the same way again (the service remembers such failures, lilou.serve.cache).
    lasting = True


class MissingDataError(LilouInputError):
    """A dataset the command needs is not on disk; the message says how to fetch it."""

    lasting = False  # fetched later, the same request succeeds


class OutOfTimeError(LilouInputError):
    """Work on the input ran past its time limit: on a busy machine the same input may finish next time."""

    lasting = False


def interrupted_query(exc: BaseException) -> bool:
    """True for the error DuckDB raises in place of ``KeyboardInterrupt`` when a signal (Ctrl-C) stops a query: it
    handles the signal itself and raises ``RuntimeError("Query interrupted")``."""
    return type(exc) is RuntimeError and str(exc) == "Query interrupted"


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line, as the CLI prints it."""
    return " ".join(str(exc).split())[:500]


def exit_on_input_error(prog: str):
    """Decorator for entry points other than the CLI (``python -m lilou.train``, the research scripts): a
    :class:`LilouInputError` becomes one line ``<prog>: error: ...`` on stderr and exit status 2, as the CLI does,
    instead of a traceback. It wraps the function inside ``hydra.main`` too: Hydra reports an exception with a
    traceback and exit status 1, but lets ``SystemExit`` through."""
    import functools
    import sys

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except Exception as exc:
                cause: BaseException | None = exc  # hydra.utils.instantiate wraps a constructor's error in its own
                while cause is not None and not isinstance(cause, LilouInputError):
                    cause = cause.__cause__
                if cause is None:
                    raise
                sys.stdout.flush()
                print(f"{prog}: error: {one_line(cause)}", file=sys.stderr)
                raise SystemExit(2) from None
        return wrapper
    return decorate
