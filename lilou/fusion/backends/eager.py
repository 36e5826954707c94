"""Oracle for PyTorch eager: one aten call = one kernel.

The dynamo ONNX exporter records, on every ONNX node, the FX node (one aten call
of the traced module) it was emitted for (``pkg.torch.onnx.fx_node``). Eager
PyTorch launches one kernel per aten call, so the ONNX nodes of one call form one
group. Four refinements make the groups match what eager really launches:

* aten *view* ops (``transpose``, ``view``, ``expand``, ``slice`` ... — those whose
  ``OpOverload.is_view`` is true), the ``clone`` that eval-mode dropout traces to
  (see :func:`_is_dropout_clone`), ``_unsafe_view`` (the view ``reshape`` and
  ``matmul`` emit after a copy; torch leaves it unmarked because autograd must
  not track it as a view) and ``operator.getitem`` (picking one tensor of a
  ``split``) launch no kernel: they only change strides. The
  ONNX nodes of such a call are merged into the kernel that reads them when a
  single kernel does (a MatMul reading a transposed view reads it in place), and
  are otherwise kept as a ``launches=False`` group. A view call whose node is a reshape that no strides of
  its input allow (:func:`lilou.fusion.eager_layout.strided_tensors`) is the copy of a ``clone`` the
  exporter's optimiser removed: it launches.
* ONNX nodes in constant or shape subgraphs are folded (host-side scalars).
* Nodes without metadata (added by the exporter itself) are their own group.
* Recurrent layers (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``) run as cuDNN's fused RNN
  kernels, one per layer and direction, whatever the ONNX form: one ``aten.lstm``
  call written as ONNX ``LSTM`` nodes (one per layer) with layout transposes, or
  ``aten.rnn_tanh`` decomposed by the exporter into a per-time-step loop of
  ``MatMul``/``Add``/``Tanh``. :func:`recurrent_groups` regroups the nodes of such a
  module by the layer (and direction) they compute; an ONNX node that runs both
  directions (``direction="bidirectional"``) stays one group, since a partition
  cannot split a node.

The metadata is only present in files written by the dynamo exporter (``lilou zoo
export``); :func:`eager_partition` says so when it is missing.
"""
from __future__ import annotations

import functools
from collections import OrderedDict

import onnx
import torch

from lilou.errors import LilouInputError
from lilou.fusion.eager_layout import strided_tensors
from lilou.fusion.eager_replay import recurrent_weight_layer
from lilou.fusion.partition import Partition, partition_from_groups
from lilou.graph.dag import ModelGraph
from lilou.graph.names import unique_node_names

FX_NODE_KEY = "pkg.torch.onnx.fx_node"
CLASS_HIERARCHY_KEY = "pkg.torch.onnx.class_hierarchy"
#: Targets that launch no kernel although ``OpOverload.is_view`` is false (see the module docstring).
METADATA_ONLY_TARGETS = frozenset({"torch.ops.aten._unsafe_view.default", "operator.getitem"})


NAME_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
#: torch module classes whose forward eager runs as cuDNN RNN kernels (one per layer and direction).
RECURRENT_MODULES = frozenset({"torch.nn.modules.rnn.LSTM", "torch.nn.modules.rnn.GRU", "torch.nn.modules.rnn.RNN"})
#: ONNX ops that compute a whole recurrent layer.
RECURRENT_OPS = frozenset({"LSTM", "GRU", "RNN"})


def aten_calls(model: onnx.ModelProto) -> dict[str, tuple[str, str]]:
    """ONNX node name -> (FX node name, aten target) for nodes that carry exporter metadata."""
    calls: dict[str, tuple[str, str]] = {}
    for name, node in zip(unique_node_names(model.graph), model.graph.node):
        meta = {p.key: p.value for p in node.metadata_props}
        fx = meta.get(FX_NODE_KEY)
        if not fx:
            continue
        fx_name = fx.split(" : ", 1)[0].strip()
        target = fx.split("target=", 1)[1].split("]", 1)[0] if "target=" in fx else ""
        if target.endswith("aten.clone.default") and _is_dropout_clone(fx, meta.get(CLASS_HIERARCHY_KEY, "")):
            target = "dropout"
        calls[name] = (fx_name, target)
    return calls


def recurrent_modules(model: onnx.ModelProto) -> dict[str, str]:
    """ONNX node name -> the scope of the ``nn.LSTM``/``nn.GRU``/``nn.RNN`` module it was exported from."""
    modules: dict[str, str] = {}
    for name, node in zip(unique_node_names(model.graph), model.graph.node):
        meta = {p.key: p.value for p in node.metadata_props}
        classes = _string_list(meta.get(CLASS_HIERARCHY_KEY, ""))
        scopes = _string_list(meta.get(NAME_SCOPES_KEY, ""))
        for depth, cls in enumerate(classes):
            if cls in RECURRENT_MODULES:
                modules[name] = f"{cls}@{scopes[depth] if depth < len(scopes) else depth}"
                break
    return modules


def _string_list(value: str) -> list[str]:
    """The exporter writes lists as Python reprs: ``"['', 'lstm']"``."""
    value = value.strip()
    if not (value.startswith("[") and value.endswith("]")):
        return []
    return [item.strip().strip("'\"") for item in value[1:-1].split(",")] if value[1:-1].strip() else []


def recurrent_groups(graph: ModelGraph, modules: dict[str, str]) -> dict[str, str]:
    """Runtime node of a recurrent module -> its kernel key: one per module, layer and direction.

    Anchors are the ONNX ``LSTM``/``GRU``/``RNN`` nodes (each its own key) and the
    ``MatMul``/``Gemm`` nodes that read a recurrent weight (``weight_hh_l1_reverse``:
    layer 1, reverse). Every other node of the module takes the key of a runtime
    producer in the module (the layout transposes after a layer, the time-step
    adds and tanhs of a decomposed loop), else of a reader (the input transpose).
    """
    dag = graph.dag
    runtime = [n for n in graph.runtime_nodes() if n in modules]
    keys: dict[str, str] = {}
    for node in runtime:
        data = dag.nodes[node]
        if data["op"] in RECURRENT_OPS:
            keys[node] = f"{modules[node]}/{node}"
        elif data["op"] in ("MatMul", "Gemm"):
            layer = recurrent_weight_layer(graph, node)  # which layer and direction it computes
            if layer is not None:
                keys[node] = f"{modules[node]}/{layer}"
    for node in runtime:  # producers first (file order is topological)
        if node not in keys:
            producers = [p for p in dag.predecessors(node) if p in keys and modules.get(p) == modules[node]]
            if producers:
                keys[node] = keys[max(producers, key=lambda p: dag.nodes[p]["order"])]
    for node in reversed(runtime):
        if node not in keys:
            readers = [s for s in dag.successors(node) if s in keys and modules.get(s) == modules[node]]
            keys[node] = keys[min(readers, key=lambda s: dag.nodes[s]["order"])] if readers else modules[node]
    return keys


def _is_dropout_clone(fx_node: str, class_hierarchy: str) -> bool:
    """Is this ``aten.clone`` what eval-mode dropout traces to?

    ``F.dropout(x, training=False)`` returns ``x`` in eager, but the export
    decomposition writes ``clone(x)``; ``.contiguous()`` writes
    ``clone(x, memory_format=...)``, a real copy. A plain ``clone`` inside an
    ``nn.Dropout`` module, or without a memory format (functional dropout, as in
    the attention of Hugging Face models), is therefore taken as dropout. An
    explicit ``x.clone()`` in model code would be mistaken for one; none of the
    zoo models has one outside constant subgraphs.
    """
    return "Dropout" in class_hierarchy or "memory_format" not in fx_node


@functools.lru_cache(maxsize=512)
def launches_no_kernel(target: str) -> bool:
    """Does this aten target only create a view (strides/metadata, no kernel) in eager?"""
    if target == "dropout" or target in METADATA_ONLY_TARGETS:
        return True
    if not target.startswith("torch.ops.aten."):
        return False
    _, _, packet, overload = target.rsplit(".", 3)
    try:
        return bool(getattr(getattr(torch.ops.aten, packet), overload).is_view)
    except (AttributeError, RuntimeError):
        return False


def eager_partition(model: onnx.ModelProto, graph: ModelGraph) -> Partition:
    """Kernel groups of PyTorch eager for a dynamo-exported model (see module docstring)."""
    calls = aten_calls(model)
    recurrent = recurrent_groups(graph, recurrent_modules(model))
    # A recurrent layer is one kernel however many aten calls or ONNX nodes it was written as.
    calls.update({node: (f"<recurrent: {key}>", "recurrent") for node, key in recurrent.items()})
    runtime = graph.runtime_nodes()
    if not any(n in calls for n in runtime):
        raise LilouInputError(
            f"{graph.name} has no exporter metadata: the eager oracle needs a file written by the dynamo "
            "exporter (`lilou zoo export`); without --oracle the fusion model predicts the groups")
    by_call: OrderedDict[str, list[str]] = OrderedDict()
    view_calls: set[str] = set()
    # A view call written as a reshape of strides no view can have: the exporter's optimiser dropped the
    # ``clone`` (``.contiguous()``) before it, which eager runs as a copy kernel.
    _, copies = strided_tensors(graph, runtime)
    for node in runtime:
        key, target = calls.get(node, (f"<no metadata: {node}>", ""))
        by_call.setdefault(key, []).append(node)
        if launches_no_kernel(target):
            view_calls.add(key)
    view_calls -= {key for key, nodes in by_call.items() if copies.intersection(nodes)}

    group_of = {node: key for key, nodes in by_call.items() for node in nodes}
    dag = graph.dag
    no_kernel: dict[str, list[str]] = {}
    # Reverse topological order, so a chain of views collapses into the kernel at its end.
    for key in reversed(list(by_call)):
        if key not in view_calls:
            continue
        nodes = by_call.pop(key)
        readers = {group_of[s] for n in nodes for s in dag.successors(n)
                   if s in group_of and group_of[s] != key}
        target = readers.pop() if len(readers) == 1 and not _feeds_graph_output(graph, nodes) else key
        destination = by_call if target in by_call else no_kernel
        destination[target] = nodes + destination.get(target, [])
        for n in nodes:
            group_of[n] = target
    return partition_from_groups(graph, by_call.values(), "eager", source="oracle", no_kernel=no_kernel.values())


def _feeds_graph_output(graph: ModelGraph, nodes: list[str]) -> bool:
    outputs = {t.name for t in graph.outputs}
    return any(t.name in outputs for n in nodes for t in graph.dag.nodes[n]["outputs"])
