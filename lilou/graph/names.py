"""Node names Lilou can key on (ONNX allows empty and repeated ones), and protobuf strings as text."""
from __future__ import annotations

import onnx


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
