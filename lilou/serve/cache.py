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

A bad-input failure (:class:`LilouInputError`: the file cannot take this batch or these shapes) is the same for every
later request of the key too, so it is remembered (at most :data:`MAX_FAILURES` keys, least recent dropped first):
a plan of a file that fixes its batch tried batches 2 to 128 again on every request, ~24 s of shape inference each
time for TinyLlama, so a plan retried after a 503 never got faster. Other errors are not remembered.
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


#: The memory a cached prepared model holds, per node of its graph: 2.1 to 2.8 kB measured (tracemalloc around
#: Service.prepared: ResNet-18, 176 nodes, 0.50 MB; BERT-base, 828 nodes, 2.03 MB; chains of 2,000 and 20,000 Relu or
#: Identity nodes, 4.3 and 42.6 MB; 20,000 nodes of another shape, 51.5 MB), rounded up, plus a fixed part. The file's
#: size says little: weights are not kept (a 201 MB file of three MatMuls holds 20 kB), while a weight-stripped
#: 0.6 MB file of 20,000 nodes holds 50 MB (70x its size; 0.7x for ResNet-18).
BYTES_PER_NODE = 3 * 1024
BYTES_PER_ENTRY = 16 * 1024
#: And per character of its warnings, with a str's own overhead each: a 2 MB file of nested Ifs held 1,033 warnings
#: (84 kB) on 1 node (0.2 MB measured, 16 kB estimated), 3,000 unknown op types 0.3 MB of them.
BYTES_PER_WARNING = 64
#: Keys whose load failed on bad input, remembered (a message each, a few hundred bytes).
MAX_FAILURES = 1024


def estimated_bytes(model: PreparedModel) -> int:
    """What ``model`` holds in memory once prepared, estimated from its node count (:data:`BYTES_PER_NODE`) and its
    warnings; measured with tracemalloc, it holds 75-100 % of the estimate (a chain of 16,000 nodes 35.2 MB of 46.9,
    BERT-large 3.8 of 4.7, ResNet-18 0.5 of 0.5). Preparing it takes about twice as much again for a while (the
    fusion GNN's arrays), which no entry holds: lilou.graph.loading.MAX_NODES bounds that."""
    return (BYTES_PER_ENTRY + BYTES_PER_NODE * model.graph.dag.number_of_nodes()
            + sum(len(warning) + BYTES_PER_WARNING for warning in model.warnings))


class ModelCache:
    """``get(key, load)`` returns the cached model or calls ``load()`` once for all waiting callers.

    At most ``capacity`` entries and ``max_bytes`` (None: no bound) as ``size_of`` estimates them, least recently
    used dropped first; a model larger than ``max_bytes`` alone is served and not kept."""

    def __init__(self, capacity: int = 64, max_bytes: int | None = None,
                 size_of: Callable[[Any], int] = estimated_bytes) -> None:
        if capacity < 0:
            raise ValueError("cache capacity must be >= 0")
        if max_bytes is not None and max_bytes < 0:
            raise ValueError("cache max_bytes must be >= 0")
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._size_of = size_of
        self._sizes: dict[ModelKey, int] = {}
        self.bytes = 0
        self._models: OrderedDict[ModelKey, PreparedModel] = OrderedDict()
        self._loading: dict[ModelKey, Future] = {}
        self._failures: OrderedDict[ModelKey, LilouInputError] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.failure_hits = 0

    def __contains__(self, key: ModelKey) -> bool:
        with self._lock:
            return key in self._models

    def get(self, key: ModelKey, load: Callable[[], PreparedModel]) -> PreparedModel:
        while True:
            with self._lock:
                model = self._models.get(key)
                if model is not None:
                    self._models.move_to_end(key)
                    self.hits += 1
                    return model
                failure = self._failures.get(key)
                if failure is not None:  # the load failed on bad input before: it would again
                    self._failures.move_to_end(key)
                    self.failure_hits += 1
                    raise copy.copy(failure).with_traceback(None) from None
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
        except BaseException as exc:  # only lasting bad-input errors are remembered: the same for every request of
            with self._lock:              # the key (not a time limit a busy server ran past, nor data fetched later)
                del self._loading[key]
                if isinstance(exc, LilouInputError) and exc.lasting and self.capacity:
                    self._failures[key] = copy.copy(exc).with_traceback(None)
                    while len(self._failures) > MAX_FAILURES:
                        self._failures.popitem(last=False)
            pending.set_exception(exc)
            raise
        size = self._size_of(model) if self.capacity else 0
        with self._lock:
            del self._loading[key]
            if self.capacity and (self.max_bytes is None or size <= self.max_bytes):
                self._models[key], self._sizes[key] = model, size
                self.bytes += size
                while len(self._models) > self.capacity or (self.max_bytes is not None and self.bytes > self.max_bytes):
                    dropped, _ = self._models.popitem(last=False)
                    self.bytes -= self._sizes.pop(dropped)
        pending.set_result(model)
        return model

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"entries": len(self._models), "capacity": self.capacity, "hits": self.hits, "misses": self.misses,
                    "bytes": self.bytes, "capacity_bytes": self.max_bytes}
