"""ONNX model -> annotated DAG (networkx).

Nodes of the DiGraph are ONNX node names, with attributes:
``op``, ``domain``, ``attributes`` (plain Python values), ``inputs`` and
``outputs`` (lists of :class:`TensorInfo`, ``None`` for omitted optionals),
``flops``, ``bytes_read``, ``bytes_written``, ``constant`` (True when the node
only computes a constant or a shape and a runtime would fold it), ``order``
(position in the file, a valid topological order) and ``supported``.
An edge ``u -> v`` means v consumes a tensor u produces; its attributes are
``tensor`` (first such tensor), ``tensors`` (all), ``shape``, ``dtype`` and ``bytes``.
"""
from __future__ import annotations

import functools
import math
import operator
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import onnx
from onnx import helper

from lilou.errors import LilouInputError
from lilou.graph.costs import (CONTROL_FLOW_OPS, SEQUENCE_OPS, SUPPORTED_OPS, VIEW_OPS, CostInput, NodeCost,
                               TensorInfo, batchnorm_training, node_cost)
from lilou.graph.batch_axis import (onnx_fixed_size_inputs, onnx_unbatched_inputs, onnx_weight_inputs,
                                    unbatched_inputs_note)
from lilou.graph.branches import resolve_branches
from lilou.graph.input_values import Value, bind_input_values, bound_value_names
from lilou.graph.loops import MAX_UNROLLED_NODES, UNBOUNDED_TRIPS, loop_runs_every_trip, resolve_loops
from lilou.graph.constants import constant_tensors, scalar_integers, scalar_truths
from lilou.graph.contrib_diffusion import CHANNELS_LAST_OPS
from lilou.graph.contrib_ops import restore_contrib_ops
from lilou.graph.quantized import (float_activation_note, folded_nodes, quantized_tensors, restore_quantized_ops,
                                   runtime_types)
from lilou.graph.exporter_fusions import restore_exporter_fusions
from lilou.graph.implied_dimensions import implied_dimensions
from lilou.graph.fixed_sizes import ResizedInput, input_dims, resized_inputs, unshaped_nodes, with_fixed_sizes
from lilou.graph.folded_norms import exported_in_training_mode, restore_folded_batchnorms
from lilou.graph.loss_ops import split_cross_entropy
from lilou.graph.names import unique_node_names
from lilou.graph.shape_completion import values_of
from lilou.graph.transposes import cancel_inverse_transposes
from lilou.graph.tensorrt_qdq import standard_fp8_qdq
from lilou.graph.stated_loops import assume_one_iteration, split_loop_values, state_loop_iterations, stating_iterations
from lilou.graph.shapes import SIZES_GIVEN, apply_input_shapes, checked_shapes, infer_shapes, runtime_inputs
from lilou.graph.validation import (check_initializers, check_opset, check_ranges, check_reshapes, check_sizes,
                                    check_splits, check_structure, check_windows)

if TYPE_CHECKING:
    import networkx as nx

# Ops whose output depends only on the *type or shape* of these input positions,
# so they are constant once shapes are static.
_METADATA_ONLY_INPUTS = {"Shape": {0}, "Size": {0}, "CastLike": {1}, "EyeLike": {0}}

_second = operator.itemgetter(1)
T = TypeVar("T")


@dataclass
class ModelGraph:
    """An ONNX model as an annotated DAG plus what the user should know about it."""

    name: str
    dag: nx.DiGraph
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    opset: int
    warnings: list[str] = field(default_factory=list)
    _derived: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def derived(self, key: str, compute: Callable[[], T]) -> T:
        """``compute()``, once per graph under ``key``: a fact that stages derive from the graph alone, more than once
        per prediction. The DAG is not changed once built (a changed copy is a new ModelGraph, which starts empty)."""
        if key not in self._derived:
            self._derived[key] = compute()
        return self._derived[key]

    def nodes_in_order(self) -> list[str]:
        return [node for node, _ in sorted(self.dag.nodes(data="order"), key=_second)]

    def same_structure(self, other: ModelGraph) -> bool:
        """Whether ``other`` has the same nodes, edges and constant subgraphs (the same file read at another
        batch size, say), so that kernel groups of one fit the other."""
        if self.dag.number_of_nodes() != other.dag.number_of_nodes() or set(self.dag.edges) != set(other.dag.edges):
            return False
        mine, theirs = self.dag.nodes, other.dag.nodes
        return all(n in theirs and mine[n]["constant"] == theirs[n]["constant"] for n in mine)

    def writer(self, node: str, tensor: str) -> str | None:
        """The node that writes ``tensor``, an input of ``node``; None for a graph input or an initializer."""
        return next((p for p in self.dag.predecessors(node) if tensor in self.dag.edges[p, node]["tensors"]), None)

    def runtime_nodes(self) -> list[str]:
        """Nodes a runtime executes (constant/shape subgraphs excluded), in file order."""
        constant = dict(self.dag.nodes(data="constant"))
        return [n for n in self.nodes_in_order() if not constant[n]]

    def constant_tensors(self) -> set[str]:
        """Initializers and outputs of constant subgraphs (weights, biases, folded shapes): a set of the caller's own,
        of names found once per graph (six stages ask, 1.7 ms each on BERT-large)."""
        return set(self.derived("constant tensors", self._constant_tensors))

    def _constant_tensors(self) -> frozenset[str]:
        data = self.dag.nodes
        produced = {t.name for n in data for t in data[n]["outputs"]}
        inputs = {t.name for t in self.inputs} - set(self.dag.graph.get("weight_inputs", ()))  # those are weights
        constant = {t.name for n in data if data[n]["constant"] for t in data[n]["outputs"]}
        constant.update(t.name for n in data for t in data[n]["inputs"]
                        if t is not None and t.name not in produced and t.name not in inputs)
        return frozenset(constant)

    def totals(self) -> dict[str, int]:
        nodes = self.runtime_nodes()
        data = self.dag.nodes
        return {
            "nodes": len(nodes),
            "flops": sum(data[n]["flops"] for n in nodes),
            "bytes": sum(data[n]["bytes_read"] + data[n]["bytes_written"] for n in nodes),
        }

    @property
    def unsupported_ops(self) -> list[str]:
        return sorted({d["op"] for _, d in self.dag.nodes(data=True) if not d["supported"]})


def load_graph(path: str | os.PathLike[str], batch: int | None = None,
               shapes: Mapping[str, Sequence[int]] | None = None, restore_folded: bool = True,
               values: Mapping[str, Sequence[Value]] | None = None, backend: str = "eager") -> ModelGraph:
    """Load an ONNX file, apply input-shape overrides and input values, infer shapes and annotate every node (the
    shaping in a guarded child: :mod:`lilou.graph.reading`). ``restore_folded`` and ``backend``: see
    :func:`build_graph`."""
    from lilou.graph.reading import read_graph

    with read_graph(path, batch=batch, shapes=shapes, values=values, restore_folded=restore_folded,
                    backend=backend) as reading:
        return reading.graph()


def build_graph(model: onnx.ModelProto, name: str = "model", batch: int | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None, restore_folded: bool = True,
                values: Mapping[str, Sequence[Value]] | None = None, backend: str = "eager") -> ModelGraph:
    """``restore_folded``: put back what an exporter or optimizer fused that eager runs as the module's own ops: batch
    norms folded into convolutions (:mod:`lilou.graph.folded_norms`), onnxscript's RMS-norm fusion
    (:mod:`lilou.graph.exporter_fusions`), onnxruntime's contrib ops (:mod:`lilou.graph.contrib_ops`), eager's
    log_softmax and nll_loss kernels of a SoftmaxCrossEntropyLoss, and quantized graphs (:mod:`lilou.graph.quantized`);
    the fusion dataset keeps the file's own nodes, which its labels name. All but the quantized graphs describe eager
    PyTorch: for any other ``backend`` (TVM compiles the file as written) only the quantized graphs are rewritten."""
    return annotate_graph(shape_model(model, batch=batch, shapes=shapes, restore_folded=restore_folded, values=values,
                                      backend=backend), name=name)


@dataclass
class ShapedModel:
    """An ONNX model with its input shapes set and every tensor's shape inferred: the stage before the DAG.

    ``tensors`` maps every tensor name to its :class:`TensorInfo`; ``notes`` are what inference had to say
    (shapes completed by constant folding ...); ``evaluated`` the sizes of the tensors constant folding
    computed. :mod:`lilou.graph.batch_series` derives other batch sizes' tables from two of these."""

    model: onnx.ModelProto
    tensors: dict[str, TensorInfo]
    notes: list[str]
    evaluated: dict[str, int] = field(default_factory=dict)
    unbatched: frozenset[str] = frozenset()  # inputs whose size does not follow the batch (lilou.graph.batch_axis)
    weight_inputs: frozenset[str] = frozenset()  # those of them read as weights (lilou.graph.batch_axis)


def shape_model(model: onnx.ModelProto, batch: int | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None, restore_folded: bool = True,
                values: Mapping[str, Sequence[Value]] | None = None, backend: str = "eager") -> ShapedModel:
    """Check the file, set its input values and shapes (in place) and infer every tensor's shape
    (``restore_folded`` and ``backend``: see :func:`build_graph`; ``values``: :mod:`lilou.graph.input_values`). An ``If`` whose
    branch is known or chosen is first written as that branch (:mod:`lilou.graph.branches`), a ``Loop`` whose trip
    count is known as its body once per iteration (:mod:`lilou.graph.loops`)."""
    check_opset(model)
    check_initializers(model)
    shapes = asked = checked_shapes(shapes)  # the Python API's, checked as --shape is
    loop_counts, values = split_loop_values(model, values)
    bound = bind_input_values(model, values, shapes) + state_loop_iterations(model, loop_counts)
    if bound:
        shapes = {name: dims for name, dims in (shapes or {}).items() if name not in values}
    shapes, notes = implied_dimensions(model, shapes)
    notes[:0] = bound
    inputs = runtime_inputs(model)
    fixed = input_dims(inputs)
    unbatched = frozenset(onnx_unbatched_inputs(model.graph, inputs))  # --batch sets not their batch axis: weights
    fixed_size = frozenset(onnx_fixed_size_inputs(model.graph, inputs, unbatched))  # fed as inputs, tables ... of
    weight_inputs = frozenset(onnx_weight_inputs(model.graph, inputs, fixed_size))  # which these are weights
    apply_input_shapes(model, batch=batch, shapes=shapes, unbatched=unbatched)
    token = SIZES_GIVEN.set(batch is not None or bool(asked))
    try:
        shaped = _shape_resolved(model, restore_folded, notes, backend)
    finally:
        SIZES_GIVEN.reset(token)
    resized = resized_inputs(fixed, runtime_inputs(model))
    if resized:
        _check_sizes_follow(shaped, resized)
    shaped.unbatched, shaped.weight_inputs = fixed_size & set(shaped.tensors), weight_inputs & set(shaped.tensors)
    return shaped


def _check_sizes_follow(shaped: ShapedModel, resized: list[ResizedInput]) -> None:
    """Refuse sizes the graph's own shapes do not follow (:mod:`lilou.graph.fixed_sizes`): tensors whose shape
    inference knows at the file's fixed sizes and not at those asked for."""
    unshaped = unshaped_nodes(shaped.model, shaped.tensors)
    if not unshaped:
        return
    native = _shape_checked(with_fixed_sizes(shaped.model, resized), restore_folded=False, notes=[])
    lost = [n for n in unshaped if n not in set(unshaped_nodes(native.model, native.tensors))]
    if lost:
        asked = ", ".join(str(r) for r in resized[:3]) + (" ..." if len(resized) > 3 else "")
        raise LilouInputError(f"the file fixes its input sizes ({asked}), and at the sizes asked {len(lost)} node(s) "
                              f"have no shape ({_listed(lost)}): the model has fixed shapes baked in; re-export it "
                              "with the batch and shapes you want, or price it at its own sizes")


def _shape_resolved(model: onnx.ModelProto, restore_folded: bool, notes: list[str],
                    backend: str = "eager") -> ShapedModel:
    """:func:`shape_model` once the input shapes are set: control flow resolved, then every shape inferred."""
    check_structure(model)
    check_ranges(model.graph)
    if any(node.op_type in ("If", "Loop") for node in model.graph.node):
        def size(candidate: onnx.ModelProto) -> tuple[tuple[float, float], ShapedModel]:
            work = onnx.ModelProto()
            work.CopyFrom(candidate)
            check_structure(work)
            check_ranges(work.graph)
            shaped = _shape_checked(work, restore_folded, [], backend)
            graph = annotate_graph(shaped)  # its shape checks: a branch that cannot run at these shapes says so
            return _total_size(graph), shaped

        def truth(candidate: onnx.ModelProto, name: str) -> bool | None:
            value = _shape_value(candidate, name)
            return bool(value) if value is not None else None

        def count(candidate: onnx.ModelProto, name: str) -> int | None:
            value = _shape_value(candidate, name)
            return int(value) if value is not None else None

        before = len(notes)
        written = resolve_loops(model, notes, count)
        written += assume_one_iteration(model, notes, MAX_UNROLLED_NODES - written)
        model, chosen = resolve_branches(model, notes, size, truth)
        held = resolve_loops(model, notes, count, MAX_UNROLLED_NODES - written)  # a loop a branch held
        if held + assume_one_iteration(model, notes, MAX_UNROLLED_NODES - written - held):
            chosen = None
        if chosen is not None:
            chosen.notes[:0] = notes
            return chosen
        if len(notes) > before:  # control flow was written out: its nodes are checked as the file's own are
            check_structure(model)
            check_ranges(model.graph)
    return _shape_checked(model, restore_folded, notes, backend)


def _shape_value(model: onnx.ModelProto, name: str) -> float | None:
    """The one-element value of tensor ``name`` where the bound shapes decide it (``x.size(0) > 1``), else None."""
    work = onnx.ModelProto()
    work.CopyFrom(model)
    try:
        value = values_of(infer_shapes(work, notes=[]), [name]).get(name)
    except LilouInputError:
        return None  # what the shaping of the model itself will report
    return value.reshape(-1)[0].item() if value is not None and value.size == 1 else None


def _total_size(graph: ModelGraph) -> tuple[float, float]:
    """FLOPs and bytes of every node of a graph (what picks the larger branch of an ``If``)."""
    nodes = [data for _, data in graph.dag.nodes(data=True) if not data["constant"]]
    return (float(sum(data["flops"] for data in nodes)),
            float(sum(data["bytes_read"] + data["bytes_written"] for data in nodes)))


def _shape_checked(model: onnx.ModelProto, restore_folded: bool, notes: list[str],
                   backend: str = "eager") -> ShapedModel:
    """:func:`shape_model` after its checks: put back what was fused, then infer every shape."""
    # What eager runs as the module's own ops; any other backend compiles the file as written (TVM: a folded batch
    # norm stays in its convolution). onnxruntime's contrib ops are written back for every backend: what they replaced
    # is the graph TVM compiles and fuses itself (its importer reads only a few of them).
    as_eager = restore_folded and backend.lower() == "eager"
    contrib = restore_contrib_ops(model) if restore_folded else {}  # first: a FusedConv's Conv may hold a folded norm
    restored = restore_folded_batchnorms(model) if as_eager else []
    if restored:
        notes.append(f"{len(restored)} BatchNormalization(s) that the exporter folded into the node before them "
                     f"({_listed(restored)}) are restored as their own kernels, as eager PyTorch runs them "
                     "(export with optimize=False to keep them)")
    if as_eager:  # eager's log_softmax and nll_loss kernels, as ONNX defines the op (a file's own nodes kept else)
        split_cross_entropy(model)
    unfused = restore_exporter_fusions(model) if as_eager else []
    if unfused:
        notes.append(f"{len(unfused)} RMSNormalization(s) that the exporter fused out of a module eager runs op by op "
                     f"({_listed(unfused)}; onnxscript's RmsNormFusion) are priced as those ops")
    if contrib:
        notes.append(_contrib_note(contrib, as_eager))
    if restore_folded:
        standard_fp8_qdq(model)  # ModelOpt's TensorRT FP8 Q/DQ as ONNX's, read as FP8 below
    quantized = restore_quantized_ops(model) if restore_folded else None
    if quantized:
        notes.append(quantized.note())
    _sort_topologically(model)
    evaluated: dict[str, int] = {}
    inferred = infer_shapes(model, notes=notes, evaluated=evaluated)
    tensors = _tensor_table(inferred)
    if any(op in CHANNELS_LAST_OPS for op in contrib):  # the transposes to and from channels-last that undo each other
        cancel_inverse_transposes(inferred.graph, {name: info.dtype for name, info in tensors.items()})
    if quantized:
        tensors = runtime_types(tensors, quantized, inferred.graph.node)
        mixed = float_activation_note(tensors, inferred.graph.node)
        if mixed:
            notes.append(mixed)
    return ShapedModel(model=inferred, tensors=tensors, notes=notes, evaluated=evaluated)


def _contrib_note(contrib: Mapping[str, int], as_eager: bool) -> str:
    """What a prediction says of the onnxruntime contrib ops written back (:func:`restore_contrib_ops`)."""
    counts = ", ".join(f"{count} {op}" for op, count in sorted(contrib.items()))
    if as_eager:
        return (f"onnxruntime's fused ops ({counts}) are priced as the standard ops the exporter writes for the modules "
                "they replaced, as eager PyTorch runs them")
    return (f"onnxruntime's fused ops ({counts}) are priced as the standard ops they replaced, compiled and fused by "
            "TVM; TVM's ONNX importer reads only a few of onnxruntime's ops (Attention, EmbedLayerNormalization, "
            "SkipLayerNormalization, BiasGelu) and refuses the others: give TVM the export before onnxruntime "
            "optimized it")


def annotate_graph(shaped: ShapedModel, name: str = "model") -> ModelGraph:
    """The annotated DAG of a shaped model (FLOPs and bytes per node), after the checks that need shapes."""
    inferred, tensors, notes = shaped.model, shaped.tensors, list(shaped.notes)
    check_sizes(tensors)
    dag = _build_dag(inferred, tensors, notes)
    dag.graph["producer"] = inferred.producer_name  # "pytorch" for torch.onnx; its names mean things (fusion)
    dag.graph["quantized"] = quantized_tensors(inferred, tensors)  # floats stored quantized (--precision retypes them)
    dag.graph["folded"] = folded_nodes(inferred)  # the file's quantize and dequantize nodes folded into others
    dag.graph["unbatched_inputs"] = shaped.unbatched  # inputs without the batch, and which of them are weights
    dag.graph["weight_inputs"] = shaped.weight_inputs  # (lilou.graph.batch_axis)
    check_reshapes(dag)
    check_windows(dag)
    check_splits(inferred.graph, tensors)
    stated = bound_value_names(inferred.graph)  # inputs with a --value: still fed, so not constants
    _mark_constant_subgraphs(dag, initializers=({t.name for t in inferred.graph.initializer} | shaped.weight_inputs) - stated)
    _mark_shape_only_values(dag, graph_outputs={v.name for v in inferred.graph.output})
    warnings = _warnings(dag) + notes
    graph = ModelGraph(
        name=name,
        dag=dag,
        inputs=[tensors[v.name] for v in runtime_inputs(inferred)] + [tensors[n] for n in sorted(stated) if n in tensors],
        outputs=[tensors.get(v.name) or _unknown(v.name) for v in inferred.graph.output],
        opset=_default_opset(inferred),
        warnings=warnings,
    )
    graph.warnings += unbatched_inputs_note(graph)
    return graph


def _default_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _unknown(name: str) -> TensorInfo:
    return TensorInfo(name=name, shape=None, dtype="unknown", itemsize=0)


def _sort_topologically(model: onnx.ModelProto) -> None:
    """Put nodes in a valid topological order (files in the wild break that rule), keeping file order
    where it is already valid, so such a file gives the same answer as its sorted copy."""
    graph = model.graph
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    reads = [_node_reads(node) for node in graph.node]
    if all(producer.get(t, -1) <= i for i, names in enumerate(reads) for t in names):
        return  # already in order (nearly every file), a node reading its own output aside
    needs = [sorted({producer[t] for t in names if t in producer and producer[t] != i}) for i, names in enumerate(reads)]
    import heapq

    waiting = [len(deps) for deps in needs]
    users: list[list[int]] = [[] for _ in graph.node]
    for i, deps in enumerate(needs):
        for j in deps:
            users[j].append(i)
    ready = [i for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for user in users[i]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    if len(order) != len(graph.node):
        raise LilouInputError("the graph has a cycle through a subgraph's outer-scope inputs; "
                              "an ONNX graph must be acyclic")
    nodes = [graph.node[i] for i in order]
    copies = [onnx.NodeProto() for _ in nodes]
    for copy, node in zip(copies, nodes):
        copy.CopyFrom(node)
    graph.ClearField("node")
    graph.node.extend(copies)


def _node_reads(node: onnx.NodeProto) -> set[str]:
    """Tensors a node reads: its inputs and the outer-scope names its subgraphs use."""
    reads = {t for t in node.input if t}
    for attr in node.attribute:
        for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else
                    list(attr.graphs) if attr.type == onnx.AttributeProto.GRAPHS else []):
            local = {v.name for v in sub.input} | {t.name for t in sub.initializer}
            local |= {out for n in sub.node for out in n.output}
            inner = set().union(*(_node_reads(n) for n in sub.node)) if len(sub.node) else set()
            inner |= {v.name for v in sub.output}
            reads |= inner - local
    return reads


def _tensor_table(model: onnx.ModelProto) -> dict[str, TensorInfo]:
    return _graph_tensor_table(model.graph)


def _graph_tensor_table(graph: onnx.GraphProto) -> dict[str, TensorInfo]:
    table: dict[str, TensorInfo] = {}
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        info = _tensor_info_from_value(value)
        known = table.get(value.name)
        if info is not None and (known is None or known.shape is None):  # never forget a known shape
            table[value.name] = info
    for tensor in graph.initializer:
        table[tensor.name] = _make_info(tensor.name, tuple(int(d) for d in tensor.dims), tensor.data_type)
    for node in graph.node:  # Constant nodes carry their value's shape in an attribute
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                    table[node.output[0]] = _make_info(node.output[0], tuple(attr.t.dims), attr.t.data_type)
        elif node.op_type == "Cast" and node.domain in ("", "ai.onnx") and node.output and node.output[0] in table:
            # a Cast writes the type it names, whatever a stale value info says (onnxconverter-common's keep_io_types
            # leaves FP16 on the output Cast to FP32: it read as a cast to its own type, no kernel, and the graph's
            # output as FP16 where onnxruntime returns FP32)
            to = next((a.i for a in node.attribute if a.name == "to" and a.type == onnx.AttributeProto.INT), None)
            info = table[node.output[0]]
            if to is not None and _element_type(to)[0] not in ("unknown", info.dtype):
                table[node.output[0]] = _make_info(info.name, info.shape, to)
    return table


def _tensor_info_from_value(value: onnx.ValueInfoProto) -> TensorInfo | None:
    if not value.type.HasField("tensor_type"):
        return None
    tensor_type = value.type.tensor_type
    shape: tuple[int, ...] | None = None
    if tensor_type.HasField("shape"):
        dims = tensor_type.shape.dim
        values = tuple(d.dim_value for d in dims)
        # An unset (symbolic) dim reads as 0: only then is each dim asked whether it holds a value.
        if min(values, default=0) >= 0 and (0 not in values or all(d.HasField("dim_value") for d in dims)):
            shape = values
    return _make_info(value.name, shape, tensor_type.elem_type)


def _make_info(name: str, shape: tuple[int, ...] | None, elem_type: int) -> TensorInfo:
    dtype, itemsize = _element_type(elem_type)
    return TensorInfo(name=name, shape=shape, dtype=dtype, itemsize=itemsize)


@functools.lru_cache(maxsize=64)
def _element_type(elem_type: int) -> tuple[str, int]:
    """(numpy dtype name, item size) of an ONNX element type, ("unknown", 0) for one numpy lacks; once per type
    (``np.dtype(...).name`` costs microseconds, and a model has thousands of tensors)."""
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
        return dtype.name, dtype.itemsize
    except (KeyError, TypeError, ValueError):
        return "unknown", 0


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attr in node.attribute:
        if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            values[attr.name] = "<subgraph>"
        elif attr.type == onnx.AttributeProto.TENSOR:
            values[attr.name] = f"<tensor {list(attr.t.dims)}>"
        else:
            value = helper.get_attribute_value(attr)
            if isinstance(value, bytes):
                value = value.decode(errors="replace")
            elif isinstance(value, list):
                value = [v.decode(errors="replace") if isinstance(v, bytes) else v for v in value]
            values[attr.name] = value
    if node.op_type == "BatchNormalization" and not values.get("training_mode") and exported_in_training_mode(node):
        values["training_mode"] = 1
    return values


def _subgraph_cost(graph: onnx.GraphProto, outer: Mapping[str, TensorInfo], constants: Mapping[str, int],
                   notes: list[str], opset: int = 0, truths: Mapping[str, bool] | None = None) -> NodeCost:
    """Sum of the costs of a subgraph's nodes (control flow inside costed the same way), and the kernels eager
    launches for one run of it: its nodes that launch one (:func:`_launching_nodes`), control flow inside counted
    with its own launches."""
    tensors = {**outer, **_graph_tensor_table(graph)}
    constants = {**constants, **scalar_integers(graph)}
    truths = {**(truths or {}), **scalar_truths(graph)}
    flops = read = written = launches = 0
    for node, launching in zip(graph.node, _launching_nodes(graph)):
        cost = _node_cost(node, tensors, constants, notes, opset=opset, truths=truths, top_level=False)
        flops, read, written = flops + cost.flops, read + cost.bytes_read, written + cost.bytes_written
        launches += cost.launches if launching else 0
    return NodeCost(flops=flops, bytes_read=read, bytes_written=written, launches=launches)


def _launching_nodes(graph: onnx.GraphProto) -> list[bool]:
    """Per node of a subgraph: does eager launch a kernel for it each time the subgraph runs? Not for a view
    (``VIEW_OPS``, a sequence element) nor for a node computed from the subgraph's constants alone (its initializers,
    ``Constant`` nodes, shapes: what the top-level graph marks constant, :func:`_mark_constant_subgraphs`). An
    estimate from above: ops eager runs as one call (a decomposed layer norm) count one each here."""
    known = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    launching = []
    for node in graph.node:
        metadata = _METADATA_ONLY_INPUTS.get(node.op_type, set())
        constant = node.op_type not in CONTROL_FLOW_OPS and all(
            t in known for i, t in enumerate(node.input) if t and i not in metadata)
        if constant:
            known.update(t for t in node.output if t)
        launching.append(not constant and node.op_type not in VIEW_OPS and node.op_type not in SEQUENCE_OPS)
    return launching


def _node_cost(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo], constants: Mapping[str, int],
               notes: list[str], attributes: Mapping[str, Any] | None = None,
               io: tuple[list[TensorInfo | None], list[TensorInfo]] | None = None, opset: int = 0,
               truths: Mapping[str, bool] | None = None, top_level: bool = True) -> NodeCost:
    """FLOPs and bytes of one node (``attributes``: its :func:`_attributes`, ``io``: its :func:`_node_io`, when the
    caller has them; ``opset``: the model's, which decides what a ``Scan``'s inputs are; ``truths``: the one-element
    constants of the graphs around it as truth values, which say whether a ``Loop``'s condition can stop it;
    ``top_level``: the node is the model's own, not inside a subgraph, so ``--value`` can name it)."""
    inputs, outputs = _node_io(node, tensors) if io is None else io
    attributes = _attributes(node) if attributes is None else attributes
    cost = node_cost(CostInput(op=node.op_type, attributes=attributes, inputs=inputs, outputs=outputs))
    if node.domain not in ("", "ai.onnx") or node.op_type not in ("Loop", "If", "Scan"):
        return cost
    graphs = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
    label = node.name or node.op_type
    if node.op_type == "If" and "then_branch" in graphs and "else_branch" in graphs:
        branches = [_subgraph_cost(graphs[b], tensors, constants, notes, opset, truths)
                    for b in ("then_branch", "else_branch")]
        larger = max(branches, key=lambda c: (c.flops, c.bytes_read + c.bytes_written))
        notes.append(f"If {label!r} is costed as its larger branch (the condition is known only at run time)")
        return larger
    if node.op_type == "Loop" and "body" in graphs:
        body = _subgraph_cost(graphs["body"], tensors, constants, notes, opset, truths)
        trip = constants.get(node.input[0]) if node.input and node.input[0] else None
        unbounded = trip is not None and trip >= UNBOUNDED_TRIPS
        if not loop_runs_every_trip(node, truths or {}) or unbounded:
            # a while loop (TorchScript's Loop(M=INT64_MAX, cond)) or a for loop with a break: the condition decides
            bound = ("no bound" if trip is None or trip < 0 or unbounded else f"at most {trip}")
            notes.append(f"Loop {label!r} stops on a condition known only at run time ({bound}): its iterations are "
                         f"unknown, so it is costed as one iteration of its body; {stating_iterations(node, top_level)}")
            trip = 1
        elif trip is None or trip < 0:
            notes.append(f"Loop {label!r} has no constant trip count: costed as one iteration of its body (a count "
                         "the file takes as an input can be given with --value NAME=N)")
            trip = 1
        else:
            notes.append(f"Loop {label!r} is costed as its body times its trip count ({trip}), as one kernel "
                         f"{_launched(body.launches, trip, 'iteration')}")
        return NodeCost(flops=body.flops * trip, bytes_read=body.bytes_read * trip,
                        bytes_written=body.bytes_written * trip, launches=body.launches * trip)
    if node.op_type == "Scan" and "body" in graphs:
        body = _subgraph_cost(graphs["body"], tensors, constants, notes, opset, truths)
        trip = _scan_length(node, inputs, opset)
        if trip is None:
            notes.append(f"Scan {label!r} has no scan length known from its input shapes: costed as one iteration "
                         "of its body")
            trip = 1
        elif 0 < opset < 9:
            notes.append(f"Scan {label!r} (opset {opset}: its inputs hold a batch axis, the scan axis is 1) is costed "
                         f"as its body times its batch times its scan length ({trip}), as one kernel "
                         f"{_launched(body.launches, trip, 'step')}")
        else:
            notes.append(f"Scan {label!r} is costed as its body times its scan length ({trip}), as one kernel "
                         f"{_launched(body.launches, trip, 'step')}")
        return NodeCost(flops=body.flops * trip, bytes_read=body.bytes_read * trip,
                        bytes_written=body.bytes_written * trip, launches=body.launches * trip)
    return cost


def _launched(per_step: int, steps: int, step: str) -> str:
    """How eager launches a loop left as one node: its body's kernels once per iteration or step."""
    return (f"that eager launches {per_step * steps:,} times ({per_step} body kernel(s) per {step}; one launch under "
            "TVM)")


def _scan_length(node: onnx.NodeProto, inputs: Sequence[TensorInfo | None], opset: int = 0) -> int | None:
    """Iterations of a Scan's body: at opset 9+, the length of its first scan input along its scan axis; at opset 8
    (its first input the optional sequence_lens, every input with a leading batch axis the body does not see, the
    scan axis 1) the batch times the scan length, as the body runs once per batch element and step."""
    attrs = {a.name: a for a in node.attribute}
    count = int(attrs["num_scan_inputs"].i) if "num_scan_inputs" in attrs else 0
    if count < 1 or count > len(inputs) - (1 if 0 < opset < 9 else 0):
        return None
    first = inputs[len(inputs) - count]
    if 0 < opset < 9:
        if first is None or first.shape is None or len(first.shape) < 2:
            return None
        batch, length = int(first.shape[0]), int(first.shape[1])
        return batch * length if batch >= 0 and length >= 0 else None
    axes = list(attrs["scan_input_axes"].ints) if "scan_input_axes" in attrs else []
    axis = int(axes[0]) if axes else 0
    if first is None or first.shape is None or not -len(first.shape) <= axis < len(first.shape):
        return None
    length = int(first.shape[axis])
    return length if length >= 0 else None


def _build_dag(model: onnx.ModelProto, tensors: Mapping[str, TensorInfo],
               notes: list[str] | None = None) -> nx.DiGraph:
    import networkx as nx  # here, not at the top: its import overlaps ONNX shape inference (lilou.api)

    graph = model.graph
    dag = nx.DiGraph()
    producer: dict[str, str] = {}
    names = unique_node_names(graph)
    control = any(n.op_type in CONTROL_FLOW_OPS for n in graph.node)
    constants = scalar_integers(graph) if control else {}
    truths = scalar_truths(graph) if control else {}
    opset = _default_opset(model)
    notes = [] if notes is None else notes
    zeros = _zero_tensors(graph)
    reversing = _reversing_slices(graph)
    for order, (node, name) in enumerate(zip(graph.node, names)):
        io = _node_io(node, tensors)
        attributes = _attributes(node)
        supported = node.domain in ("", "ai.onnx") and node.op_type in SUPPORTED_OPS
        # a bias of zeros is no bias: eager PyTorch's bias-free convolution never adds one (the dynamo exporter
        # writes Expand(CastLike(0), ...) for it, which added an element-wise pass: +5.6 % on a depthwise conv)
        priced = (io[0][:2], io[1]) if node.op_type in _BIASED and node.input[2:3] and node.input[2] in zeros else io
        cost = _node_cost(node, tensors, constants, notes, attributes, priced, opset, truths)
        dag.add_node(name, op=node.op_type, domain=node.domain, attributes=attributes,
                     inputs=io[0], outputs=io[1], flops=cost.flops, bytes_read=cost.bytes_read,
                     bytes_written=cost.bytes_written, launches=cost.launches, constant=False, order=order,
                     supported=supported, reverses=order in reversing)
        for tensor in node.output:
            if tensor:
                producer[tensor] = name
    dag.add_edges_from((source, name, edge) for (source, name), edge in _edges(graph, names, producer, tensors).items())
    return dag


def _reversing_slices(graph: onnx.GraphProto) -> set[int]:
    """Indices of the ``Slice`` nodes with a negative constant step: ``torch.flip`` as both exporters write it, a
    copy kernel in eager (a PyTorch view cannot have a negative stride), where any other slice is a view."""
    slices = [i for i, node in enumerate(graph.node) if node.op_type == "Slice" and len(node.input) > 4
              and node.input[4] and node.domain in ("", "ai.onnx")]
    if not slices:
        return set()
    values = constant_tensors(graph)
    found = set()
    for index in slices:
        steps = values.get(graph.node[index].input[4])
        if steps is None or steps.data_location == onnx.TensorProto.EXTERNAL or math.prod(steps.dims) > 16:
            continue
        try:
            if (onnx.numpy_helper.to_array(steps) < 0).any():
                found.add(index)
        except (ValueError, TypeError):  # a malformed constant: not known to reverse
            continue
    return found


#: Ops whose third input is a bias added to every output element.
_BIASED = frozenset({"Conv", "ConvTranspose"})


def _zero_tensors(graph: onnx.GraphProto) -> set[str]:
    """Tensors that hold only zeros by construction: a small Constant or a ConstantOfShape of 0, and a Cast,
    CastLike, Expand or Identity of one (the dynamo exporter's bias of a convolution without one)."""
    zeros: set[str] = set()
    for node in graph.node:  # topological order: an input's producer comes first
        if node.domain not in ("", "ai.onnx") or not node.output:
            continue
        if node.op_type in ("Constant", "ConstantOfShape"):
            value = next((a for a in node.attribute if a.name in ("value", "value_float", "value_int")), None)
            if (value is None and node.op_type == "ConstantOfShape") or (value is not None and _is_zero(value)):
                zeros.add(node.output[0])
        elif node.op_type in ("Cast", "CastLike", "Expand", "Identity") and node.input and node.input[0] in zeros:
            zeros.add(node.output[0])
    return zeros


def _is_zero(attribute: onnx.AttributeProto) -> bool:
    """A Constant's value attribute that is a handful of zeros (larger tensors are not read)."""
    if attribute.type in (onnx.AttributeProto.FLOAT, onnx.AttributeProto.INT):
        return (attribute.f if attribute.type == onnx.AttributeProto.FLOAT else attribute.i) == 0
    if attribute.type != onnx.AttributeProto.TENSOR or math.prod(attribute.t.dims) > 16 or \
            attribute.t.data_location == onnx.TensorProto.EXTERNAL:
        return False
    try:
        return not onnx.numpy_helper.to_array(attribute.t).any()
    except Exception:  # noqa: BLE001 - a malformed constant is not known to be zero
        return False


def _node_io(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> tuple[list[TensorInfo | None],
                                                                                 list[TensorInfo]]:
    """A node's input infos (None for an omitted optional) and output infos."""
    return ([tensors.get(t) or _unknown(t) if t else None for t in node.input],
            [tensors.get(t) or _unknown(t) for t in node.output])


def _edges(graph: onnx.GraphProto, names: Sequence[str], producer: Mapping[str, str],
           tensors: Mapping[str, TensorInfo]) -> dict[tuple[str, str], dict[str, Any]]:
    """Edge attributes by (producer, reader), in the order the readers read them (built in a plain dict: asking
    networkx about each of thousands of edges costs more than the rest of the DAG)."""
    edges: dict[tuple[str, str], dict[str, Any]] = {}
    for name, node in zip(names, graph.node):
        for tensor in node.input:
            source = producer.get(tensor)
            if source is None:
                continue
            info = tensors.get(tensor) or _unknown(tensor)
            edge = edges.get((source, name))
            if edge is None:
                edges[source, name] = {"tensor": tensor, "tensors": [tensor], "shape": info.shape,
                                       "dtype": info.dtype, "bytes": info.nbytes or 0}
            elif tensor not in edge["tensors"]:
                edge["tensors"].append(tensor)
                edge["bytes"] += info.nbytes or 0
    return edges


def _mark_constant_subgraphs(dag: nx.DiGraph, initializers: set[str]) -> None:
    """A node is constant when every input it reads by value is a constant or initializer."""
    constant_tensors = set(initializers)
    for name in _file_order(dag):
        data = dag.nodes[name]
        metadata_only = _METADATA_ONLY_INPUTS.get(data["op"], set())
        value_inputs = [t for i, t in enumerate(data["inputs"]) if t is not None and i not in metadata_only]
        if all(t.name in constant_tensors for t in value_inputs):
            data["constant"] = True
            constant_tensors.update(t.name for t in data["outputs"])


def _mark_shape_only_values(dag: nx.DiGraph, graph_outputs: set[str]) -> None:
    """A node whose values are read only for their shape (through ``Shape``/``Size``, possibly via other such
    nodes) computes nothing a runtime needs: it is marked constant, with ``shape_only``.

    The TorchScript exporter writes ``torch.broadcast_tensors`` (inside ``F.mse_loss``, for one) as
    ``ConstantOfShape`` + ``Add`` of the inputs, read only by the ``Shape`` that sizes the ``Expand`` after it;
    eager PyTorch computes broadcast shapes without touching the data, and every ONNX runtime drops such
    values. Before, each ``Add`` was priced as a kernel (a 2-kernel ``mse_loss`` exported as 8).
    """
    if not any(data["op"] in _METADATA_ONLY_INPUTS for _, data in dag.nodes(data=True)):
        return  # no node reads a value for its shape alone (most dynamo exports)
    for name in reversed(_file_order(dag)):
        data = dag.nodes[name]
        if data["constant"] or not data["outputs"] or any(t.name in graph_outputs for t in data["outputs"]):
            continue
        produced = {t.name for t in data["outputs"]}
        readers = list(dag.successors(name))
        if readers and all(dag.nodes[r].get("shape_only") or _reads_only_metadata(dag.nodes[r], produced)
                           for r in readers):
            data["constant"] = data["shape_only"] = True


def _file_order(dag: nx.DiGraph) -> list[str]:
    """The nodes in file order, a topological order of the DAG (:func:`_sort_topologically` made it one); cheaper
    than networkx's sort, and each marking pass gives the same marks in any topological order."""
    return sorted(dag.nodes, key=lambda name: dag.nodes[name]["order"])


def _reads_only_metadata(reader: dict, tensors: set[str]) -> bool:
    """Does this node read ``tensors`` only at inputs whose shape or type it uses, not their values?"""
    metadata_only = _METADATA_ONLY_INPUTS.get(reader["op"], set())
    return all(i in metadata_only for i, t in enumerate(reader["inputs"]) if t is not None and t.name in tensors)


def _listed(names: Sequence[str], limit: int = 5) -> str:
    return ", ".join(names[:limit]) + (" ..." if len(names) > limit else "")


#: onnxruntime's domain for its CPU-only blocked-channel layout (``NchwcTransformer``).
NCHWC_DOMAIN = "com.microsoft.nchwc"
MICROSOFT_DOMAIN = "com.microsoft"
#: The names onnxruntime's CPU session gives the casts it inserts around FP16 ops it runs in FP32.
_CPU_PRECISION_CASTS = "InsertedPrecisionFreeCast_"


def _unread_contrib_ops(dag: nx.DiGraph) -> str | None:
    """The line naming the onnxruntime contrib ops left in the graph (no rewrite of :mod:`lilou.graph.contrib_ops` or
    :mod:`lilou.graph.quantized` reproduces them) and the share of the model they leave unpriced: themselves and the
    nodes after them whose shapes they hide (ONNX's shape inference does not know them)."""
    import networkx as nx

    from lilou.graph.precision import MATH_OPS

    left = [n for n, d in dag.nodes(data=True) if d.get("domain") == MICROSOFT_DOMAIN and not d["supported"]
            and not d["constant"]]
    if not left:
        return None
    runtime = [n for n, d in dag.nodes(data=True) if not d["constant"] and d["op"] not in SEQUENCE_OPS]
    hidden = set(left).union(*(nx.descendants(dag, n) for n in left))
    hit = {n for n in runtime if n in hidden
           and (n in left or any(t is not None and t.shape is None for t in dag.nodes[n]["outputs"]))}
    math = [n for n in runtime if dag.nodes[n]["op"] in MATH_OPS]
    counts = ", ".join(f"{count} {op}" for op, count in sorted(Counter(dag.nodes[n]["op"] for n in left).items()))
    return (f"onnxruntime op(s) that Lilou does not write back as standard ops: {counts} ({MICROSOFT_DOMAIN}); they "
            f"and the {len(hit) - len(left)} node(s) after them whose shapes they hide, {100 * len(hit) / len(runtime):.0f} "
            f"% of the model's {len(runtime)} runtime nodes ({sum(1 for n in math if n in hit)} of its {len(math)} "
            "matmuls and convolutions), are priced without FLOPs, their bytes guessed: the prediction is not this "
            "model's; pass the file onnxruntime's tools read (the export before they optimized or quantized it)")


def _warnings(dag: nx.DiGraph) -> list[str]:
    warnings = []
    unsupported = sorted({d["op"] for _, d in dag.nodes(data=True)
                          if not d["supported"] and not d["constant"] and d["op"] not in CONTROL_FLOW_OPS})
    if unsupported:
        warnings.append(f"no cost formula for op(s) {', '.join(unsupported)}: counted as 0 FLOPs, bytes from tensor sizes")
    contrib = _unread_contrib_ops(dag)
    if contrib:
        warnings.append(contrib)
    blocked = sorted({d["op"] for _, d in dag.nodes(data=True) if d.get("domain") == NCHWC_DOMAIN})
    if blocked:
        warnings.append(f"the file holds onnxruntime's CPU layout ops ({', '.join(blocked)} of "
                        f"{NCHWC_DOMAIN}: saved after ORT_ENABLE_ALL on a CPU, channels in blocks of 8 or 16), "
                        "which no GPU runs: priced on the memory-bound fallback; save the model at "
                        "ORT_ENABLE_EXTENDED, or pass the export, to price its convolutions")
    inserted = sum(1 for n, d in dag.nodes(data=True) if d["op"] == "Cast" and n.startswith(_CPU_PRECISION_CASTS))
    if inserted:  # onnxruntime's InsertCastTransformer: FP16 ops its CPU provider lacks, computed in FP32
        warnings.append(f"{inserted} Cast(s) named {_CPU_PRECISION_CASTS}*: an onnxruntime CPU session saved this "
                        "model after moving the FP16 ops its CPU kernels lack to FP32, which a GPU runtime does not "
                        "do; priced as saved (those ops in FP32, the casts as kernels): pass the model the session "
                        "read, or --precision fp16, to price it in FP16")
    classic = sorted({d["op"] for _, d in dag.nodes(data=True) if d.get("domain") == "ai.onnx.ml"})
    if classic:
        warnings.append(f"op(s) {', '.join(classic)} of the ai.onnx.ml domain (scikit-learn's and other classic ML "
                        "models) have no GPU kernel in eager PyTorch or onnxruntime's CUDA execution provider (they run "
                        "on the CPU): their time is not predicted (the figures for them are memory-bound placeholders "
                        "that do not grow with the batch)")
    control = sorted({d["op"] for _, d in dag.nodes(data=True) if d["op"] in CONTROL_FLOW_OPS})
    if control:
        warnings.append(f"control flow ({', '.join(control)}) is approximated: a Loop not written out per iteration "
                        "costs its body times its trip count (one iteration where a run-time condition decides), a Scan "
                        "its body times its scan length, an If its larger branch; each runs as one fallback kernel "
                        "that eager launches as often as it launches their kernels (a loop's once per iteration)")
    training = sum(1 for _, d in dag.nodes(data=True) if not d["constant"]
                   and batchnorm_training(CostInput(d["op"], d["attributes"], d["inputs"], d["outputs"])))
    if training:
        warnings.append(f"{training} BatchNormalization node(s) run in training mode (batch statistics, as a module "
                        "left in train() runs): priced with a second pass over their input; export after model.eval() "
                        "to predict inference")
    # (a SplitToSequence's output is a sequence, which has no tensor shape; it is a view, priced at nothing, and
    # each SequenceAt that reads it has its shape: GPT-2's 12 splits were said to leave costs incomplete)
    unknown = [n for n, d in dag.nodes(data=True)
               if not d["constant"] and d["op"] not in SEQUENCE_OPS and any(t.shape is None for t in d["outputs"])]
    if unknown:
        shown = _listed(unknown)
        warnings.append(f"{len(unknown)} node(s) have outputs of unknown shape ({shown}); their costs are incomplete")
    return warnings
