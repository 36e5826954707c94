"""A bounded LRU of parsed model graphs, keyed by the sha256 of the file and the shape options.

A second request for the same bytes (any file name, any GPU) skips parsing, shape inference and
cost annotation. Concurrent requests for a graph not yet cached wait for one load instead of each
doing it. Cached graphs are shared between threads and only read.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from lilou.graph.dag import ModelGraph

GraphKey = tuple[str, int | None, tuple[tuple[str, tuple[int, ...]], ...]]


def graph_key(sha256: str, batch: int | None, shapes: Mapping[str, Sequence[int]] | None) -> GraphKey:
    return sha256, batch, tuple(sorted((name, tuple(dims)) for name, dims in (shapes or {}).items()))


class GraphCache:
    """``get(key, load)`` returns the cached graph or calls ``load()`` once for all waiting callers."""

    def __init__(self, capacity: int = 64) -> None:
        if capacity < 0:
            raise ValueError("cache capacity must be >= 0")
        self.capacity = capacity
        self._graphs: OrderedDict[GraphKey, ModelGraph] = OrderedDict()
        self._loading: dict[GraphKey, Future] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: GraphKey, load: Callable[[], ModelGraph]) -> ModelGraph:
        with self._lock:
            graph = self._graphs.get(key)
            if graph is not None:
                self._graphs.move_to_end(key)
                self.hits += 1
                return graph
            pending = self._loading.get(key)
            owner = pending is None
            if owner:
                pending = self._loading[key] = Future()
                self.misses += 1
            else:
                self.hits += 1   # served by another request's load
        if not owner:
            return pending.result()
        try:
            graph = load()
        except BaseException as exc:  # errors are not cached: the waiting callers get the same one
            with self._lock:
                del self._loading[key]
            pending.set_exception(exc)
            raise
        with self._lock:
            del self._loading[key]
            if self.capacity:
                self._graphs[key] = graph
                while len(self._graphs) > self.capacity:
                    self._graphs.popitem(last=False)
        pending.set_result(graph)
        return graph

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"entries": len(self._graphs), "capacity": self.capacity, "hits": self.hits, "misses": self.misses}
