"""Keep Lightning's banners and warnings out of runs that train many small models (folds, ablations)."""
from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator


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
