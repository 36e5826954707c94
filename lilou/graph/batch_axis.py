"""Which axis of a graph input holds the batch: the first, except for the inputs of a time-major recurrent layer.

ONNX's LSTM, GRU and RNN read ``X`` as ``[seq_length, batch, input_size]`` and ``initial_h`` / ``initial_c`` as
``[num_directions, batch, hidden_size]`` unless ``layout=1``; PyTorch's ``nn.LSTM`` is time-major by default and its
exports feed the graph input to the node directly. ``--batch 16`` set such a model's sequence length (and a file with
``[seq, batch, 512]`` was refused for its dynamic ``batch``), and the report named the sequence length its batch.

Not every graph input holds the batch. A file exported without its parameters (``torch.onnx.export(...,
export_params=False)``) feeds every weight as a graph input: ``--batch 8`` set a convolution's weight to 8 output
channels and shape inference failed, and the weights were priced as activations that grow with the batch.
:func:`onnx_unbatched_inputs` names the inputs whose batch axis ``--batch`` leaves alone,
:func:`onnx_fixed_size_inputs` those of them whose size does not follow the batch at all (priced as read once per
call), and :func:`onnx_weight_inputs` those of these that are weights (an initializer for the rest of the pipeline).
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


#: Input slots at which an op reads a model's parameters: a convolution's weight and bias, a Gemm's B and C, a norm's
#: scale, bias and statistics, PReLU's slope. A graph input read only there is a weight fed as an input.
PARAMETER_SLOTS: dict[str, frozenset[int]] = {
    "Conv": frozenset({1, 2}), "ConvTranspose": frozenset({1, 2}), "Gemm": frozenset({1, 2}),
    "BatchNormalization": frozenset({1, 2, 3, 4}), "InstanceNormalization": frozenset({1, 2}),
    "LayerNormalization": frozenset({1, 2}), "GroupNormalization": frozenset({1, 2}), "PRelu": frozenset({1}),
}


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
                      for node in graph.node if node.op_type in RECURRENT_OPS and node.domain in ("", "ai.onnx"))


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


def unbatched_inputs(batch_sizes: Mapping[str, int | None], parameters: set[str]) -> set[str]:
    """The inputs a batch size does not apply to, from each input's size at its batch axis (None where the file
    leaves it dynamic), in the file's order, and the inputs read only at :data:`PARAMETER_SLOTS`.

    Where some input's batch is dynamic, the inputs whose batch axis has a fixed size (a weight fed as an input, a
    fixed table) do not take it; where every size is fixed, those whose size is not the first batched input's, or
    that are read only as parameters."""
    if any(size is None for size in batch_sizes.values()):
        return {name for name, size in batch_sizes.items() if size is not None}
    primary = next((size for name, size in batch_sizes.items() if name not in parameters), None)
    if primary is None:  # every input read as a parameter: nothing tells the batch apart
        return set()
    return {name for name, size in batch_sizes.items() if size != primary or name in parameters}


def onnx_unbatched_inputs(graph: onnx.GraphProto, inputs: Sequence[onnx.ValueInfoProto]) -> set[str]:
    """:func:`unbatched_inputs` of an ONNX graph's run-time ``inputs`` that its top-level nodes read, before their
    shapes are set."""
    if len(inputs) < 2:  # one input holds the batch, if any does (most files: 14 ms of passes over BERT-large's nodes)
        return set()
    sizes = _batch_sizes(graph, inputs)
    return unbatched_inputs(sizes, _onnx_parameters(graph, sizes))


def onnx_fixed_size_inputs(graph: onnx.GraphProto, inputs: Sequence[onnx.ValueInfoProto], unbatched: set[str]
                           ) -> set[str]:
    """Of the ``unbatched`` inputs, those whose size does not follow the batch: not those that write the name of a
    dynamic batch in another axis (Silero VAD's ``state``, ``[2, batch, 128]``, holds the batch second, where no
    recurrent node reads it directly to say so), which ``--batch`` sizes through that name."""
    if not unbatched:
        return set()
    axes = onnx_batch_axes(graph)
    dims = {value.name: value.type.tensor_type.shape.dim for value in inputs}
    named = {dims[name][axes.get(name, 0)].dim_param for name, size in _batch_sizes(graph, inputs).items()
             if size is None} - {""}
    return {name for name in unbatched if not any(d.dim_value <= 0 and d.dim_param in named for d in dims[name])}


def onnx_weight_inputs(graph: onnx.GraphProto, inputs: Sequence[onnx.ValueInfoProto], unbatched: set[str]) -> set[str]:
    """Which ``unbatched`` inputs are weights, whose ops eager runs as a module's (a MatMul and Add of a weight and
    bias as one ``aten.linear``) and whose transforms the export would have folded: all of them in a file that holds
    no initializer (``export_params=False`` writes none), else those read only as parameters. An input of another
    size read as a MatMul's operand beside the file's own weights is a second activation, not a weight."""
    if not unbatched or not graph.initializer:
        return set(unbatched)
    return set(unbatched) & _onnx_parameters(graph, _batch_sizes(graph, inputs))


def _batch_sizes(graph: onnx.GraphProto, inputs: Sequence[onnx.ValueInfoProto]) -> dict[str, int | None]:
    """Each input the top-level nodes read (one nothing reads tells nothing) -> its size at its batch axis, None
    where the file leaves it dynamic; inputs without that axis are left out."""
    axes = onnx_batch_axes(graph)
    read = _reads(graph, {value.name for value in inputs})[0]
    sizes: dict[str, int | None] = {}
    for value in inputs:
        dims, axis = value.type.tensor_type.shape.dim, axes.get(value.name, 0)
        if len(dims) > axis and value.name in read:
            sizes[value.name] = dims[axis].dim_value if dims[axis].dim_value > 0 else None
    return sizes


def _onnx_parameters(graph: onnx.GraphProto, names: Mapping[str, object]) -> set[str]:
    return _reads(graph, set(names))[1]


def _reads(graph: onnx.GraphProto, names: set[str]) -> tuple[set[str], set[str]]:
    """Of ``names``: those a top-level node reads, and those every reader reads at one of :data:`PARAMETER_SLOTS`
    (an op of another domain reads an operand)."""
    read, parameter, other = set(), set(), set()
    for node in graph.node:
        slots = PARAMETER_SLOTS.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ()
        for slot, name in enumerate(node.input):
            if name in names:
                read.add(name)
                (parameter if slot in slots else other).add(name)
    return read, parameter - other


def graph_unbatched_inputs(graph: ModelGraph) -> set[str]:
    """The inputs of an annotated graph whose size does not follow the batch, as the shaping of its file decided
    them (:func:`onnx_fixed_size_inputs`, before the input sizes were set): what a larger batch reads once all the
    same, as it reads the file's initializers. A set of the caller's own."""
    return set(graph.dag.graph.get("unbatched_inputs", ()))


def graph_weight_inputs(graph: ModelGraph) -> set[str]:
    """The inputs of an annotated graph read as weights (:func:`onnx_weight_inputs`). A set of the caller's own."""
    return set(graph.dag.graph.get("weight_inputs", ()))


def unbatched_inputs_note(graph: ModelGraph) -> list[str]:
    """What a prediction says of the inputs :func:`graph_unbatched_inputs` names, in the file's order."""
    unbatched, weights = graph_unbatched_inputs(graph), graph_weight_inputs(graph)
    notes = []
    for names, what in (([t.name for t in graph.inputs if t.name in weights],
                         "read as weights fed at run time (as torch.onnx.export(..., export_params=False) feeds every "
                         "parameter)"),
                        ([t.name for t in graph.inputs if t.name in unbatched - weights],
                         "their size is not the batch's")):
        if names:
            listed = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            notes.append(f"{len(names)} input(s) ({listed}) do not hold the batch, {what}: read once per call "
                         "whatever the batch, and --batch leaves them as they are")
    return notes
