"""Removing the pairs of ``Transpose`` nodes that undo each other, where Lilou wrote one of them.

Writing a channels-last op back as its NCHW module (:mod:`lilou.graph.contrib_diffusion`) puts a transpose to NCHW
before it and one back to NHWC after it; between two such ops, or beside the transposes onnxruntime left at the
edges of a channels-last region, the second undoes the first. Eager never ran either: the second's readers read the
first's input instead (an ``Identity`` of it where the second wrote a graph output or a subgraph could read its
name), and the first goes where nothing else reads it. Between the
two may sit what launches nothing either: an ``Identity``, or a ``Cast`` to the type its input already has (the
casts onnxruntime's optimizer adds before a channels-last convolution when it could not infer a type); they go with
the pair. This runs on the shaped graph, whose element types decide which casts change nothing. Pairs that are both
the file's own stay: an exporter writes a transpose for a reason (a ``permute().contiguous()``).
"""
from __future__ import annotations

from collections.abc import Mapping

import onnx

from lilou.graph.contrib_writer import producers_and_reads
from lilou.graph.exporter_fusions import node_attribute

#: The ``doc_string`` of the transposes Lilou writes between channels-last and channels-first.
LAYOUT = "lilou: layout transpose"


def cancel_inverse_transposes(graph: onnx.GraphProto, types: Mapping[str, str]) -> int:
    """Rewrite every inverse pair (see the module docstring) in place; how many pairs. ``types``: tensor name ->
    element type name, as the shaped graph's tensor table gives it."""
    producers, readers = producers_and_reads(graph)
    outputs = {value.name for value in graph.output}
    nested = any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in graph.node
                 for a in n.attribute)  # a subgraph may read a name from here: keep every name
    cancelled, dropped, renamed = 0, set(), {}
    for node in graph.node:
        if node.op_type != "Transpose" or len(node.input) != 1:
            continue
        between, first = _through_no_ops(node.input[0], producers, readers, types, outputs)
        if first is None or first.op_type != "Transpose" or len(first.input) != 1 or id(first) in dropped:
            continue
        if node.doc_string != LAYOUT and first.doc_string != LAYOUT:
            continue
        if not _undoes(node_attribute(first, "perm", None), node_attribute(node, "perm", None)):
            continue
        source = first.input[0]
        node.input[0] = source
        node.op_type = "Identity"
        del node.attribute[:]
        readers[source] = readers.get(source, 0) + 1
        cancelled += 1
        if node.output[0] not in outputs and not nested:  # its readers read the source itself: no node at all
            renamed[node.output[0]] = source
            dropped.add(id(node))
        for passed in [*between, first]:
            readers[passed.output[0]] -= 1
            if readers[passed.output[0]] > 0 or passed.output[0] in outputs:
                break
            dropped.add(id(passed))
    if dropped:
        kept = [node for node in graph.node if id(node) not in dropped]
        for node in kept:
            for position, name in enumerate(node.input):
                while name in renamed:
                    name = renamed[name]
                node.input[position] = name
        del graph.node[:]
        graph.node.extend(kept)
    return cancelled


def _through_no_ops(name: str, producers: Mapping[str, onnx.NodeProto], readers: Mapping[str, int],
                    types: Mapping[str, str], outputs: set[str]) -> tuple[list[onnx.NodeProto], onnx.NodeProto | None]:
    """The nodes that launch nothing between ``name`` and the node that produced its value (each read once), and
    that node."""
    between = []
    node = producers.get(name)
    while node is not None and len(between) < 8 and _launches_nothing(node, types) \
            and readers.get(node.output[0], 0) == 1 and node.output[0] not in outputs:
        between.append(node)
        node = producers.get(node.input[0])
    return between, node


def _launches_nothing(node: onnx.NodeProto, types: Mapping[str, str]) -> bool:
    if len(node.input) != 1 or len(node.output) != 1 or not node.input[0]:
        return False
    if node.op_type == "Identity":
        return True
    if node.op_type != "Cast":
        return False
    source, target = types.get(node.input[0]), types.get(node.output[0])
    return source is not None and source == target and source != "unknown"


def _undoes(first: list[int] | None, second: list[int] | None) -> bool:
    """Whether transposing by ``first`` then by ``second`` gives the input back (explicit permutations only)."""
    if not isinstance(first, list) or not isinstance(second, list) or not first or len(first) != len(second):
        return False
    if sorted(first) != list(range(len(first))) or sorted(second) != list(range(len(second))):
        return False
    return all(first[axis] == position for position, axis in enumerate(second))
