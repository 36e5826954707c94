"""The numpy matrix products of a prediction (the fusion GNN, the kernel model's networks) run one at a time, on
one BLAS thread.

numpy's OpenBLAS hangs when several Python threads call it with its worker threads on: one ``Predictor`` shared by
six threads stopped in a GNN layer's ``x @ W.T`` (one call in flight, the others waiting, OpenBLAS's workers
spinning), where one thread runs the same predictions in under a second. The CLI sets ``OPENBLAS_NUM_THREADS=1``
before numpy loads, which avoids it (and these products are small: 64-wide layers over a few thousand rows, where
worker threads cost more to wake than they save). A program that imports numpy first (a notebook, a web service of
its own) keeps OpenBLAS's default, so :func:`blas_section` holds a lock and, where BLAS runs more than one thread,
limits it to one for the section (``threadpoolctl``), putting the user's setting back after.
"""
from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

_LOCK = threading.Lock()
_controller: object | None = None   # threadpoolctl.ThreadpoolController, found on first use
_checked = False


def _multi_threaded_blas():
    """The controller of the BLAS libraries numpy loaded, or None when they already run one thread."""
    global _controller, _checked
    if not _checked:
        _checked = True
        # the CLI sets it before numpy loads (lilou.cli): nothing to find, and no import on the command's clock
        if os.environ.get("OPENBLAS_NUM_THREADS") != "1":
            from threadpoolctl import ThreadpoolController

            controller = ThreadpoolController().select(user_api="blas")
            if any(info["num_threads"] > 1 for info in controller.info()):
                _controller = controller
    return _controller


@contextlib.contextmanager
def blas_section() -> Iterator[None]:
    """Hold around a batch of matrix products: one caller at a time, BLAS on one thread."""
    with _LOCK:
        controller = _multi_threaded_blas()
        if controller is None:
            yield
            return
        with controller.limit(limits=1):
            yield
