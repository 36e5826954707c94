"""Plain-data views of a :class:`ModelGraph` for the CLI (`lilou graph`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lilou.graph.costs import TensorInfo

if TYPE_CHECKING:  # the CLI imports this module to format numbers; the graph itself needs onnx
    from lilou.graph.dag import ModelGraph


def _tensor_dict(tensor: TensorInfo | None) -> dict[str, Any] | None:
    if tensor is None:
        return None
    return {"name": tensor.name, "shape": list(tensor.shape) if tensor.shape is not None else None,
            "dtype": tensor.dtype}


def graph_to_json(graph: ModelGraph) -> dict[str, Any]:
    """The `lilou graph --format json` object (DESIGN.md contract, plus a `constant` flag per node and the graph's
    ``inputs`` and ``outputs`` with the shapes they were read at: what --batch, --shape and the file's own dims gave)."""
    nodes = []
    for name in graph.nodes_in_order():
        data = graph.dag.nodes[name]
        nodes.append({
            "name": name,
            "op": data["op"],
            "inputs": [_tensor_dict(t) for t in data["inputs"]],
            "outputs": [_tensor_dict(t) for t in data["outputs"]],
            "flops": data["flops"],
            "bytes_read": data["bytes_read"],
            "bytes_written": data["bytes_written"],
            "constant": data["constant"],
        })
    return {"model": graph.name, "inputs": [_tensor_dict(t) for t in graph.inputs],
            "outputs": [_tensor_dict(t) for t in graph.outputs], "nodes": nodes, "totals": graph.totals(),
            "warnings": list(graph.warnings)}


def shape_text(tensor: TensorInfo | None) -> str:
    if tensor is None:
        return "-"
    if tensor.shape is None:
        return "?"
    return "x".join(str(d) for d in tensor.shape) or "scalar"


def human(value: float, unit: str = "") -> str:
    """1234567 -> '1.23 M' style, for tables."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}".rstrip()
