"""What the dynamo exporter's names say about where one aten call ends.

torch.onnx's dynamo exporter writes each aten call as one or more ONNX nodes, and its names
keep the boundary even when the metadata (``pkg.torch.onnx.fx_node``) is stripped:

- the value an aten call returns is named after its FX node (``linear``, ``softplus_2``,
  ``getitem_3``); values the exporter creates *inside* a call's decomposition are ``val_<k>``;
- a torchlib function that is inlined (Softplus's threshold form, BCE-with-logits ...) keeps
  its own node names, ``n0``, ``n1`` ... numbered up within each call, with a ``_<j>`` suffix
  when the name is already taken. A run of such nodes in file order whose numbers keep
  rising is one call; a number that does not rise starts the next call.

An edge that carries a ``val_<k>`` tensor to a node that is not inlined, or joins two nodes of
one inlined run, is therefore inside one aten call, which eager runs as one kernel. Over every
dynamo export of the fusion dataset (eager oracle version 3, 2026-12-02) 6,113 of 6,173 such
edges are fused; the 60 others are in exports run through the optimiser, which removed a
call's last node (the Cast after a Softmax) and left an internal name on the boundary, and
between the layers of a two-layer LSTM, which the oracle splits by layer. So ``val_<k>`` edges
are a GNN feature, not a rule the eager replay trusts. Inlined runs are both: all 80 of their edges are fused, and the
replay joins them (:func:`inlined_call_edges`). Neither knows any op: they hold for any aten op
the exporter decomposes, including ones no training graph has. Files from other exporters
(TorchScript: ``/layer/Mul_output_0``) have neither pattern, and the feature is zero on every edge.
"""
from __future__ import annotations

import re

from lilou.fusion.partition import Edge, runtime_edges
from lilou.graph.dag import ModelGraph

_INTERNAL_VALUE = re.compile(r"val_\d+")
_INLINED_NODE = re.compile(r"n(\d+)(?:_\d+)?")


def inlined_runs(graph: ModelGraph) -> dict[str, int]:
    """Inlined-function node -> the id of its call: consecutive ``n<k>`` nodes while ``k`` rises, in a file that
    torch.onnx wrote (its producer, or some node named ``node_<value>`` as the dynamo exporter names them).
    Hand-built graphs and other converters name nodes ``n0, n1 ...`` too: read as one inlined call, a chain of 24
    elementwise ops was one kernel (0.036 ms against 0.731 on a T4)."""
    runs: dict[str, int] = {}
    if graph.dag.graph.get("producer") != "pytorch" and not any(node.startswith("node_") for node in graph.dag.nodes):
        return runs
    run, previous = 0, None
    for node in graph.nodes_in_order():
        match = _INLINED_NODE.fullmatch(node)
        if match is None:
            previous = None
            continue
        number = int(match.group(1))
        if previous is None or number <= previous:
            run += 1
        runs[node], previous = run, number
    return runs


def inlined_call_edges(graph: ModelGraph) -> set[Edge]:
    """Runtime edges between two nodes of one inlined run: one torchlib function call, one aten call."""
    runs = inlined_runs(graph)
    return {(u, v) for u, v in runtime_edges(graph) if u in runs and runs[u] == runs.get(v)}


def edges_inside_one_call(graph: ModelGraph) -> set[Edge]:
    """Runtime edges whose names say both ends belong to one aten call (see the module docstring)."""
    runs = inlined_runs(graph)
    inside = set()
    for u, v in runtime_edges(graph):
        if v in runs:  # an inlined function's nodes are all n<k>: only its own run is its call
            if runs[v] == runs.get(u):
                inside.add((u, v))
        elif all(_INTERNAL_VALUE.fullmatch(t) for t in graph.dag.edges[u, v]["tensors"] or ["-"]):
            inside.add((u, v))
    return inside


def edges_between_calls(graph: ModelGraph) -> set[Edge]:
    """Runtime edges whose names say they leave one aten call for the next.

    The dynamo exporter names the node that returns a call's value ``node_<value>``, after the FX node
    (``node_sigmoid`` writes ``sigmoid``); a call's inner nodes write ``val_<k>`` (``aten.silu``'s Sigmoid:
    ``node_Sigmoid_0`` -> ``val_0``). An edge carrying such a returned value ends a call: a hand-written
    ``x * torch.sigmoid(x)`` is two calls and two eager kernels, where ``F.silu`` is one. Other exporters' names
    never match.
    """
    dag = graph.dag
    return {(u, v) for u, v in runtime_edges(graph) if u.startswith("node_")
            and dag.edges[u, v]["tensors"] and all(u[5:] == t for t in dag.edges[u, v]["tensors"])}


#: aten calls eager runs as one fused kernel whatever the exporter decomposes them into, by the name of the
#: node that returns their value: ``F.scaled_dot_product_attention`` (flash or memory-efficient attention).
_FUSED_CALL_NODE = re.compile(r"node_scaled_dot_product_attention(?:_\d+)?")


def fused_call_nodes(graph: ModelGraph) -> list[list[str]]:
    """The runtime nodes of each call eager runs as one fused kernel (:data:`_FUSED_CALL_NODE`).

    The dynamo exporter writes ``F.scaled_dot_product_attention`` as its math (scale, Q.K^T, mask, softmax, P.V,
    with reshapes of K), and names the last node ``node_scaled_dot_product_attention`` and every value inside the
    call ``val_<k>``; eager runs one attention kernel. The call is that node and every runtime node that reaches
    it through edges carrying ``val_<k>`` values only (constants such as a causal mask are folded anyway).
    """
    dag = graph.dag
    calls = []
    for end in graph.runtime_nodes():
        if not _FUSED_CALL_NODE.fullmatch(end):
            continue
        members, stack = [end], [end]
        while stack:
            node = stack.pop()
            for producer in dag.predecessors(node):
                if producer in members or dag.nodes[producer]["constant"]:
                    continue
                if all(_INTERNAL_VALUE.fullmatch(t) for t in dag.edges[producer, node]["tensors"] or ["-"]):
                    members.append(producer)
                    stack.append(producer)
        calls.append(members)
    return calls


def without_exporter_names(model, prefix: str = "x"):
    """A copy of an ONNX ``model`` whose node and value names no longer follow the exporter's patterns.

    Every name gets ``prefix`` in front, so nothing else changes (a node ``n3`` becomes ``xn3``): the
    benchmark scores the GNN on files whose names say nothing, as another exporter's would.
    """
    import onnx

    renamed = onnx.ModelProto()
    renamed.CopyFrom(model)
    graph = renamed.graph

    def rename(name: str) -> str:
        return prefix + name if name else name

    for node in graph.node:
        node.name = rename(node.name)
        node.input[:] = [rename(t) for t in node.input]
        node.output[:] = [rename(t) for t in node.output]
    for info in (*graph.input, *graph.output, *graph.value_info, *graph.initializer):
        info.name = rename(info.name)
    return renamed
