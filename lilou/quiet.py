"""Keep Lightning's banners and warnings out of runs that train many small models (folds, ablations), and send
those runs' own progress lines to stderr (stdout stays the result)."""
from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Callable, Iterator

#: Where a long run's progress lines go.
Log = Callable[[str], None]


def log_to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def quiet_lightning() -> Iterator[None]:
    """Lightning's banners and tips say nothing about the run; keep the output to Lilou's own lines."""
    loggers = [logging.getLogger(name) for name in ("lightning", "lightning.pytorch", "lightning.fabric")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
