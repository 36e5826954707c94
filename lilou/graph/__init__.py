"""ONNX -> annotated DAG: loading, checks of the file (:mod:`lilou.graph.validation`), shape handling, FLOPs/bytes
per node, PyG conversion.

``load_graph(path, batch=None, shapes=None)`` is the entry point; ``to_pyg`` (in
:mod:`lilou.graph.pyg`, which imports torch) converts the result for the GNN;
:mod:`lilou.graph.features` gives the same features as numpy arrays.
"""
from __future__ import annotations

import importlib
from typing import Any

# Resolved on first use: importing lilou.graph.costs (plain arithmetic, used by `lilou llm`) must not load
# onnx, which lilou.graph.dag needs and which takes most of a second to import.
_LAZY = {"ModelGraph": "lilou.graph.dag", "build_graph": "lilou.graph.dag", "load_graph": "lilou.graph.dag",
         "TensorInfo": "lilou.graph.costs"}

__all__ = ["ModelGraph", "TensorInfo", "build_graph", "load_graph"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lilou.graph' has no attribute {name!r}")
