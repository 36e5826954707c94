"""Oracle for PyTorch eager: one aten call = one kernel.

The dynamo ONNX exporter records, on every ONNX node, the FX node (one aten call
of the traced module) it was emitted for (``pkg.torch.onnx.fx_node``). Eager
PyTorch launches one kernel per aten call, so the ONNX nodes of one call form one
group. Three refinements make the groups match what eager really launches:

* aten *view* ops (``transpose``, ``view``, ``expand``, ``slice`` ... — those whose
  ``OpOverload.is_view`` is true), the ``clone`` that eval-mode dropout traces to
  (see :func:`_is_dropout_clone`), ``_unsafe_view`` (the view ``reshape`` and
  ``matmul`` emit after a copy; torch leaves it unmarked because autograd must
  not track it as a view) and ``operator.getitem`` (picking one tensor of a
  ``split``) launch no kernel: they only change strides. The
  ONNX nodes of such a call are merged into the kernel that reads them when a
  single kernel does (a MatMul reading a transposed view reads it in place), and
  are otherwise kept as a ``launches=False`` group.
* ONNX nodes in constant or shape subgraphs are folded (host-side scalars).
* Nodes without metadata (added by the exporter itself) are their own group.

The metadata is only present in files written by the dynamo exporter (``lilou zoo
export``); :func:`eager_partition` says so when it is missing.
"""
from __future__ import annotations

import functools
from collections import OrderedDict

import onnx
import torch

from lilou.errors import LilouInputError
from lilou.fusion.partition import Partition, partition_from_groups
from lilou.graph.dag import ModelGraph, unique_node_names

FX_NODE_KEY = "pkg.torch.onnx.fx_node"
CLASS_HIERARCHY_KEY = "pkg.torch.onnx.class_hierarchy"
#: Targets that launch no kernel although ``OpOverload.is_view`` is false (see the module docstring).
METADATA_ONLY_TARGETS = frozenset({"torch.ops.aten._unsafe_view.default", "operator.getitem"})


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
    runtime = graph.runtime_nodes()
    if not any(n in calls for n in runtime):
        raise LilouInputError(
            f"{graph.name} has no exporter metadata: the eager oracle needs a file written by the dynamo "
            "exporter (`lilou zoo export`); without --oracle the fusion model predicts the groups")
    by_call: OrderedDict[str, list[str]] = OrderedDict()
    view_calls: set[str] = set()
    for node in runtime:
        key, target = calls.get(node, (f"<no metadata: {node}>", ""))
        by_call.setdefault(key, []).append(node)
        if launches_no_kernel(target):
            view_calls.add(key)

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
