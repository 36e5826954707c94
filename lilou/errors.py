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

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except Exception as exc:
                if is_config_error(exc):  # a script's own compose(): a misspelt key or experiment
                    _exit_input_error(prog, config_error_line(exc))
                cause: BaseException | None = exc  # hydra.utils.instantiate wraps a constructor's error in its own
                while cause is not None and not isinstance(cause, LilouInputError):
                    cause = cause.__cause__
                if cause is None:
                    raise
                _exit_input_error(prog, one_line(cause))
        return wrapper
    return decorate


def _exit_input_error(prog: str, line: str):
    import sys

    sys.stdout.flush()
    print(f"{prog}: error: {line}", file=sys.stderr)
    raise SystemExit(2) from None


#: Hydra's errors for a command line its config tree cannot take (a misspelt key, group option or override syntax);
#: not ``InstantiationException``, which wraps whatever a constructor raised.
_CONFIG_ERRORS = ("ConfigCompositionException", "MissingConfigException", "OverrideParseException")


def is_config_error(exc: BaseException) -> bool:
    """Whether ``exc`` is Hydra's refusal of an override or config name (bad input, not a bug)."""
    return type(exc).__module__ == "hydra.errors" and type(exc).__name__ in _CONFIG_ERRORS


def config_error_line(exc: BaseException) -> str:
    """Hydra's message on one line: with OmegaConf's reason (``Key 'x' is not in struct``) but not its
    ``full_key``/``object_type`` trailer, nor the config search path Hydra appends to a missing option."""
    text = str(exc).split("Config search path:")[0]
    override = getattr(exc, "override", None)  # a syntax error's message does not say which override it is in
    if override and override not in text:
        text = f"{override}: {text}"
    cause = exc.__cause__
    if cause is not None and type(cause).__module__.startswith("omegaconf"):
        reason = str(cause).splitlines()[0] if str(cause) else ""
        if reason and reason not in text:
            text += " " + reason
    return one_line(text)


def run_hydra_main(main, prog: str) -> None:
    """Run a ``hydra.main`` entry point (``python -m lilou.train``/``lilou.eval``) so that a command line its config
    tree cannot take (``data.held_ot_gpus=[t4]``, ``experiment=kernel_latnecy``) is one line ``<prog>: error: ...``
    and exit status 2, as every other bad input is, instead of Hydra's multi-line report and exit status 1. Hydra
    hands its errors on instead of printing them when ``HYDRA_FULL_ERROR`` is set; any other error is then Python's
    full traceback, exit status 1."""
    import os

    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    try:
        main()
    except BrokenPipeError:  # --help | head: the reader left, as the CLI takes it (was a traceback)
        import sys

        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # so that the interpreter's last flush cannot fail again
            os.close(devnull)
        except (OSError, ValueError):
            pass
        raise SystemExit(0) from None
    except Exception as exc:
        if not is_config_error(exc):
            raise
        _exit_input_error(prog, config_error_line(exc))
