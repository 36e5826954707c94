"""Nodes that compute on weights alone, which eager PyTorch runs on every forward and Lilou prices as precomputed.

:func:`lilou.graph.dag.annotate_graph` marks every node whose inputs are all initializers (or the outputs of such
nodes) ``constant``, and :meth:`~lilou.graph.dag.ModelGraph.runtime_nodes` leaves it out: right for a runtime that
folds constants (onnxruntime, TensorRT, TVM), and for what an exporter's constant folding already did. Eager PyTorch
folds nothing: ``torch.nn.utils.weight_norm`` (and its parametrization) recomputes ``g * v / ||v||`` before each
forward (``ReduceL2``, ``Div``, ``Mul`` on a convolution's weight: vocoders, wav2vec2's positional convolution),
Swin indexes its relative-position-bias table with a buffer (``Gather``), a text encoder embeds position ids kept
as a buffer (``Gather``): one kernel or more each, on every call. Such nodes stay in a file exported with
``do_constant_folding=False``, or whenever the exporter keeps them.

:func:`eager_recomputed_warning` names them where they matter; they are not priced (an honest bound: the prediction
lacks their kernels). A BERT export's position and token-type lookups (2 of about 80 launches, 1 % of the bytes)
are not worth a warning: they shift the estimate by less than its interval's resolution, and nothing in them is for
the user to change; a weight-normed vocoder's (28 % of the bytes) or Swin's bias tables (12 nodes, 5 % of the
launches) are (:data:`MATERIAL_BYTES_SHARE`, :data:`MATERIAL_LAUNCH_SHARE`). Not counted: what eager runs as a
view or what an exporter writes around a weight that eager never launches (a ``Transpose`` of a linear's weight, a
``Reshape``, ``Cast``, ``Slice``, ``Expand`` ...: :data:`PLUMBING`),
quantization's ``DequantizeLinear`` of a stored weight (:mod:`lilou.graph.quantized` prices it), nodes of another
domain, and values of one element (a scale computed from constants: a Python float in eager).
"""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from lilou.graph.costs import SEQUENCE_OPS, VIEW_OPS

if TYPE_CHECKING:
    from lilou.graph.dag import ModelGraph

#: Ops on a weight that eager runs as views, or that exporters write and eager does not launch.
PLUMBING = frozenset(VIEW_OPS | SEQUENCE_OPS | {
    "Transpose", "Cast", "CastLike", "Slice", "Split", "Expand", "ConstantOfShape", "Range", "EyeLike",
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
})


#: A share of the model's bytes, counting them, from which the weight-only nodes are named (percent).
MATERIAL_BYTES_SHARE = 2.0
#: A share of the priced nodes' count (each a launch at most) from which they are named (percent).
MATERIAL_LAUNCH_SHARE = 3.0


def recomputed_weight_nodes(graph: ModelGraph) -> list[str]:
    """The nodes, in file order, that compute a floating-point value of more than one element from weights alone
    (constant, not plumbing): what eager recomputes on every forward and Lilou treats as precomputed."""
    data = graph.dag.nodes
    return [name for name in graph.nodes_in_order()
            if data[name]["constant"] and not data[name].get("shape_only") and data[name]["op"] not in PLUMBING
            and data[name].get("domain", "") in ("", "ai.onnx") and _computes_a_tensor(data[name])]


def _computes_a_tensor(data: dict) -> bool:
    """A floating-point output, and more than one element read or written (one-element arithmetic on constants is
    Python's in eager; a norm over a weight is not, whatever its size)."""
    outputs = [t for t in data["outputs"] if t is not None]
    if not any(str(t.dtype).startswith(("float", "bfloat")) for t in outputs):
        return False
    return any(t.elements is None or t.elements > 1 for t in [*outputs, *(t for t in data["inputs"] if t is not None)])


def eager_recomputed_warning(graph: ModelGraph) -> list[str]:
    """One warning naming the weight-only nodes eager recomputes each forward (count, op kinds, bytes and their share
    of the bytes the priced nodes move), or none where they are under both material shares."""
    nodes = recomputed_weight_nodes(graph)
    if not nodes:
        return []
    data = graph.dag.nodes
    kinds = Counter(data[n]["op"] for n in nodes)
    listed = ", ".join(f"{count} {op}" for op, count in sorted(kinds.items(), key=lambda item: (-item[1], item[0])))
    moved = sum(data[n]["bytes_read"] + data[n]["bytes_written"] for n in nodes)
    priced = graph.totals()["bytes"]
    share = 100.0 * moved / (moved + priced) if moved + priced else 0.0
    launches = 100.0 * len(nodes) / max(len(graph.runtime_nodes()), 1)
    if share < MATERIAL_BYTES_SHARE and launches < MATERIAL_LAUNCH_SHARE:
        return []
    return [f"{len(nodes)} node(s) compute on weights alone ({listed}), moving {_size(moved)} ({share:.1f} % of "
            "the model's bytes counting them): Lilou treats their results as precomputed, as a runtime that folds "
            "constants does, but eager PyTorch recomputes them on every forward (weight_norm, a bias table or "
            "embedding indexed by a buffer), so their kernels are missing from this prediction; for inference, "
            "remove weight_norm (torch.nn.utils.parametrize.remove_parametrizations) or precompute them, and "
            "re-export"]


def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"
