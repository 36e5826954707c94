"""A bounded LRU of prepared models (:class:`lilou.api.PreparedModel`), keyed by the sha256 of the file,
the shape and value options and the backend.

A second request for the same bytes (any file name, any GPU) skips parsing, shape inference, cost
annotation and the fusion model's grouping into kernels: only the per-kernel latency model runs.
Concurrent requests for a model not yet cached wait for one load instead of each doing it. Cached
models are shared between threads and only read.

What a load gives or raises is shared by requests that name the model otherwise (another upload's file name),
so a load must not put any request's name or path in its model or its bad-input errors
(:meth:`lilou.serve.service.Service.prepared` puts a placeholder that each request replaces by its own). Each
waiter gets its own copy of a bad-input error; after any other error of a load (whose message is the loading
request's own), a waiting request loads the model itself.
"""
from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from lilou.api import PreparedModel
from lilou.errors import LilouInputError

ModelKey = tuple[str, int | None, tuple[tuple[str, tuple[int, ...]], ...], str, tuple[tuple[str, tuple], ...]]


def model_key(sha256: str, batch: int | None, shapes: Mapping[str, Sequence[int]] | None,
              backend: str, values: Mapping[str, Sequence[bool | int | float]] | None = None,
              folder: str | None = None) -> ModelKey:
    """The cache key of a file's bytes read with these options (``values``: run-time inputs' values, typed, so
    that ``true`` and ``1`` are told apart as the file's types will tell them). ``folder``: where the file's external
    data is looked for (None for an upload, which has none): the same bytes read beside other data (or none) can
    give other shapes, so they are other entries."""
    typed = tuple(sorted((name, tuple((type(v).__name__, v) for v in items)) for name, items in (values or {}).items()))
    return (sha256, batch, tuple(sorted((name, tuple(dims)) for name, dims in (shapes or {}).items())), backend,
            typed, folder)


class ModelCache:
    """``get(key, load)`` returns the cached model or calls ``load()`` once for all waiting callers."""

    def __init__(self, capacity: int = 64) -> None:
        if capacity < 0:
            raise ValueError("cache capacity must be >= 0")
        self.capacity = capacity
        self._models: OrderedDict[ModelKey, PreparedModel] = OrderedDict()
        self._loading: dict[ModelKey, Future] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: ModelKey, load: Callable[[], PreparedModel]) -> PreparedModel:
        while True:
            with self._lock:
                model = self._models.get(key)
                if model is not None:
                    self._models.move_to_end(key)
                    self.hits += 1
                    return model
                pending = self._loading.get(key)
                owner = pending is None
                if owner:
                    pending = self._loading[key] = Future()
                    self.misses += 1
                else:
                    self.hits += 1   # served by another request's load
            if owner:
                return self._load(key, load, pending)
            try:
                return pending.result()
            except LilouInputError as exc:  # bad input is bad for every request: each gets its own exception object
                raise copy.copy(exc).with_traceback(None) from None
            except BaseException:  # noqa: BLE001 - another request's failure, in its words: load for this one
                with self._lock:
                    self.hits -= 1
                continue

    def _load(self, key: ModelKey, load: Callable[[], PreparedModel], pending: Future) -> PreparedModel:
        try:
            model = load()
        except BaseException as exc:  # errors are not cached
            with self._lock:
                del self._loading[key]
            pending.set_exception(exc)
            raise
        with self._lock:
            del self._loading[key]
            if self.capacity:
                self._models[key] = model
                while len(self._models) > self.capacity:
                    self._models.popitem(last=False)
        pending.set_result(model)
        return model

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"entries": len(self._models), "capacity": self.capacity, "hits": self.hits, "misses": self.misses}
