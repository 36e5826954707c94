"""ONNX -> annotated DAG: loading, shape handling, FLOPs/bytes per node, PyG conversion.

``load_graph(path, batch=None, shapes=None)`` is the entry point; ``to_pyg`` (in
:mod:`lilou.graph.pyg`, which imports torch) converts the result for the GNN;
:mod:`lilou.graph.features` gives the same features as numpy arrays.
"""
from lilou.graph.costs import TensorInfo
from lilou.graph.dag import ModelGraph, build_graph, load_graph

__all__ = ["ModelGraph", "TensorInfo", "build_graph", "load_graph"]
