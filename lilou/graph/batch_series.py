"""One ONNX file read at a series of batch sizes, most of them without ONNX shape inference.

A capacity plan reads the same file at eight batch sizes; each read is ONNX shape inference (in a guarded
child), constant folding and shape completion, about 0.15 s for ResNet-50. In almost every model a
tensor's dimension is either fixed or proportional to the batch (``N x 3 x 224 x 224``, BERT's
``N*heads x S x S``). :class:`BatchSeries` reads the first two batches asked for, sorts every dimension into
one of those two kinds, and derives the shape table of any later batch from them; the DAG, its FLOPs and
bytes and every shape check are then computed from that table exactly as for a read file
(:func:`lilou.graph.dag.annotate_graph`). Derivation is trusted only once it has reproduced a real read: the
largest batch the caller will ask for is both derived and read, and the two graphs must be identical node for
node, edge for edge; no batch above the checked one is derived. A model whose dimensions are neither fixed nor
proportional (a dimension of ``N + 1``, padding to a multiple) or whose check differs is read at every batch,
as before. So is a batch whose derived dimensions would not be integers, whose pinned input shapes are not the
derived ones, or where a tensor that constant folding evaluated (or a 1-D input) crosses one of the sizes at
which reading behaves differently (folding keeps values up to ``MAX_VALUE_ELEMENTS`` elements and evaluates up
to ``MAX_FOLD_ELEMENTS``: a ViT-B/16 attention constant passes the first between batches 1 and 2 and the
second at batch 32).
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace

from lilou.errors import LilouInputError
from lilou.graph.costs import TensorInfo
from lilou.graph.dag import ModelGraph, ShapedModel, annotate_graph
from lilou.graph.input_values import Value
from lilou.graph.reading import GraphReading, read_graph
from lilou.graph.shape_completion import MAX_FOLD_ELEMENTS, MAX_VALUE_ELEMENTS
from lilou.graph.shapes import check_batch, runtime_inputs

#: How a dimension depends on the batch: the same at every batch, or the first read's value times batch / its batch.
_FIXED, _PROPORTIONAL = "fixed", "proportional"
Kinds = dict[str, tuple[str, ...] | None]


class BatchSeries:
    """Graphs of one ONNX file at batch sizes up to ``largest`` (see the module docstring).

    Derivation is checked against a read at ``largest`` (or, where that batch cannot be derived, the largest of
    ``largest / 2``, ``largest / 4`` ... that can), before the first graph is derived, and a batch above the
    checked one is always read: a dimension that only looks fixed or proportional over the first batches
    (``ceil(N / 8)`` is 1 at batches 1 to 8) is caught over the whole range a derived graph can come from."""

    def __init__(self, path: str | os.PathLike[str], largest: int,
                 values: Mapping[str, Sequence[Value]] | None = None, backend: str = "eager") -> None:
        self.path = path
        self.backend = backend  # whose kernels the graphs are read for (lilou.graph.dag.build_graph)
        self.values = values  # run-time inputs' values (--value), the same at every batch
        self.name = os.path.splitext(os.path.basename(os.fspath(path)))[0]
        self.largest = largest
        self._first: tuple[int, ShapedModel] | None = None   # the first batch read, kept whole
        self._kinds: Kinds | None = None                     # per tensor, the kind of each dimension
        self._first_classes: dict[str, int] = {}             # _size_classes of the first read
        self._checked = 0                                    # derived graphs matched a read at this batch
        self._check_read: tuple[dict, ModelGraph] | None = None  # that read (pins, graph), until it is asked for
        self._refused = False                                # ... or did not: read every batch
        self.reads = 0                                       # files read (for tests and benchmarks)
        self._ahead: dict[tuple, GraphReading] = {}          # reads started ahead (prefetch), by batch and pins

    def graph(self, batch: int, shapes: Mapping[str, Sequence[int]] | None = None) -> ModelGraph:
        """The annotated graph at ``batch`` (``shapes`` pins whole inputs, as ``load_graph`` takes them)."""
        check_batch(batch)
        if self._kinds is not None and not self._refused and not self._checked:
            self._check_above(batch, shapes)
        if self._check_read is not None and batch == self._checked and self._check_read[0] == dict(shapes or {}):
            graph, self._check_read = self._check_read[1], None  # read for the check already: not built again
            return graph
        if self._kinds is not None and not self._refused and batch <= self._checked:
            derived = self._derive(batch, shapes)
            if derived is not None:
                return derived
        shaped, graph = self._read(batch, shapes)
        if self._first is None:
            self._first = (batch, shaped)
        elif self._kinds is None and not self._refused:
            self._kinds = _dimension_kinds(self._first, (batch, shaped))
            self._refused = self._kinds is None
            self._first_classes = _size_classes(self._first[1], self._first[1].tensors)
        return graph

    def prefetch(self, batch: int, shapes: Mapping[str, Sequence[int]] | None = None) -> None:
        """Start reading the file at ``batch`` (``shapes`` as :meth:`graph` takes them) now, in its own child
        (:mod:`lilou.graph.reading`), for a later read of exactly that: the caller's work overlaps it. What it raises
        comes when that read is asked for; a read never asked for is stopped by :meth:`close`."""
        key = (batch, _pinned(shapes))
        if key not in self._ahead:
            self._ahead[key] = read_graph(self.path, batch=batch, shapes=shapes, values=self.values, backend=self.backend)

    def close(self) -> None:
        """Stop the prefetched reads no graph asked for."""
        while self._ahead:
            self._ahead.popitem()[1].close()

    def _read(self, batch: int, shapes: Mapping[str, Sequence[int]] | None) -> tuple[ShapedModel, ModelGraph]:
        reading = self._ahead.pop((batch, _pinned(shapes)), None) \
            or read_graph(self.path, batch=batch, shapes=shapes, values=self.values, backend=self.backend)
        with reading:
            shaped = reading.shaped()  # in a guarded child, beside any work an outer meanwhile set
        self.reads += 1
        return shaped, annotate_graph(shaped, name=self.name)

    def _check_above(self, batch: int, shapes: Mapping[str, Sequence[int]] | None) -> None:
        """Check derivation against a read at the largest batch from ``largest`` down by halves, not below ``batch``,
        that can be derived; inputs pinned now are pinned at their derived shapes there. Nothing to check against, a
        check the file cannot take (a one-line input error) or one that differs refuses derivation."""
        target = self.largest
        while target >= batch:
            try:
                derived = self._derive(target, None)
            except LilouInputError:  # e.g. a tensor past Lilou's size limit there: that batch will fail when asked
                derived = None
            if derived is not None:
                break
            target //= 2
        else:
            self._refused = True  # nothing to check against: read every batch
            return
        derived_inputs = {t.name: t.shape for t in derived.inputs}
        pins = {name: derived_inputs.get(name, dims) for name, dims in (shapes or {}).items()}  # inputs, named dims
        try:
            _, graph = self._read(target, pins or None)
        except LilouInputError:
            self._refused = True
            return
        if same_graph(derived, graph):
            self._checked, self._check_read = target, (pins, graph)
        else:
            self._refused = True

    def _derive(self, batch: int, shapes: Mapping[str, Sequence[int]] | None) -> ModelGraph | None:
        """The graph at ``batch`` from the first read's model and the derived shape table (None: read it)."""
        assert self._first is not None and self._kinds is not None
        first_batch, first = self._first
        tensors: dict[str, TensorInfo] = {}
        for name, info in first.tensors.items():
            dims = _scaled(info.shape, self._kinds[name], batch, first_batch)
            if dims is False:
                return None
            tensors[name] = info if dims == info.shape else replace(info, shape=dims)
        # a pinned input keeps its shape (a named dimension, no tensor of that name, was pinned in both reads)
        if any(name in tensors and tuple(dims) != tensors[name].shape for name, dims in (shapes or {}).items()):
            return None
        if _size_classes(first, tensors) != self._first_classes:
            return None
        shaped = ShapedModel(model=first.model, tensors=tensors, notes=first.notes, evaluated=first.evaluated,
                             unbatched=first.unbatched, weight_inputs=first.weight_inputs)
        return annotate_graph(shaped, name=self.name)


def _pinned(shapes: Mapping[str, Sequence[int]] | None) -> tuple:
    """``shapes`` as a key: the same pins, the same read."""
    return tuple(sorted((name, tuple(dims)) for name, dims in (shapes or {}).items()))


def _size_classes(shaped: ShapedModel, tensors: Mapping[str, TensorInfo]) -> dict[str, int]:
    """How many of the reading limits each watched tensor passes at the sizes ``tensors`` gives: the tensors
    constant folding evaluated in ``shaped`` (:func:`lilou.graph.shape_completion.complete_shapes`) and 1-D inputs
    (which ONNX's data propagation materialises)."""
    inputs = {v.name for v in runtime_inputs(shaped.model)}
    watched = [*shaped.evaluated, *(n for n in inputs if n in tensors and len(tensors[n].shape or ()) == 1)]
    limits = (MAX_VALUE_ELEMENTS, MAX_FOLD_ELEMENTS)
    return {name: -1 if name not in tensors or tensors[name].elements is None
            else sum(tensors[name].elements > limit for limit in limits) for name in watched}


def _dimension_kinds(first: tuple[int, ShapedModel], second: tuple[int, ShapedModel]) -> Kinds | None:
    """Each tensor's dimensions sorted into fixed and proportional from two reads (None: some are neither, or the
    two reads differ in anything but shapes)."""
    (b0, s0), (b1, s1) = first, second
    if b0 == b1 or set(s0.tensors) != set(s1.tensors) or s0.notes != s1.notes or set(s0.evaluated) != set(s1.evaluated):
        return None
    kinds: Kinds = {}
    for name, info in s0.tensors.items():
        other = s1.tensors[name]
        if (info.dtype, info.itemsize) != (other.dtype, other.itemsize):
            return None
        if info.shape is None or other.shape is None:
            if info.shape != other.shape:
                return None
            kinds[name] = None
            continue
        if len(info.shape) != len(other.shape):
            return None
        kind = []
        for d0, d1 in zip(info.shape, other.shape):
            if d0 == d1:
                kind.append(_FIXED)
            elif d0 * b1 == d1 * b0:
                kind.append(_PROPORTIONAL)
            else:
                return None
        kinds[name] = tuple(kind)
    return kinds


def _scaled(shape: tuple[int, ...] | None, kinds: tuple[str, ...] | None, batch: int,
            first_batch: int) -> tuple[int, ...] | None | bool:
    """``shape`` (read at ``first_batch``) at ``batch``; False when a proportional dimension is not a whole number."""
    if shape is None or kinds is None:
        return shape
    dims = []
    for dim, kind in zip(shape, kinds):
        if kind == _FIXED:
            dims.append(dim)
        elif (dim * batch) % first_batch:
            return False
        else:
            dims.append(dim * batch // first_batch)
    return tuple(dims)


def same_graph(a: ModelGraph, b: ModelGraph) -> bool:
    """Whether two graphs are identical: every node's and edge's annotations, the inputs, outputs and warnings."""
    if (a.name, a.opset, a.inputs, a.outputs, a.warnings) != (b.name, b.opset, b.inputs, b.outputs, b.warnings):
        return False
    if dict(a.dag.nodes(data=True)) != dict(b.dag.nodes(data=True)):
        return False
    return {(u, v): d for u, v, d in a.dag.edges(data=True)} == {(u, v): d for u, v, d in b.dag.edges(data=True)}
