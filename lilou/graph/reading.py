"""Reading an ONNX file into a :class:`~lilou.graph.dag.ModelGraph`, with its shaping in a guarded child process.

Shaping a file (:func:`lilou.graph.dag.shape_model`: the checks, the write-backs of what exporters fused, ONNX's
shape inference and Lilou's completion of it) is most of what reading costs, and a command has other work that does
not need its result: imports, checkpoint loads. :func:`read_graph` starts the shaping at once in a forked child
(:class:`lilou.graph.guarded_inference.GuardedChild`: the memory cap and time limit that guarded ONNX's inference
alone before now hold for every step of the shaping) and returns; :meth:`GraphReading.graph` collects the shaped
model and builds the DAG. ``lilou infer`` and ``lilou rank`` start reading before they import the predictor.

The child answers with the shaped model, its tensor table, notes and evaluated sizes, but no initializer the parent
already holds unchanged (the weights: by reference to their place in the file); the parent rebuilds exactly the model
the shaping would have left in this process.

A model with subgraphs (``If``, ``Loop``: control flow is resolved by shaping candidates, each with its own guarded
inference), a process with other threads (``lilou serve``: a forked child keeps locks they hold) or a platform
without ``fork`` shapes in this process, as before, running the caller's ``meanwhile`` work during its guarded
inference.
"""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import onnx

from lilou.errors import LilouInputError
from lilou.graph import guarded_inference
from lilou.graph.loading import load_onnx

if TYPE_CHECKING:
    from lilou.graph.dag import ModelGraph, ShapedModel
    from lilou.graph.input_values import Value


class GraphReading:
    """An ONNX file being read (:func:`read_graph`); :meth:`graph` gives its ModelGraph. Use it as a context manager
    (or :meth:`close` it) so a reading given up on leaves no child behind. An error reading the file raises from
    :meth:`graph`, so a caller checks its own arguments (a GPU name) first, as it would before reading."""

    def __init__(self, path: str | os.PathLike[str], batch: int | None, shapes: Mapping[str, Sequence[int]] | None,
                 values: Mapping[str, Sequence[Value]] | None, restore_folded: bool, backend: str = "eager") -> None:
        self.path = path
        self.batch = batch
        self.name = os.path.splitext(os.path.basename(os.fspath(path)))[0]
        self._options = {"batch": batch, "shapes": shapes, "restore_folded": restore_folded, "values": values,
                         "backend": backend}
        self._model: onnx.ModelProto | None = None
        self._error: Exception | None = None
        self._child: guarded_inference.GuardedChild | None = None
        self._shaped: ShapedModel | None = None
        self._graph: ModelGraph | None = None
        self._notes: list[str] = []  # what the load left out (external data refused): first in the warnings
        try:
            self._model = load_onnx(path, self._notes)
        except Exception as exc:  # noqa: BLE001 - raised from graph(), after the caller's own checks
            self._error = exc
            return
        if _shapes_in_child(self._model):
            # The budget guarded inference gives a completion, from the file's size (the model's own, but for
            # external data) rather than a pass over the model to measure it.
            self._budget = guarded_inference.MEMORY_BUDGET + 7 * os.path.getsize(path)
            model = self._model
            self._child = guarded_inference.GuardedChild.start(self._budget,
                                                               lambda: _shaped_answer(model, self._options))

    def graph(self, meanwhile: Callable[[], object] | None = None) -> ModelGraph:
        """The annotated DAG of the file. ``meanwhile``: work this process does while the shaping runs (a head start
        only, as :func:`lilou.graph.guarded_inference.meanwhile`: what it raises is dropped)."""
        if self._graph is None:
            from lilou.graph.dag import annotate_graph

            self._graph = annotate_graph(self.shaped(meanwhile), name=self.name)
        return self._graph

    def shaped(self, meanwhile: Callable[[], object] | None = None) -> ShapedModel:
        """The file shaped (the stage before the DAG: :class:`lilou.graph.dag.ShapedModel`); ``meanwhile`` as in
        :meth:`graph`."""
        if self._shaped is None:
            if self._error is not None:
                raise self._error
            shaped = self._collected(meanwhile) if self._child is not None else self._shaped_here(meanwhile)
            shaped.notes[:0] = self._notes
            self._shaped = shaped
        return self._shaped

    def close(self) -> None:
        """Stop the child if its answer was never collected."""
        if self._child is not None:
            child, self._child = self._child, None
            child.close()

    def __del__(self) -> None:  # a reading dropped unread: reap its child, as subprocess.Popen does
        with contextlib.suppress(Exception):
            self.close()

    def __enter__(self) -> GraphReading:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _collected(self, meanwhile: Callable[[], object] | None) -> ShapedModel:
        with _meanwhile(meanwhile):
            guarded_inference.run_pending()  # while the child shapes: this work, and any an outer meanwhile set
        child, self._child = self._child, None
        payload, status = child.collect()
        return _shaped_from(payload, status, self._budget, self._model)

    def _shaped_here(self, meanwhile: Callable[[], object] | None) -> ShapedModel:
        from lilou.graph.dag import shape_model

        if not guarded_inference.is_flat(self._model):  # a subgraph may take the main graph's initializers
            with _meanwhile(meanwhile):  # run during its guarded inference
                return shape_model(self._model, **self._options)
        # As the child does: the weights' bytes stay out of the shaping's copies, and the file's own come back after
        model = guarded_inference.weightless_copy(self._model)
        originals = [_copied(tensor) for tensor in model.graph.initializer]
        with _meanwhile(meanwhile):
            shaped = shape_model(model, **self._options)
        sources, sent = _initializer_sources(shaped.model.graph, originals)
        shaped.model = _with_file_initializers(shaped.model, self._model, sources, sent)
        return shaped


def read_graph(path: str | os.PathLike[str], batch: int | None = None,
               shapes: Mapping[str, Sequence[int]] | None = None,
               values: Mapping[str, Sequence[Value]] | None = None, restore_folded: bool = True,
               backend: str = "eager") -> GraphReading:
    """Start reading ``path`` (arguments as :func:`lilou.graph.dag.load_graph`); see the module docstring."""
    return GraphReading(path, batch, shapes, values, restore_folded, backend)


def _meanwhile(work: Callable[[], object] | None):
    """:func:`lilou.graph.guarded_inference.meanwhile` of ``work``, if any."""
    return guarded_inference.meanwhile(*(() if work is None else (work,)))


def _shapes_in_child(model: onnx.ModelProto) -> bool:
    return guarded_inference.may_fork_here() and guarded_inference.is_flat(model)


def _shaped_answer(model: onnx.ModelProto, options: dict) -> bytes:
    """In the child: b"S", the length and JSON of the tensor table, notes, evaluated sizes and where each initializer
    comes from, then the shaped model (without the initializers the parent has); b"L" and the input error; b"X" and a
    bug's name and message; or b"M"."""
    from lilou.graph.dag import shape_model

    guarded_inference.without_weight_bytes(model)  # the child's own copy: its memory must not grow with the weights' bytes
    originals = [_copied(tensor) for tensor in model.graph.initializer]
    try:
        shaped = shape_model(model, **options)
    except MemoryError:
        return b"M"
    except LilouInputError as exc:
        return b"L" + str(exc).encode("utf-8", "replace")
    except Exception as exc:  # noqa: BLE001 - a bug: named, and raised in the parent as an internal error
        return b"X" + f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")
    sources, sent = _initializer_sources(shaped.model.graph, originals)
    shaped.model.graph.ClearField("initializer")
    shaped.model.graph.initializer.extend(sent)
    head = json.dumps({"tensors": [[t.name, t.shape, t.dtype, t.itemsize] for t in shaped.tensors.values()],
                       "notes": shaped.notes, "evaluated": shaped.evaluated, "initializers": sources,
                       "unbatched": sorted(shaped.unbatched), "weight_inputs": sorted(shaped.weight_inputs)}).encode()
    return b"S" + len(head).to_bytes(8, "little") + head + shaped.model.SerializeToString()


def _copied(tensor: onnx.TensorProto) -> onnx.TensorProto:
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    return copy


def _initializer_sources(graph: onnx.GraphProto, originals: list[onnx.TensorProto]
                         ) -> tuple[list[int], list[onnx.TensorProto]]:
    """For each initializer of the shaped graph, the index of the file's initializer it equals (the parent has it)
    or -1 (sent: the shaping wrote it), and those sent, in order."""
    unused: dict[str, list[int]] = {}
    for index, tensor in enumerate(originals):
        unused.setdefault(tensor.name, []).append(index)
    sources, sent = [], []
    for tensor in graph.initializer:
        match = next((i for i in unused.get(tensor.name, ()) if originals[i] == tensor), None)
        if match is None:
            sources.append(-1)
            sent.append(tensor)
        else:
            unused[tensor.name].remove(match)
            sources.append(match)
    return sources, sent


def _with_file_initializers(shaped: onnx.ModelProto, model: onnx.ModelProto, sources: Sequence[int],
                            sent: Sequence[onnx.TensorProto]) -> onnx.ModelProto:
    """``shaped`` (its initializers: ``sources`` as :func:`_initializer_sources` gives them, ``sent`` those the shaping
    wrote) with the file's own initializers, those of ``model``, the file as this process read it.

    ``model`` itself becomes the shaped model: its unused initializers dropped, the shaping's appended, all put in
    the shaping's order (a protobuf sort moves them, it copies none), every other field taken from ``shaped``.
    Copying the weights into ``shaped`` instead doubled a weight-full file's memory (a 235 MB FP16 GEMV: 765 MB at
    the peak, against 505 for ``onnx.load`` alone). An initializer of the file used twice is copied, as before."""
    kept = [i for i in sources if i >= 0]
    if len(set(kept)) != len(kept):
        written = iter(sent)
        initializers = [model.graph.initializer[i] if i >= 0 else next(written) for i in sources]
        shaped.graph.ClearField("initializer")
        shaped.graph.initializer.extend(initializers)
        return shaped
    initializers = model.graph.initializer
    own = list(initializers)  # the file's, before any is dropped: where each goes is keyed by its object
    for index in sorted(set(range(len(own))) - set(kept), reverse=True):
        del initializers[index]
    initializers.extend(sent)
    appended = list(initializers)[len(kept):]  # held, as ``own`` is, so that no id is reused before the sort
    written = iter(appended)
    place = {id(own[i]) if i >= 0 else id(next(written)): position for position, i in enumerate(sources)}
    initializers.sort(key=lambda tensor: place[id(tensor)])
    _take_fields(model.graph, shaped.graph, keep="initializer")
    _take_fields(model, shaped, keep="graph")
    return model


def _take_fields(target, source, keep: str) -> None:
    """Every field of protobuf message ``target`` but ``keep`` set as ``source`` has it."""
    for field in source.DESCRIPTOR.fields:
        if field.name == keep:
            continue
        target.ClearField(field.name)
        if field.is_repeated:
            getattr(target, field.name).extend(getattr(source, field.name))
        elif field.message_type is not None:
            if source.HasField(field.name):
                getattr(target, field.name).CopyFrom(getattr(source, field.name))
        elif not field.has_presence or source.HasField(field.name):
            setattr(target, field.name, getattr(source, field.name))


def _shaped_from(payload: bytes | None, status: int | None, budget: int, model: onnx.ModelProto) -> ShapedModel:
    """The ShapedModel the child's ``payload`` stands for (``model``: the file as the parent read it), or the error
    it reports, in the words guarded inference uses for a child that ran out of time or memory."""
    from lilou.graph.costs import TensorInfo
    from lilou.graph.dag import ShapedModel

    if payload is not None and payload.startswith(b"S") and status == 0:
        size = int.from_bytes(payload[1:9], "little")
        head = json.loads(payload[9:9 + size])
        shaped = onnx.ModelProto()
        shaped.ParseFromString(payload[9 + size:])
        shaped = _with_file_initializers(shaped, model, head["initializers"], list(shaped.graph.initializer))
        tensors = {name: TensorInfo(name=name, shape=None if shape is None else tuple(shape), dtype=dtype,
                                    itemsize=itemsize)
                   for name, shape, dtype, itemsize in head["tensors"]}
        return ShapedModel(model=shaped, tensors=tensors, notes=head["notes"], evaluated=head["evaluated"],
                           unbatched=frozenset(head["unbatched"]), weight_inputs=frozenset(head["weight_inputs"]))
    if payload is not None and payload.startswith(b"L"):
        raise LilouInputError(payload[1:].decode("utf-8", "replace"))
    if payload is not None and payload.startswith(b"X"):
        raise RuntimeError(f"shaping the model failed: {payload[1:].decode('utf-8', 'replace')}")
    # Out of time or memory, an abort inside ONNX, or a child that died while writing: what guarded inference says.
    raise guarded_inference.child_failure(payload if payload in (None, b"M") else b"", status, budget)
