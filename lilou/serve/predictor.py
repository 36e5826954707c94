"""A :class:`lilou.api.Predictor` that groups each cached graph into kernels once.

Parsing is the small part of a prediction: the fusion GNN's grouping and the kernel descriptions take
most of the time (about 85 % for ResNet-18, measured with cProfile). The graph cache hands out the same
``ModelGraph.dag`` object for the same bytes and shape options, so the grouping is remembered per DAG
object and forgotten when the cache drops the graph (a weak reference).

This overrides ``Predictor._kernels``, a private method of lilou/api.py, until the API has a public way
to prepare a model once and predict it many times (docs/service.md, "Caching"). Calls with any other
signature than ``_kernels(graph)`` are passed through uncached, so a change there costs speed, never
correctness.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any

from lilou.api import Predictor
from lilou.graph.dag import ModelGraph


class CachingPredictor(Predictor):
    """Predictor whose kernel grouping of a graph is computed once per DAG object."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._groupings: dict[int, tuple[Any, list[str]]] = {}
        self._groupings_lock = threading.Lock()
        self.grouping_hits = 0
        self.grouping_misses = 0

    def _kernels(self, graph: ModelGraph, *args: Any, **kwargs: Any):
        if args or kwargs or not isinstance(graph, ModelGraph):
            return super()._kernels(graph, *args, **kwargs)
        key = id(graph.dag)
        with self._groupings_lock:
            cached = self._groupings.get(key)
            if cached is not None:
                self.grouping_hits += 1
                kernels, warnings = cached
                return kernels, list(warnings)
        kernels, warnings = super()._kernels(graph)
        with self._groupings_lock:
            if key not in self._groupings:
                self._groupings[key] = (kernels, list(warnings))
                weakref.finalize(graph.dag, self._forget, key)
            self.grouping_misses += 1
        return kernels, list(warnings)

    def _forget(self, key: int) -> None:
        with self._groupings_lock:
            self._groupings.pop(key, None)

    def grouping_stats(self) -> dict[str, int]:
        with self._groupings_lock:
            return {"entries": len(self._groupings), "hits": self.grouping_hits, "misses": self.grouping_misses}
