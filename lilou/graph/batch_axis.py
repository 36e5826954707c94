"""Which axis of a graph input holds the batch: the first, except for the inputs of a time-major recurrent layer.

ONNX's LSTM, GRU and RNN read ``X`` as ``[seq_length, batch, input_size]`` and ``initial_h`` / ``initial_c`` as
``[num_directions, batch, hidden_size]`` unless ``layout=1``; PyTorch's ``nn.LSTM`` is time-major by default and its
exports feed the graph input to the node directly. ``--batch 16`` set such a model's sequence length (and a file with
``[seq, batch, 512]`` was refused for its dynamic ``batch``), and the report named the sequence length its batch.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

    from lilou.graph.dag import ModelGraph

RECURRENT_OPS = frozenset({"LSTM", "GRU", "RNN"})
#: Inputs of a time-major recurrent node whose second axis is the batch: X, initial_h, initial_c.
_BATCH_SECOND = (0, 5, 6)


def batch_axes(nodes: Iterable[tuple[str, int, Sequence[str | None]]]) -> dict[str, int]:
    """``{tensor name: 1}`` for the tensors a time-major recurrent node reads with the batch second, from
    ``(op type, layout attribute, input names)`` of each node; every other tensor's batch axis is 0."""
    axes: dict[str, int] = {}
    for op, layout, inputs in nodes:
        if op in RECURRENT_OPS and not layout:
            axes.update({inputs[i]: 1 for i in _BATCH_SECOND if i < len(inputs) and inputs[i]})
    return axes


def onnx_batch_axes(graph: onnx.GraphProto) -> dict[str, int]:
    """:func:`batch_axes` of an ONNX graph's top-level nodes (the default domain's)."""
    return batch_axes((node.op_type, next((a.i for a in node.attribute if a.name == "layout"), 0), list(node.input))
                      for node in graph.node if node.domain in ("", "ai.onnx"))


def graph_batch_axes(graph: ModelGraph) -> dict[str, int]:
    """:func:`batch_axes` of an annotated graph."""
    data = graph.dag.nodes
    return batch_axes((data[n]["op"], _layout(data[n]["attributes"]),
                       [t.name if t is not None else None for t in data[n]["inputs"]]) for n in data)


def _layout(attributes: Mapping) -> int:
    layout = attributes.get("layout", 0) if isinstance(attributes, Mapping) else 0
    return layout if isinstance(layout, int) else 0


def batch_of(shape: Sequence[int], axis: int) -> int | None:
    """The size at ``axis`` of ``shape``, or None where it has no such axis."""
    return int(shape[axis]) if len(shape) > axis else None
