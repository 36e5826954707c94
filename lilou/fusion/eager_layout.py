"""Strides of eager PyTorch's views, replayed on an ONNX graph: which reshapes must copy.

In eager, ``x.transpose(1, 2).reshape(b, s, h * d)`` launches a copy kernel: ``reshape`` returns a view only when
the new shape can be expressed with the old strides, and calls ``.contiguous()`` otherwise (``view`` would raise).
The dynamo exporter writes that copy as its own node (``aten.clone``), but TorchScript exports drop
``.contiguous()`` and ``clone`` altogether: the ``Transpose -> Reshape`` of every attention layer's output is all
that is left of a copy kernel eager runs. This module follows each view's strides through the graph
(``Transpose`` permutes them, ``Slice``/``Split`` keep them, ``Expand`` zeroes the broadcast ones, a one-index
``Gather`` drops its axis) and tells, for a ``Reshape``-like node reading a non-contiguous view, whether PyTorch's
rule (``at::detail::computeStride``) finds strides for the new shape.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from lilou.graph.costs import TensorInfo
from lilou.graph.dag import ModelGraph

Strides = tuple[int, ...]

#: Views whose result is not contiguous in general: a copy of them is a real kernel.
STRIDED_OPS = frozenset({"Transpose", "Slice", "Expand"})
#: Views that keep whatever layout their input has, or copy when they cannot (``reshape``).
LAYOUT_KEEPING_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten"})


def selects_one_index(graph: ModelGraph, node: str, constant: set[str]) -> bool:
    """Is this a ``Gather`` of one constant index (a 0-d index tensor)? That is ``aten.select`` (``x[:, i]``),
    a view in eager; a ``Gather`` of an index tensor (``index_select``, embeddings) copies."""
    data = graph.dag.nodes[node]
    index = data["inputs"][1] if data["op"] == "Gather" and len(data["inputs"]) > 1 else None
    return index is not None and index.shape == () and index.name in constant


def casts_to_its_own_type(data: dict) -> bool:
    """A ``Cast`` to the type its input has: ``.to()`` returns the tensor itself, no kernel."""
    source = data["inputs"][0] if data["inputs"] else None
    output = data["outputs"][0] if data["outputs"] else None
    return source is not None and output is not None and source.dtype == output.dtype and source.dtype != "unknown"


def strided_tensors(graph: ModelGraph, runtime: Sequence[str], constant: set[str] | None = None
                    ) -> tuple[dict[str, Strides | None], set[str]]:
    """The tensors behind a transpose, slice, expand or select (possibly behind reshapes and same-type casts),
    with their strides (None where a shape is unknown), and the ``Reshape``-like nodes (of ``runtime``, in
    topological order) that must copy because PyTorch finds no strides for their new shape. ``constant``:
    the graph's constant tensors, when the caller has them."""
    dag = graph.dag
    constant = graph.constant_tensors() if constant is None else constant
    strided: dict[str, Strides | None] = {}
    copies: set[str] = set()
    for node in runtime:
        data = dag.nodes[node]
        op = data["op"]
        source = data["inputs"][0] if data["inputs"] else None
        output = data["outputs"][0] if data["outputs"] else None
        if output is None:
            continue
        if op in STRIDED_OPS or (op == "Gather" and selects_one_index(graph, node, constant)):
            strided[output.name] = _strides_after(data, op, source, output, strided)
        elif source is None or source.name not in strided:
            continue
        elif op in LAYOUT_KEEPING_OPS:
            known = strided[source.name]
            if known is not None and source.shape is not None and output.shape is not None:
                known = view_strides(source.shape, known, output.shape)
                if known is None:  # reshape copies into a contiguous tensor
                    copies.add(node)
                    continue
            strided[output.name] = known
        elif op == "Cast" and casts_to_its_own_type(data):
            strided[output.name] = strided[source.name]
    return strided, copies


def _strides_after(data: dict, op: str, source: TensorInfo | None, output: TensorInfo,
                   strided: Mapping[str, Strides | None]) -> Strides | None:
    """The strides of a transpose, slice, expand or select's output (None where a shape is unknown)."""
    if source is None or source.shape is None or output.shape is None:
        return None
    before = strided.get(source.name, contiguous_strides(source.shape))
    if before is None:
        return None
    if op == "Transpose":
        perm = data["attributes"].get("perm") or list(reversed(range(len(before))))
        return permuted(before, perm) if len(perm) == len(before) else None
    if op == "Expand":
        return expanded(source.shape, before, output.shape) if len(output.shape) >= len(before) else None
    if op == "Gather":  # a select drops its axis
        axis = int(data["attributes"].get("axis", 0)) % max(len(before), 1)
        return before[:axis] + before[axis + 1:]
    return before if len(output.shape) == len(before) else None  # a slice keeps the strides (steps of 1)


def contiguous_strides(shape: Sequence[int]) -> Strides:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


def view_strides(old_shape: Sequence[int], old_strides: Sequence[int], new_shape: Sequence[int]) -> Strides | None:
    """Strides of ``new_shape`` as a view of a tensor with ``old_shape``/``old_strides``, or None when PyTorch
    must copy (a port of ``at::detail::computeStride``)."""
    if math.prod(old_shape) != math.prod(new_shape):
        return None
    if not old_shape or math.prod(old_shape) == 0:
        return contiguous_strides(new_shape)
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = old_strides[-1]
    tensor_numel, view_numel = 1, 1
    for tensor_d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[tensor_d]
        if tensor_d == 0 or (old_shape[tensor_d - 1] != 1
                             and old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = old_strides[tensor_d - 1]
                tensor_numel, view_numel = 1, 1
    return tuple(new_strides) if view_d == -1 else None


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """PyTorch's notion: dims of size 1 may have any stride."""
    expected = contiguous_strides(shape)
    return all(size == 1 or stride == want for size, stride, want in zip(shape, strides, expected))


def permuted(strides: Sequence[int], perm: Sequence[int]) -> Strides:
    return tuple(strides[p] for p in perm)


def expanded(old_shape: Sequence[int], old_strides: Sequence[int], new_shape: Sequence[int]) -> Strides:
    """Strides after ``expand``: new leading dims and broadcast dims of size 1 read the same element (stride 0)."""
    lead = len(new_shape) - len(old_shape)
    strides = [0] * lead
    for size, stride, target in zip(old_shape, old_strides, new_shape[lead:]):
        strides.append(0 if size == 1 and target != 1 else stride)
    return tuple(strides)
