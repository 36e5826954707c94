"""Scalar constants a graph states: what decides its control flow when the file fixes it.

An initializer or a ``Constant`` node of one element is a value known before anything runs: the trip count of a
``Loop`` (:mod:`lilou.graph.loops`, and the cost of a loop left whole in :mod:`lilou.graph.dag`), the condition of
an ``If`` (:mod:`lilou.graph.branches`). Tensors whose bytes are elsewhere (external data) are not read.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper


def _named_tensors(graph: onnx.GraphProto) -> list[tuple[str, onnx.TensorProto]]:
    """The graph's initializers and the values of its ``Constant`` nodes, by name."""
    tensors = [(t.name, t) for t in graph.initializer]
    tensors += [(n.output[0], a.t) for n in graph.node if n.op_type == "Constant" and n.output
                for a in n.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR]
    return tensors


def constant_tensors(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """The graph's initializers and ``Constant`` node values by name (a split's sizes, a reshape's shape)."""
    return dict(_named_tensors(graph))


def scalar_integers(graph: onnx.GraphProto) -> dict[str, int]:
    """Scalar integer constants of a graph (INT64 or INT32, one element), e.g. Loop trip counts."""
    values: dict[str, int] = {}
    for name, tensor in _named_tensors(graph):
        if tensor.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and math.prod(tensor.dims) == 1 \
                and tensor.data_location != onnx.TensorProto.EXTERNAL:
            try:
                values[name] = int(numpy_helper.to_array(tensor).reshape(-1)[0])
            except (ValueError, TypeError):
                continue
    return values


def scalar_truths(graph: onnx.GraphProto) -> dict[str, bool]:
    """Truth values of the one-element constants (0-d or of shape [1]) of a graph: a condition is one boolean."""
    values: dict[str, bool] = {}
    for name, tensor in _named_tensors(graph):
        if len(tensor.dims) > 1 or (tensor.dims and tensor.dims[0] != 1) or tensor.data_location == onnx.TensorProto.EXTERNAL:
            continue
        try:
            array = numpy_helper.to_array(tensor)
        except (ValueError, TypeError):
            continue
        if array.size == 1 and array.dtype.kind in "biuf":
            values[name] = bool(np.asarray(array).reshape(-1)[0])
    return values
