"""PyTorch eager's view semantics replayed on the ONNX graph: a prior for the fusion GNN.

In eager, reshapes, transposes, slices, squeezes, expands and eval-mode dropout
launch no kernel: they change strides, and the kernel that reads them reads the
view in place (:mod:`lilou.fusion.backends.eager` labels them so). Whether an ONNX
``Reshape`` or ``Identity`` is such a view depends on a chain of nodes around it,
which a few rounds of message passing learn poorly on families never seen in
training (Swin's patch merging: one view read by four slices read by one concat).

This module replays the oracle's rule from the ONNX graph alone, without exporter
metadata:

* view-like ONNX ops (:data:`VIEW_LIKE_OPS`) and a ``Gather`` of one constant
  index (``aten.select``) launch no kernel, except an ``Identity`` that reads a
  non-contiguous view (a transpose, slice, expand or select, possibly behind
  reshapes): that is ``.contiguous()``, a copy kernel;
* in reverse topological order, a no-kernel node joins the group of its readers
  when they all sit in one group and it feeds no graph output, so a chain of views
  collapses into the kernel at its end.

Before that, the edges inside a few common multi-node aten decompositions
(:data:`DECOMPOSITIONS`: ``linear`` as ``MatMul`` + bias ``Add``, ``silu``,
``rsqrt``, ``softmax`` with a dtype, ``group_norm``, ``gelu`` in its erf and tanh
forms, from the decomposition corpus's training ops, ``layer_norm`` as written before opset 17, and
``scaled_dot_product_attention`` by its form, :mod:`lilou.fusion.attention_decomposition`) are joined, and so is
every run of nodes the dynamo exporter names as one inlined torchlib function (``n0``, ``n1`` ...;
:mod:`lilou.fusion.export_names`), whatever op it computes. Others (``roll``,
``baddbmm``, the ops the leave-op-out split holds out) are left to the GNN, which
learns them from op types. Like the TVM replay, this is a *feature*, not the prediction;
but the GNN's eager groups are bounded by it on both sides: what the replay joins stays
joined (:mod:`lilou.fusion.gnn_predictor`), and a call it knows whole is joined to
nothing outside it (:func:`kept_whole`).

A recurrent layer (ONNX ``LSTM``/``GRU``/``RNN``) is one cuDNN kernel with the
layout views the exporter writes after it (``Transpose``/``Reshape``/``Squeeze``,
at most :data:`RECURRENT_TAIL` of them, each read by one node): the oracle counts
them inside the ``aten.lstm`` call (:func:`lilou.fusion.backends.eager.recurrent_groups`).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

import networkx as nx

from lilou.fusion.attention_decomposition import sdpa_decompositions
from lilou.fusion.eager_layout import casts_to_its_own_type, selects_one_index, strided_tensors
from lilou.fusion.export_names import edges_between_calls, edges_inside_one_call, fused_call_nodes, inlined_call_edges
from lilou.fusion.partition import (
    Edge,
    KernelGroup,
    Partition,
    partition_from_fused_edges,
    partition_from_group_ids,
    runtime_edges,
    topological_file_order,
)
from lilou.fusion.unrolled_recurrence import unrolled_recurrent_matmuls
from lilou.graph.contrib_writer import MARK
from lilou.graph.dag import ModelGraph

#: ONNX ops that the dynamo exporter writes for aten views (and eval-mode dropout).
VIEW_LIKE_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose", "Slice", "Split",
                           "SplitToSequence", "SequenceAt", "Expand", "Identity", "Dropout"})


def eager_views(graph: ModelGraph, runtime: list[str], constant: set[str] | None = None) -> set[str]:
    """The runtime nodes (``runtime`` in topological order) that launch no kernel in eager.

    View-like ops (:data:`VIEW_LIKE_OPS`), selects of one index (:func:`selects_one_index`) and a ``Cast`` to the
    type its input already has (``.to()`` returns the tensor itself), except:

    * a ``Slice`` with a negative step: ``torch.flip``, a copy kernel (a view cannot have a negative stride);

    * an ``Identity`` or ``Dropout`` that reads a non-contiguous view (a transpose, slice, expand or select,
      possibly behind reshapes): that is ``.contiguous()``, a copy kernel;
    * a ``Reshape``-like node whose new shape PyTorch cannot express with the strides of the view it reads
      (:func:`lilou.fusion.eager_layout.strided_tensors`): ``reshape`` copies there.
    """
    dag = graph.dag
    constant = graph.constant_tensors() if constant is None else constant  # callers that have it pass it
    strided, copies = strided_tensors(graph, runtime, constant)
    views: set[str] = set()
    for node in runtime:
        data = dag.nodes[node]
        op = data["op"]
        if node in copies:
            continue
        if op in ("Identity", "Dropout"):
            if not (data["inputs"] and data["inputs"][0] is not None and data["inputs"][0].name in strided):
                views.add(node)
        elif ((op in VIEW_LIKE_OPS and not data.get("reverses"))
              or (op == "Gather" and selects_one_index(graph, node, constant))
              or (op == "Cast" and casts_to_its_own_type(data))):
            views.add(node)
    return views


def _one_aten_call(graph: ModelGraph, producer: str, consumer: str, constant: set[str]) -> bool:
    """Is this edge inside the ONNX decomposition of one aten call (see :data:`DECOMPOSITIONS`)?"""
    dag = graph.dag
    pair = (dag.nodes[producer]["op"], dag.nodes[consumer]["op"])
    inputs = [t.name if t is not None else "" for t in dag.nodes[consumer]["inputs"]]
    produced = {t.name for t in dag.nodes[producer]["outputs"]}
    others = [name for name in inputs if name not in produced]
    if pair == ("MatMul", "Add"):  # aten.linear: x @ W^T + b, weight and bias constant
        weights = [t.name for t in dag.nodes[producer]["inputs"][1:2] if t is not None]
        return bool(weights) and weights[0] in constant and len(others) == 1 and others[0] in constant
    if pair == ("Sigmoid", "Mul"):  # aten.silu: x * sigmoid(x); aten.glu: a * sigmoid(b), a and b split from one x
        sigmoid_input = {t.name for t in dag.nodes[producer]["inputs"] if t is not None}
        return len(others) == 1 and (others[0] in sigmoid_input or _split_siblings(graph, producer, others[0]))
    if pair == ("Sqrt", "Div"):  # aten.rsqrt as TorchScript writes it: 1 / sqrt(x)
        return len(inputs) == 2 and inputs[1] in produced and inputs[0] in constant
    if pair in (("Reshape", "Mul"), ("Mul", "Add")):  # aten.group_norm's affine: normalised * weight + bias
        return len(others) == 1 and others[0] in constant and _after_instance_norm(graph, producer)
    return pair in _ALWAYS_ONE_CALL


def _split_siblings(graph: ModelGraph, sigmoid: str, other: str) -> bool:
    """Does ``sigmoid`` read one output of a ``Split`` whose other output is ``other`` (``F.glu``'s halves)?"""
    dag = graph.dag
    for producer in dag.predecessors(sigmoid):
        if dag.nodes[producer]["op"] == "Split":
            return other in {t.name for t in dag.nodes[producer]["outputs"]}
    return False


def _after_instance_norm(graph: ModelGraph, node: str) -> bool:
    """Is ``node`` the reshape back after a group norm's InstanceNormalization, or the Mul that scales it?"""
    dag = graph.dag
    for _ in range(2):
        if dag.nodes[node]["op"] == "Reshape":
            return any(dag.nodes[p]["op"] == "InstanceNormalization" for p in dag.predecessors(node))
        runtime = [p for p in dag.predecessors(node) if not dag.nodes[p]["constant"]]
        if dag.nodes[node]["op"] != "Mul" or len(runtime) != 1:
            return False
        node = runtime[0]
    return False


#: Producer -> consumer pairs the dynamo exporter only writes inside one aten call.
_ALWAYS_ONE_CALL = frozenset({
    ("Sqrt", "Reciprocal"),                # aten.rsqrt
    ("Equal", "Not"),                      # aten.ne (TorchScript)
    ("Softmax", "Cast"),                   # aten.softmax with a dtype
    ("Reshape", "InstanceNormalization"),  # aten.group_norm: reshape to (N, groups, -1), normalise, reshape back
    ("InstanceNormalization", "Reshape"),
})
#: ONNX ops that compute a whole recurrent layer, and the layout views after one that belong to its call.
RECURRENT_OPS = frozenset({"LSTM", "GRU", "RNN"})
RECURRENT_TAIL_OPS = frozenset({"Transpose", "Reshape", "Squeeze"})
RECURRENT_TAIL = 3
#: Views that may lead into a recurrent layer's kernel (``batch_first``'s transpose of the input).
_LAYOUT_VIEW_OPS = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze"})
#: The multi-node aten decompositions the replay knows (others are left to the GNN).
DECOMPOSITIONS = ("linear: MatMul + Add of constant weight and bias", "silu: Sigmoid + Mul",
                  "glu: Sigmoid + Mul of the two outputs of one Split",
                  "rsqrt: Sqrt + Reciprocal, or Sqrt + Div of a constant (TorchScript)", "ne: Equal + Not",
                  "softmax with dtype: Softmax + Cast",
                  "group_norm: Reshape + InstanceNormalization + Reshape + Mul + Add (constant weight and bias)",
                  "recurrent layer: LSTM/GRU/RNN + its layout views",
                  "gelu, erf form: Div + Erf + Add + Mul + Mul (opsets without Gelu)",
                  "layer_norm before opset 17: ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div [, Mul, Add]",
                  "gelu, tanh form: Pow + Mul + Add + Mul + Tanh + Add + Mul + Mul, or TorchScript's x * x * x",
                  "mish: Softplus + Tanh + Mul; log_sigmoid: Sigmoid + Log; softplus with beta: Mul + Softplus + Div",
                  "hardswish before opset 14: HardSigmoid + Mul",
                  "scaled_dot_product_attention: its math up to the node named after it (lilou/fusion/export_names.py)",
                  "scaled_dot_product_attention by its form: Mul + Mul (Q and K^T by sqrt(scale)) + MatMul [+ Add] + "
                  "Softmax [+ IsNaN + Where] + MatMul (lilou/fusion/attention_decomposition.py)",
                  "an inlined torchlib function: a run of nodes named n0, n1 ... (lilou/fusion/export_names.py)")

#: One-kernel activations that exporters write as a chain of ONNX ops: the op chain from the input ``x`` to the
#: result, and how many of its Add/Mul nodes read ``x`` itself (the rest read constants). aten.gelu as torchlib
#: writes it where the opset has no Gelu op (the order of the final ``* x`` and ``* 0.5`` varies between
#: onnxscript versions) and as TorchScript writes it; TorchScript's forms of mish, log_sigmoid and softplus
#: with a beta (opsets without Mish; ``F.mish`` is one kernel in eager), and of hardswish before opset 14 (also
#: what onnxruntime's saved sessions hold).
_GELU_CHAINS: tuple[tuple[tuple[str, ...], int], ...] = (
    (("Div", "Erf", "Add", "Mul", "Mul"), 1),                        # x/sqrt2, erf, +1, *0.5 and *x
    (("Pow", "Mul", "Add", "Mul", "Tanh", "Add", "Mul", "Mul"), 2),  # x^3, *c, +x, *c, tanh, +1, *0.5 and *x
    (("Mul", "Mul", "Mul", "Add", "Mul", "Tanh", "Add", "Mul", "Mul"), 3),  # TorchScript: x*x, *x, *c, +x ...
    (("Softplus", "Tanh", "Mul"), 1),                                # mish: x * tanh(softplus(x))
    (("Sigmoid", "Log"), 0),                                         # log_sigmoid
    (("Mul", "Softplus", "Div"), 0),                                 # softplus(beta * x) / beta
    (("HardSigmoid", "Mul"), 1),                                     # hardswish: x * hardsigmoid(x) (opset < 14)
)


def _runtime_inputs(graph: ModelGraph, node: str, constant: set[str]) -> list[str]:
    """Names of the node's inputs that are not constants (weights, folded scalars)."""
    return [t.name for t in graph.dag.nodes[node]["inputs"] if t is not None and t.name not in constant]


class _ThroughCasts:
    """A graph's values seen through the casts between them: an FP16 model whose reductions, powers, divisions or
    erf were kept in FP32 (onnxconverter-common's ``op_block_list``) casts into and out of each of those ops, where
    eager's FP16 kernel (a layer norm, a GELU) computes in FP32 inside itself. A cast whose output the graph returns
    is a value of its own."""

    def __init__(self, graph: ModelGraph, constant: set[str]) -> None:
        self.graph, self.dag, self.constant = graph, graph.dag, constant
        outputs = {t.name for t in graph.outputs}
        self.casts = {n for n in graph.runtime_nodes() if self.dag.nodes[n]["op"] == "Cast"
                      and not any(t.name in outputs for t in self.dag.nodes[n]["outputs"])}
        self.producer = {t.name: n for n in self.casts for t in self.dag.nodes[n]["outputs"]}

    def source(self, name: str) -> str:
        """The value ``name`` is a cast of (through casts), else itself."""
        for _ in range(8):
            inputs = _runtime_inputs(self.graph, self.producer[name], self.constant) if name in self.producer else []
            if len(inputs) != 1:
                break
            name = inputs[0]
        return name

    def reads(self, node: str) -> set[str]:
        return {self.source(name) for name in _runtime_inputs(self.graph, node, self.constant)}

    def inputs(self, node: str) -> list[str]:
        return [self.source(t.name) for t in self.dag.nodes[node]["inputs"]]

    def readers(self, node: str, passed: list[str]) -> list[str]:
        """The runtime readers of ``node``, each cast among them followed to its own readers (and added to ``passed``)."""
        found, pending = [], [r for r in self.dag.successors(node) if not self.dag.nodes[r]["constant"]]
        while pending:
            reader = pending.pop()
            if reader in self.casts and len(passed) < 64:
                passed.append(reader)
                pending.extend(r for r in self.dag.successors(reader) if not self.dag.nodes[r]["constant"])
            else:
                found.append(reader)
        return found


def gelu_decompositions(graph: ModelGraph, constant: set[str] | None = None) -> list[list[str]]:
    """The node chains of every erf- or tanh-form ``aten.gelu`` and the other activations of :data:`_GELU_CHAINS`.

    A chain matches when each node is the only runtime reader of the previous one and reads
    nothing but the previous node's output, constants and (as many Add/Mul nodes as the
    form has) the chain's input ``x``. A hand-written ``0.5 * x * (1 + erf(x / sqrt(2)))`` matches too,
    although eager would run it as five kernels; exporters of ``nn.GELU`` / ``F.gelu``
    are by far the common source of these chains.
    """
    dag = graph.dag
    constant = graph.constant_tensors() if constant is None else constant  # callers that have it pass it
    values = _ThroughCasts(graph, constant)  # casts between the chain's nodes are part of it
    starts = {ops[0] for ops, _ in _GELU_CHAINS}
    found = []
    for start in (n for n in graph.runtime_nodes() if dag.nodes[n]["op"] in starts):
        for ops, reads_x in _GELU_CHAINS:
            if dag.nodes[start]["op"] != ops[0]:
                continue
            inputs = values.reads(start)  # a set: TorchScript's x * x reads x twice
            if len(inputs) != 1:
                continue
            x, chain, current, x_reads, casts = inputs.pop(), [start], start, 0, []
            for op in ops[1:]:
                readers = values.readers(current, casts)
                if len(readers) != 1 or dag.nodes[readers[0]]["op"] != op:
                    break
                produced = {t.name for t in dag.nodes[current]["outputs"]}
                reads = values.reads(readers[0])
                if reads == produced | {x} and x not in produced and op in ("Add", "Mul"):
                    x_reads += 1
                elif reads != produced:
                    break
                current = readers[0]
                chain.append(current)
            if len(chain) == len(ops) and x_reads == reads_x:
                found.append(chain + list(dict.fromkeys(casts)))
    return found


def layer_norm_decompositions(graph: ModelGraph, constant: set[str] | None = None) -> list[list[str]]:
    """The nodes of every ``nn.LayerNorm`` as exporters write it where ONNX has no LayerNormalization (opset < 17):
    ``d = x - mean(x)``, ``d / sqrt(mean(d ** 2) + eps)``, then ``* weight + bias`` (constants) when affine.

    Eager runs it as one kernel (``aten.native_layer_norm``). Every node must read only the pattern's own values and
    constants, and each intermediate value only its pattern readers; a hand-written layer norm of exactly these
    ops matches too (several kernels in eager), as with :func:`gelu_decompositions`.

    Casts between the pattern's nodes are part of it (:class:`_ThroughCasts`); a cast of ``x`` before the first
    mean (``x.float()``) reads a value from outside the norm and stays a kernel of its own.
    """
    dag = graph.dag
    constant = graph.constant_tensors() if constant is None else constant
    values = _ThroughCasts(graph, constant)
    reads, inputs = values.reads, values.inputs

    def only_reader(node: str, op: str, casts: list[str]) -> str | None:
        readers = values.readers(node, casts)
        return readers[0] if len(readers) == 1 and dag.nodes[readers[0]]["op"] == op else None

    def out(node: str) -> str:
        return dag.nodes[node]["outputs"][0].name

    found = []
    for mean in (n for n in graph.runtime_nodes() if dag.nodes[n]["op"] == "ReduceMean"):
        x = reads(mean)
        if len(x) != 1:
            continue
        x = x.pop()
        casts: list[str] = []
        centred = only_reader(mean, "Sub", casts)
        if centred is None or inputs(centred) != [x, out(mean)]:
            continue
        readers = {dag.nodes[r]["op"]: r for r in values.readers(centred, casts)}
        if sorted(readers) != ["Div", "Pow"] or reads(readers["Pow"]) != {out(centred)}:
            continue
        chain, current = [mean, centred, readers["Pow"]], readers["Pow"]
        for op in ("ReduceMean", "Add", "Sqrt"):
            current = only_reader(current, op, casts)
            if current is None or reads(current) != {out(chain[-1])}:
                break
            chain.append(current)
        divide = readers["Div"]
        if len(chain) != 6 or only_reader(chain[-1], "Div", casts) != divide \
                or inputs(divide) != [out(centred), out(chain[-1])]:
            continue
        chain.append(divide)
        for op in ("Mul", "Add"):  # the affine weight and bias
            taken = len(casts)
            following = only_reader(chain[-1], op, casts)
            if following is None or reads(following) != {out(chain[-1])}:
                del casts[taken:]  # the norm's output cast: read outside it
                break
            chain.append(following)
        found.append(chain + list(dict.fromkeys(casts)))
    return found


def replay_eager_groups(graph: ModelGraph) -> dict[str, str]:
    """Runtime node -> a representative node of the kernel that runs it.

    Decompositions of one aten call are joined first; then, in reverse
    topological order, a view joins its readers' kernel when there is one.
    """
    dag = graph.dag
    data = dict(dag.nodes(data=True))
    runtime = [n for n in topological_file_order(graph) if not data[n]["constant"]]
    constant = graph.constant_tensors()
    views = eager_views(graph, runtime, constant)
    outputs = {t.name for t in graph.outputs}
    runtime_set = set(runtime)
    kernel_of, in_decomposition = _aten_calls(graph, runtime, constant)
    for node in reversed(runtime):
        # A reshape inside group_norm's decomposition is part of that kernel, not a view of its own.
        if node in in_decomposition or node not in views:
            continue
        if any(t.name in outputs for t in data[node]["outputs"]):
            continue
        readers = {kernel_of[s] for s in dag.successors(node) if s in runtime_set}
        if len(readers) == 1:
            kernel_of.union(node, readers.pop())
    return {n: kernel_of[n] for n in runtime}


def aten_call_groups(graph: ModelGraph) -> list[list[str]]:
    """The runtime nodes of each multi-node aten call the replay recognises (:data:`DECOMPOSITIONS`, the calls the
    dynamo exporter names), before views join them: each is one whole kernel in eager."""
    runtime = [n for n in topological_file_order(graph) if not graph.dag.nodes[n]["constant"]]
    kernel_of, in_decomposition = _aten_calls(graph, runtime, graph.constant_tensors())
    groups: dict[str, list[str]] = {}
    for node in runtime:
        if node in in_decomposition:
            groups.setdefault(kernel_of[node], []).append(node)
    return [members for members in groups.values() if len(members) > 1]


def _aten_calls(graph: ModelGraph, runtime: list[str], constant: set[str]) -> tuple[nx.utils.UnionFind, set[str]]:
    """The nodes of each recognised multi-node aten call joined (a union-find over ``runtime``), and the set of
    nodes inside one. The joins are found once per graph (the replay's features and the GNN's ceiling both ask)."""
    joins, inside = graph.derived("aten_call_joins", lambda: _aten_call_joins(graph, runtime, constant))
    kernel_of = nx.utils.UnionFind(runtime)
    for u, v in joins:
        kernel_of.union(u, v)
    return kernel_of, set(inside)


def _aten_call_joins(graph: ModelGraph, runtime: list[str], constant: set[str]
                     ) -> tuple[list[tuple[str, str]], frozenset[str]]:
    """What :func:`_aten_calls` joins, in order, and the nodes inside a call."""
    dag = graph.dag
    data = dict(dag.nodes(data=True))
    unions = _RecordedUnions()
    in_decomposition: set[str] = set()
    # Where the exporter's names say an edge leaves one aten call, no op pattern joins it: hand-written
    # `x * torch.sigmoid(x)` or a tanh-GELU formula exported by dynamo are several calls, several kernels.
    between_calls = edges_between_calls(graph)
    for u, v in runtime_edges(graph):
        if (u, v) not in between_calls and _one_aten_call(graph, u, v, constant):
            unions.union(u, v)
            in_decomposition.update((u, v))
    layer_boundaries = recurrent_layer_boundaries(graph)
    for u, v in inlined_call_edges(graph):
        if (u, v) in layer_boundaries:  # one aten.lstm call of several layers runs a kernel per layer
            continue
        unions.union(u, v)
        in_decomposition.update((u, v))
    for call in fused_call_nodes(graph):  # scaled_dot_product_attention: one attention kernel in eager
        for node in call[1:]:
            unions.union(node, call[0])
        in_decomposition.update(call)
    for chain in [*gelu_decompositions(graph, constant), *layer_norm_decompositions(graph, constant),
                  *sdpa_decompositions(graph, constant)]:
        if any(edge in between_calls for edge in zip(chain, chain[1:])):
            continue
        for node in chain[1:]:
            unions.union(node, chain[0])
        in_decomposition.update(chain)
    for node in runtime:
        if data[node]["op"] in RECURRENT_OPS:
            for view in _recurrent_tail(graph, node):
                unions.union(view, node)
                in_decomposition.update((node, view))
    return unions.joins, frozenset(in_decomposition)


class _RecordedUnions:
    """A union-find's ``union(u, v)`` calls, recorded to be replayed on a fresh one."""

    def __init__(self) -> None:
        self.joins: list[tuple[str, str]] = []

    def union(self, u: str, v: str) -> None:
        self.joins.append((u, v))


def _recurrent_tail(graph: ModelGraph, node: str) -> list[str]:
    """The chain of layout views written after a recurrent layer's output (see the module docstring)."""
    dag = graph.dag
    tail: list[str] = []
    current = node
    while len(tail) < RECURRENT_TAIL:
        readers = [s for s in dag.successors(current) if not dag.nodes[s]["constant"]]
        if len(readers) != 1 or dag.nodes[readers[0]]["op"] not in RECURRENT_TAIL_OPS:
            break
        current = readers[0]
        if len([p for p in dag.predecessors(current) if not dag.nodes[p]["constant"]]) != 1:
            break
        tail.append(current)
    return tail


def recurrent_layer_boundaries(graph: ModelGraph) -> set[Edge]:
    """Runtime edges that eager never fuses because they join two recurrent layers or a layer and its producer.

    cuDNN runs each layer of an ``nn.LSTM`` as its own kernels, so a two-layer module, one ``aten.lstm`` call that
    the dynamo exporter writes as one inlined function, is two kernels (the oracle's groups: the input's layout
    views with the first layer, the views written after a layer with it), each priced as a whole layer by the
    recurrent model (:mod:`lilou.latency.kernel_model.recurrent`). The edges cut: into a layer from anything but a
    layout view of the input, and from an earlier layer into a node that also reads a later one (the ``Concat``
    of the layers' final states, which cuDNN writes in place: it stays with the last layer)."""
    dag = graph.dag
    if not any(data["op"] in RECURRENT_OPS for _, data in dag.nodes(data=True)):
        return set()
    runtime = graph.runtime_nodes()
    order = {n: i for i, n in enumerate(runtime)}
    boundaries: set[Edge] = set()
    for node in runtime:
        producers = [p for p in dag.predecessors(node) if not dag.nodes[p]["constant"]]
        if dag.nodes[node]["op"] in RECURRENT_OPS:
            boundaries.update((p, node) for p in producers
                              if dag.nodes[p]["op"] not in _LAYOUT_VIEW_OPS or _source_layer(graph, p) is not None)
            continue
        sources = {p: _source_layer(graph, p) for p in producers}
        layers = {layer for layer in sources.values() if layer is not None}
        if len(layers) > 1:
            last = max(layers, key=order.__getitem__)
            boundaries.update((p, node) for p, layer in sources.items() if layer is not None and layer != last)
    return boundaries


def _source_layer(graph: ModelGraph, node: str) -> str | None:
    """The recurrent layer whose output reaches ``node`` through layout views alone (``node`` itself if it is one)."""
    dag = graph.dag
    for _ in range(RECURRENT_TAIL + 1):
        op = dag.nodes[node]["op"]
        if op in RECURRENT_OPS:
            return node
        producers = [p for p in dag.predecessors(node) if not dag.nodes[p]["constant"]]
        if op not in _LAYOUT_VIEW_OPS or len(producers) != 1:
            return None
        node = producers[0]
    return None


def replayed_eager_fused_edges(graph: ModelGraph) -> dict[Edge, bool]:
    """For each runtime edge: does the replay put both ends in one kernel?"""
    group = replay_eager_groups(graph)
    return {(u, v): group[u] == group[v] for u, v in runtime_edges(graph)}


def replay_eager_partition(graph: ModelGraph) -> Partition:
    """The replay's grouping alone, as a partition (a baseline in ``make bench-fusion``)."""
    return silence_view_groups(graph, partition_from_group_ids(graph, replay_eager_groups(graph), "eager",
                                                               source="eager-replay"))


def without_view_bridges(graph: ModelGraph, fused: Iterable[Edge]) -> list[Edge]:
    """The fused edges, less those that would join kernels through a view they read.

    A view launches no kernel; eager counts it in its readers' kernel only when they all sit in one (the
    oracle's rule, :mod:`lilou.fusion.backends.eager`). Edges from one view to readers in different kernels, all
    predicted fused, would merge those kernels into one group through it: Switch Transformer's clone of the
    shared position bias, read by the 48 attention-score matmuls, made one 48-matmul kernel. Such a view's edges
    to its readers are dropped (it is left alone and launches nothing); a view whose readers all sit in one
    group keeps them. Views are visited in reverse topological order, so a chain of views resolves from its end.
    """
    runtime = _runtime_in_order(graph)
    return _without_view_bridges(graph, list(fused), runtime, eager_views(graph, runtime))


def _without_view_bridges(graph: ModelGraph, fused: list[Edge], runtime: list[str], views: set[str]) -> list[Edge]:
    dag = graph.dag
    runtime_set = set(runtime)
    kernel_of = nx.utils.UnionFind(runtime)
    kept, from_view = [], {}
    for u, v in fused:
        if u in views:
            from_view.setdefault(u, []).append((u, v))
        else:
            kept.append((u, v))
            kernel_of.union(u, v)
    outputs = {t.name for t in graph.outputs}
    for node in reversed(runtime):
        if node not in from_view:
            continue
        readers = {kernel_of[r] for r in dag.successors(node) if r in runtime_set}
        if len(readers) == 1 and not any(t.name in outputs for t in dag.nodes[node]["outputs"]):
            kept += from_view[node]
            kernel_of.union(node, readers.pop())
    return kept


def silence_view_groups(graph: ModelGraph, partition: Partition) -> Partition:
    """The partition with every group made only of eager views launching nothing, as the oracle labels them.

    Fused edges decide which nodes share a kernel, not whether a group launches one. The eager oracle
    (:mod:`lilou.fusion.backends.eager`) never lets a view launch: a view read by kernels of two groups, or
    feeding a graph output, sits in a group of its own that launches nothing. A partition built from
    predicted edges launched such a group whenever it held a view outside the cost model's metadata-only
    ops (``Expand``, ``Transpose``, ``Slice``, ``SplitToSequence``): GPT-2's ``split`` of the fused QKV
    projection, one per layer, and Switch Transformer's expanded router masks ran as kernels eager never runs.
    A copy of a strided view (``Identity`` after a transpose: ``.contiguous()``) still launches.
    """
    return _silenced(graph, partition, None)


def _silenced(graph: ModelGraph, partition: Partition, views: set[str] | None) -> Partition:
    data = dict(graph.dag.nodes(data=True))
    candidates = [i for i, g in enumerate(partition.groups)
                  if g.launches and all(data[n]["op"] in VIEW_LIKE_OPS or data[n]["op"] in ("Gather", "Cast")
                                        for n in g.nodes)]
    if not candidates:
        return partition
    if views is None:
        views = eager_views(graph, _runtime_in_order(graph))
    groups = list(partition.groups)
    for i in candidates:
        if all(n in views for n in groups[i].nodes):
            groups[i] = KernelGroup(groups[i].nodes, launches=False, reason="view")
    return Partition(backend=partition.backend, groups=groups, source=partition.source,
                     warnings=list(partition.warnings))


def eager_partition_from_fused_edges(graph: ModelGraph, fused: Iterable[Edge], source: str,
                                     scores: Mapping[Edge, float] | None = None) -> Partition:
    """Eager kernel groups from predicted fused edges (the GNN's, the rules'), under eager's view rules: no view
    merges the kernels that read it (:func:`without_view_bridges`), and a group of views alone launches nothing
    (:func:`silence_view_groups`)."""
    runtime = _runtime_in_order(graph)
    views = eager_views(graph, runtime)
    fused = _calls_kept_whole(graph, _without_written_concat_joins(graph, _flips_alone(graph, _iterations_apart(fused))),
                              views)
    fused = _library_calls_alone(graph, _distinct_calls_apart(graph, fused, views), views)
    partition = partition_from_fused_edges(graph, _without_view_bridges(graph, fused, runtime, views), "eager",
                                           source=source, scores=scores)
    return _silenced(graph, partition, views)


def _without_written_concat_joins(graph: ModelGraph, fused: list[Edge]) -> list[Edge]:
    """The fused edges, less those touching a ``Concat`` that Lilou wrote back (:mod:`lilou.graph.contrib_ops`: a
    ``torch.cat`` of the module the contrib op replaced, the KV cache's growth or ``rotate_half``). That ``cat`` is
    an aten call of its own, one kernel, and the views it reads launch nothing; the fusion model, which never saw
    these graphs, joined it through those views to the GEMM that writes them (a decoder's packed QKV projection,
    its rotary embedding and its cache growth as one kernel)."""
    data = graph.dag.nodes
    written = {node for edge in fused for node in edge if data[node]["op"] == "Concat" and MARK in node}
    return [(u, v) for u, v in fused if u not in written and v not in written] if written else fused


def kept_whole(graph: ModelGraph, fused: Iterable[Edge]) -> list[Edge]:
    """``fused`` less the edges that join two iterations of an unrolled Loop (:func:`_iterations_apart`), a whole
    aten call to a node outside it (:func:`_calls_kept_whole`) or a library call (cuBLAS, cuDNN, CUB's nonzero) to
    anything but a view (:func:`_library_calls_alone`)."""
    views = eager_views(graph, _runtime_in_order(graph))
    kept = _calls_kept_whole(graph, _distinct_calls_apart(graph, _flips_alone(graph, _iterations_apart(fused)), views),
                             views)
    return _library_calls_alone(graph, kept, views)


#: A node Lilou wrote for one iteration of a ``Loop`` it unrolled (:func:`lilou.graph.loops.unroll_loop`):
#: ``<body node>/iteration_<k>``, ``__<n>`` after it where the name was taken.
_UNROLLED_ITERATION = re.compile(r"/iteration_(\d+)(?:__\d+)?$")


def _iterations_apart(fused: Iterable[Edge]) -> list[Edge]:
    """The fused edges, less those that join two iterations of an unrolled ``Loop``: eager runs the body once per
    iteration (the Python loop the file was exported from, or the Loop's own), so no kernel spans two. The version-8
    fusion model joined two of the 300 Adds of a counted loop written out."""
    def trip(node: str) -> str | None:
        match = _UNROLLED_ITERATION.search(node)
        return match[1] if match else None

    return [(u, v) for u, v in fused if trip(u) is None or trip(v) is None or trip(u) == trip(v)]


def _flips_alone(graph: ModelGraph, fused: Iterable[Edge]) -> list[Edge]:
    """The fused edges, less those touching a ``Slice`` with a negative step: ``torch.flip``, a copy kernel of its own
    in eager (no view has a negative stride). The fusion model, which read every slice as a view, joined the flip of a
    reversed cumsum to the cumsum, and the flip after it launched nothing."""
    data = graph.dag.nodes
    return [(u, v) for u, v in fused if not (data[u].get("reverses") or data[v].get("reverses"))]


#: Ops eager runs as one library call of their own: cuBLAS or cuDNN (a Gemm's bias is its epilogue; a convolution's
#: bias is a second kernel of the same aten call, added when the groups are described:
#: lilou/latency/composition/eager_calls.py), or CUB's ``nonzero`` (a count, its copy to the host, a select). No
#: labelled graph holds a NonZero, so the fusion model never learned it: a version-8 model joined a ``x > 0`` to it.
LIBRARY_CALL_OPS = frozenset({"Gemm", "Conv", "ConvTranspose", "NonZero"})
#: Ops eager runs as one cuBLAS call that shares its kernel only within the aten call it belongs to (``linear``'s
#: bias ``Add``, an attention's two matmuls, an inlined torchlib function), never with a neighbouring aten call.
MATMUL_CALL_OPS = frozenset({"MatMul"})
#: Producer -> consumer op pairs that are two aten calls, two kernels, in eager unless the replay knows them inside
#: one decomposition (:func:`aten_call_groups`): ``masked_fill(mask == 0, ...)`` (Equal, Where), a hand-written
#: ``x - x.mean()`` (ReduceMean, Sub: a layer norm's is one call), ``mask[index] & other`` (GatherND, And), and
#: ``tanh`` and ``relu`` one after the other (each one ONNX node of its own call).
DISTINCT_CALL_PAIRS = frozenset({("Equal", "Where"), ("ReduceMean", "Sub"), ("GatherND", "And"), ("Tanh", "Relu"),
                                 ("Relu", "Tanh")})


def _library_calls_alone(graph: ModelGraph, fused: list[Edge], views: set[str]) -> list[Edge]:
    """The fused edges, less those that join a Gemm, Conv, ConvTranspose or NonZero to any node but a view: its reader
    (directly or through views), or the node that writes its input. Eager launches the cuBLAS or cuDNN call alone, its
    epilogue the node's own (the bias), and each neighbour's kernel apart. In the eager oracle's labels no such edge
    is fused (859 graphs, names shown or hidden: only views into these ops share their kernel). The GNN joined the
    ``Gemm -> Tanh`` of a TorchScript RNN loop, and onnxruntime's mean pooling and activation around a FusedGemm
    written back.

    A ``MatMul`` (:data:`MATMUL_CALL_OPS`) is held the same way, but for the nodes of the aten call it belongs to
    (:func:`aten_call_groups`: ``linear``'s bias ``Add``, SDPA's math, an inlined function such as an unrolled
    ``rnn_tanh``), and a view after it stays with it only when that view's fused readers are of its call: the GNN
    made a chain of ten small ``MatMul -> Tanh`` one kernel (an ONNX Loop's unrolled body, a Python loop), merged the
    copy of an attention output's ``transpose(1, 2).reshape(B, T, C)`` (a reshape no strides allow) into the
    projection after it, and folded a ``transpose`` after a matmul into it. No eager kernel holds two library calls
    but within one aten call."""
    data = graph.dag.nodes
    calls = {node for edge in fused for node in edge if data[node]["op"] in LIBRARY_CALL_OPS}
    # The matmuls of a recurrent layer written out step by step (an ``nn.RNN`` the exporter decomposed, which read
    # its ``weight_hh_l0``, or whose weights an optimised export renamed) are one cuDNN call with their adds and
    # tanhs in eager: the oracle's recurrent groups.
    unrolled = unrolled_recurrent_matmuls(graph)
    matmuls = {node for edge in fused for node in edge if data[node]["op"] in MATMUL_CALL_OPS
               and node not in unrolled and recurrent_weight_layer(graph, node) is None}
    if not calls and not matmuls:
        return fused
    unit = _aten_call_of(graph) if matmuls else {}
    # a matmul's whole aten call (linear's bias Add, SDPA's softmax) is held as the matmul is
    units = {unit[m] for m in matmuls if m in unit}
    held = matmuls | {node for edge in fused for node in edge if unit.get(node, -1) in units}
    readers = _fused_readers(fused)
    transparent = views.__contains__
    inside = edges_inside_one_call(graph) if matmuls else set()

    def one_call(u: str, v: str) -> bool:
        return u in unit and unit[u] == unit.get(v)

    def joins_a_call(u: str, v: str) -> bool:
        if u in held:
            # the exporter's names put both ends in one aten call (``baddbmm``'s scaled product, written as a
            # MatMul and a Mul that pass a ``val_<k>``: alpha is the GEMM's epilogue), but for a view or another
            # library call: onnxsim, which drops a zero bias, leaves a projection's output a ``val_<k>`` read by the
            # view into the attention's ``bmm``, and BERT's projections joined their ``bmm`` (160 kernels for 196)
            if one_call(u, v) or ((u, v) in inside and not transparent(v) and v not in held and v not in calls):
                return False
            reached = _reached(v, readers, transparent)
            return not (transparent(v) and reached and all(one_call(u, r) for r in reached))
        if transparent(u):
            return False
        if v in held:
            return True
        # Into a call, only the edge itself: Swin's ``as_strided``, written as a Gather that no view rule knows,
        # shares the convolution's kernel through a squeeze and a reshape in the labels.
        return bool(_reached(v, readers, transparent)) if u in calls else v in calls

    return [(u, v) for u, v in fused if not joins_a_call(u, v)]


#: A recurrent layer's weight as torch names it (``weight_hh_l1_reverse``), as the eager oracle reads it.
_RECURRENT_WEIGHT = re.compile(r"weight_(?:ih|hh)_l(\d+)(_reverse)?$")


def recurrent_weight_layer(graph: ModelGraph, node: str) -> str | None:
    """``l<k>`` or ``l<k>_reverse`` when ``node`` reads a recurrent layer's weight, directly or through constant
    nodes: the eager oracle's anchor of a decomposed recurrent layer
    (:func:`lilou.fusion.backends.eager.recurrent_groups`), and the matmuls this replay leaves to the GNN."""
    dag = graph.dag
    stack, seen = [node], set()
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        for tensor in dag.nodes[current]["inputs"]:
            match = None if tensor is None else _RECURRENT_WEIGHT.search(tensor.name)
            if match:
                return f"l{match[1]}{match[2] or ''}"
        stack.extend(p for p in dag.predecessors(current) if dag.nodes[p]["constant"])
    return None


def _aten_call_of(graph: ModelGraph) -> dict[str, int]:
    """Node -> the index of the multi-node aten call the replay knows it in (:func:`aten_call_groups`)."""
    return {node: index for index, members in enumerate(aten_call_groups(graph)) for node in members}


def _distinct_calls_apart(graph: ModelGraph, fused: list[Edge], views: set[str]) -> list[Edge]:
    """The fused edges, less those between two ops of :data:`DISTINCT_CALL_PAIRS`, directly or through views, that no
    known decomposition holds together: eager runs ``mask == 0`` and ``masked_fill``, ``x.mean()`` and ``x - m``, as
    two kernels each (the GNN joined them in HF BERT's attention mask, hand-written masked attention and a
    hand-written layer norm)."""
    data = graph.dag.nodes
    firsts = {first for first, _ in DISTINCT_CALL_PAIRS}
    candidates = [(u, v) for u, v in fused if data[u]["op"] in firsts and u not in views]
    if not candidates:
        return fused
    readers = _fused_readers(fused)
    unit: dict[str, int] | None = None
    cut = set()
    for u, v in candidates:
        for target in _reached(v, readers, views.__contains__):
            if (data[u]["op"], data[target]["op"]) in DISTINCT_CALL_PAIRS:
                unit = _aten_call_of(graph) if unit is None else unit
                if u not in unit or unit[u] != unit.get(target):
                    cut.add((u, v))
    return [edge for edge in fused if edge not in cut] if cut else fused


def _fused_readers(fused: list[Edge]) -> dict[str, list[str]]:
    readers: dict[str, list[str]] = {}
    for u, v in fused:
        readers.setdefault(u, []).append(v)
    return readers


def _reached(node: str, readers: Mapping[str, list[str]], transparent: Callable[[str], bool]) -> list[str]:
    """``node`` when it is not ``transparent``, else the nodes a run of fused edges through transparent ones
    (free views) reaches from it."""
    if not transparent(node):
        return [node]
    found, seen, stack = [], {node}, [node]
    while stack:
        for reader in readers.get(stack.pop(), ()):
            if reader not in seen:
                seen.add(reader)
                (stack if transparent(reader) else found).append(reader)
    return found


def _calls_kept_whole(graph: ModelGraph, fused: list[Edge], views: set[str]) -> list[Edge]:
    """The fused edges, less those that join a whole aten call to a node outside it, directly or through views.

    Eager runs each aten call as its own kernel(s) and never joins two. Calls known whole from the graph alone: the
    multi-node decompositions the replay recognises (:func:`aten_call_groups`: rsqrt, silu, gelu, layer norm,
    SDPA ...) but ``linear`` (dynamo writes ``aten.rnn_tanh`` as per-step linears, tanhs and a cat, one cuDNN call
    in eager), and the ``torch.cat`` of RoPE's ``rotate_half`` (:func:`rotate_half_concats`). In the eager oracle's
    labels none of them shares its kernel with a node outside it (docs/fusion.md, "Session 33"); the GNN, which never
    saw a TorchScript export labelled, joined a TorchScript Llama's ``rotate_half`` (``Neg -> Concat``), its KV
    cache's ``cat`` with SDPA's scaling ``Mul`` behind a transpose, and RMSNorm's ``rsqrt`` with the ``Add``
    before it and the ``Mul`` after it. A view between a call and another node stays with its reader, as eager's
    views do."""
    data = graph.dag.nodes
    unit: dict[str, object] = {}
    for index, members in enumerate(aten_call_groups(graph)):
        if sorted(data[n]["op"] for n in members) != ["Add", "MatMul"]:
            unit.update((node, index) for node in members)
    unit.update((node, "rotate_half") for node in rotate_half_concats(graph))
    if not unit:
        return fused
    readers = _fused_readers(fused)

    def transparent(node: str) -> bool:
        return node in views and node not in unit

    return [(u, v) for u, v in fused
            if transparent(u) or all(unit.get(t) == unit.get(u) for t in _reached(v, readers, transparent))]


def rotate_half_concats(graph: ModelGraph) -> list[str]:
    """The ``Concat`` of every ``rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2])`` (RoPE in Llama, Mistral, Qwen,
    GPT-NeoX ...): two slices of one tensor, the second half negated. Eager runs a ``neg`` and a ``cat``, each a
    kernel of its own."""
    data = graph.dag.nodes
    writer = graph.writer

    def sliced(node: str | None) -> str | None:
        """The tensor a ``Slice`` node reads, else None."""
        if node is None or data[node]["op"] != "Slice" or not data[node]["inputs"] or data[node]["inputs"][0] is None:
            return None
        return data[node]["inputs"][0].name

    found = []
    for cat in graph.runtime_nodes():
        inputs = data[cat]["inputs"]
        if data[cat]["op"] != "Concat" or len(inputs) != 2 or any(t is None for t in inputs):
            continue
        negated, first_half = writer(cat, inputs[0].name), writer(cat, inputs[1].name)
        if negated is None or data[negated]["op"] != "Neg" or data[negated]["inputs"][0] is None:
            continue
        second_half = writer(negated, data[negated]["inputs"][0].name)
        source = sliced(first_half)
        if source is not None and source == sliced(second_half) and first_half != second_half:
            found.append(cat)
    return found


def _runtime_in_order(graph: ModelGraph) -> list[str]:
    """Runtime nodes in a topological order (the views of :func:`eager_views` follow their producers)."""
    dag = graph.dag
    data = dict(dag.nodes(data=True))
    return [n for n in nx.topological_sort(dag) if not data[n]["constant"]]
