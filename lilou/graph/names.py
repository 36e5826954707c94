"""Node names Lilou can key on (ONNX allows empty and repeated ones), and protobuf strings as text."""
from __future__ import annotations

from typing import TYPE_CHECKING

import onnx

if TYPE_CHECKING:
    from lilou.graph.dag import ModelGraph


def unique_node_names(graph: onnx.GraphProto) -> list[str]:
    """ONNX node names may be empty or repeated; make them unique and keep good ones as they are."""
    seen: set[str] = set()
    names: list[str] = []
    for index, node in enumerate(graph.node):
        base = node.name or f"{node.op_type}_{index}"
        candidate, suffix = base, 1
        while candidate in seen:
            candidate, suffix = f"{base}__{suffix}", suffix + 1
        seen.add(candidate)
        names.append(candidate)
    return names


def protobuf_text(value: str | bytes) -> str:
    """A protobuf string field as text: a file may hold invalid UTF-8, which protobuf hands back as bytes."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def synthetic_nodes(model: onnx.ModelProto, graph: ModelGraph) -> dict[str, dict]:
    """The nodes of ``graph`` that are not the file's own ``model`` nodes under their own names, each with where it
    comes from: ``{"restored_from": node}`` for a batch norm an exporter folded into ``node`` and Lilou put back
    (:mod:`lilou.graph.folded_norms`), ``{"named_by_lilou": true}`` for a file node that had no name or a name
    another node had (:func:`unique_node_names`: ``<op>_<index>``, ``<name>__<k>``), and ``{"written_by_lilou":
    true}`` for a node Lilou wrote (a branch or loop body written out, a fused op written as the ops it replaced)."""
    from lilou.graph.folded_norms import is_restored_batch_norm

    own = {node.name for node in model.graph.node if node.name}
    named = set(unique_node_names(model.graph)) - own
    found: dict[str, dict] = {}
    for name in graph.nodes_in_order():
        if name in own:
            continue
        data = graph.dag.nodes[name]
        if is_restored_batch_norm(name, data):
            producers = [p for p in graph.dag.predecessors(name) if not graph.dag.nodes[p]["constant"]]
            found[name] = {"restored_from": producers[0] if len(producers) == 1 else None}
        elif name in named:
            found[name] = {"named_by_lilou": True}
        else:
            found[name] = {"written_by_lilou": True}
    return found
