"""One GPU kernel described the same way whatever it comes from.

A kernel is a group of ONNX-level nodes (:class:`lilou.graph.costs.CostInput`)
that a runtime runs as one launch: a kernel group predicted on an ONNX graph, or
the nodes that express one measured NeuSight call (``lilou.data.neusight.cost_nodes``).
:func:`describe_kernel` turns either into a :class:`KernelSpec`, so a measured
``linear`` row and an ONNX ``MatMul`` + ``Add`` group with the same shapes get the
same description, and therefore the same features.

Bytes are those crossing the group's boundary: inputs produced outside it are
read once, outputs consumed outside it (or by nobody inside) are written once;
intermediates stay in registers or shared memory.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lilou.graph.precision import PRECISION_OF_DTYPE
from lilou.graph.costs import (CONTROL_FLOW_OPS, ELEMENTWISE_FLOPS, RECURRENT_OPS, VIEW_OPS, CostInput, TensorInfo,
                               attention_dims, input_reads, node_cost, recurrent_dims)

if TYPE_CHECKING:  # kernels built without a graph (the kernel table, `lilou llm`) need no onnx
    from lilou.graph.dag import ModelGraph

#: Kernel families, in the order used for one-hot features.
FAMILIES: tuple[str, ...] = ("gemm", "conv", "elementwise", "layernorm", "softmax", "reduction", "memory")

_FAMILY_OF_OP = {
    "MatMul": "gemm", "Gemm": "gemm", "Einsum": "gemm", "Attention": "gemm",
    "Conv": "conv", "ConvTranspose": "conv",
    "LayerNormalization": "layernorm", "SimplifiedLayerNormalization": "layernorm",
    "RMSNormalization": "layernorm", "GroupNormalization": "layernorm", "InstanceNormalization": "layernorm",
    "Softmax": "softmax", "LogSoftmax": "softmax", "SoftmaxCrossEntropyLoss": "softmax",
    "NegativeLogLikelihoodLoss": "reduction",
    "ReduceMean": "reduction", "ReduceSum": "reduction", "ReduceMax": "reduction", "ReduceMin": "reduction",
    "ReduceProd": "reduction", "ReduceL1": "reduction", "ReduceL2": "reduction",
    "ReduceSumSquare": "reduction", "ReduceLogSumExp": "reduction", "ArgMax": "reduction", "ArgMin": "reduction",
    "GlobalAveragePool": "reduction", "GlobalMaxPool": "reduction", "MaxPool": "reduction",
    "AveragePool": "reduction", "CumSum": "reduction", "CumProd": "reduction", "TopK": "reduction",
    "Hardmax": "reduction",
}
# Families in order of precedence: a group's family is that of its "main" node.
_PRECEDENCE = ("gemm", "conv", "layernorm", "softmax", "reduction", "elementwise", "memory")


@dataclass(frozen=True)
class KernelSpec:
    """What the latency model knows of one kernel.

    ``gemm`` is ``(batch, m, n, k)``: ``batch`` independent ``[m, k] x [k, n]`` products
    (for convolutions, the implicit GEMM: m = N*OH*OW, n = C_out / groups, k = C_in/groups*kh*kw,
    batch = groups). ``rows, cols`` describe row-wise ops (norms, softmax, reductions):
    ``rows`` independent reductions over ``cols`` elements.
    """

    family: str
    ops: tuple[str, ...]
    flops: int
    bytes_read: int
    bytes_written: int
    out_elements: int
    gemm: tuple[int, int, int, int] | None = None
    conv: tuple[int, int, int] | None = None  # (kernel height*width, stride, groups)
    rows: int = 0
    cols: int = 0
    # An LSTM/GRU/RNN layer: (cell, time steps, batch, directions, input size, hidden size, bytes per element),
    # priced by lilou.latency.kernel_model.recurrent, not by the network.
    recurrent: tuple[str, int, int, int, int, int, int] | None = None
    # A ConvTranspose: ``gemm`` and ``conv`` describe the forward convolution whose input gradient it computes,
    # and its price is that convolution's times the measured dgrad/forward ratio (lilou.latency.kernel_model.transposed).
    transposed: bool = False
    # A convolution of a form no source measured ("3-D", "dilated" or both); "" for the 2-D undilated ones measured.
    conv_form: str = ""
    # A 2-D 3x3 filter without dilation: the only shape cuDNN's Winograd kernels take (a 3-D 3x3x1, a 1x9 or a
    # dilated 3x3 filter has a window of 9 taps too, and runs as an implicit GEMM).
    winograd_shape: bool = False
    # The precision a GEMM or convolution reads (its first input's type: "fp32", "fp16", "int8" ...; "" for other
    # families or an unknown type). A graph mixing precisions prices each on its own unit
    # (lilou.latency.kernel_model.precision.kernel_path).
    precision: str = ""
    # A MatMul of a matrix and a 1-D vector (``A @ v``, ``v @ A``): eager's ``mv``, cuBLAS's GEMV, a memory pass no
    # source measured (lilou.latency.composition.fallback prices it so).
    matvec: bool = False
    # The part of an eager aten call this kernel runs, where the call launches more than the one kernel its group
    # describes ("bias add", "group norm moments" ...: lilou.latency.composition.eager_calls); "" for the group's own.
    role: str = ""
    # Back-to-back launches of equal parts of this work: a Loop or Scan left as one node, which eager runs as its body's
    # kernels once per iteration (lilou.latency.composition.eager_calls, lilou.latency.composition.overhead.queue_shares).
    launches: int = 1

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written


def describe_kernel(nodes: Sequence[CostInput], external_outputs: Collection[str] | None = None) -> KernelSpec:
    """Describe the kernel that runs ``nodes`` (in execution order) as one launch.

    ``external_outputs``: names of outputs read outside the group; default: the
    outputs no node of the group reads.
    """
    if not nodes:
        raise ValueError("a kernel needs at least one node")
    produced = {t.name for node in nodes for t in node.outputs}
    consumed = {t.name for node in nodes for t in node.inputs if t is not None}
    viewed = _viewed_tensors(nodes)
    reads: dict[str, int] = {}
    for node in nodes:
        for tensor, nbytes in input_reads(node):
            source = viewed.get(tensor.name, tensor)  # a view made inside the kernel reads what it views
            if source.name not in produced:
                reads[source.name] = max(reads.get(source.name, 0), nbytes)
    outputs = [t for node in nodes for t in node.outputs]
    if external_outputs is None:
        writes = {t.name: t for t in outputs if t.name not in consumed}
    else:
        writes = {t.name: t for t in outputs if t.name in external_outputs or t.name not in consumed}
    if all(node.op in VIEW_OPS for node in nodes):
        writes = {}  # a view launches nothing and moves nothing
    main = _main_node(nodes)
    family = "layernorm" if decomposed_layer_norm(node.op for node in nodes) else _family(main.op)
    spec = dict(
        family=family,
        ops=tuple(node.op for node in nodes),
        flops=sum(node_cost(node).flops for node in nodes),
        bytes_read=sum(reads.values()),
        bytes_written=sum(t.nbytes or 0 for t in writes.values()),
        out_elements=sum(t.elements or 0 for t in writes.values()),
    )
    if family in ("gemm", "conv") and main.inputs and main.inputs[0] is not None:
        spec["precision"] = PRECISION_OF_DTYPE.get(main.inputs[0].dtype, "")
    if family == "gemm":
        spec["gemm"] = _matmul_dims(main)
        spec["matvec"] = main.op == "MatMul" and any(len(_shape(t)) == 1 for t in main.inputs[:2] if t is not None)
    elif family == "conv":
        spec["gemm"], spec["conv"] = _conv_dims(main)
        spec["transposed"] = main.op == "ConvTranspose"
        spec["conv_form"] = _conv_form(main)
        weight = _shape(main.inputs[1])
        spec["winograd_shape"] = tuple(weight[2:]) == (3, 3) and spec["conv_form"] == ""
        if spec["transposed"] and main.outputs[0].name in writes and main.inputs[0] is not None:
            # the forward convolution's output is the transpose's input (same bytes moved, read the other way)
            spec["out_elements"] += (main.inputs[0].elements or 0) - (main.outputs[0].elements or 0)
    elif family in ("layernorm", "softmax", "reduction"):
        spec["rows"], spec["cols"] = _row_dims(main)
    if main.op == "SoftmaxCrossEntropyLoss" and main.inputs and main.inputs[0] is not None:
        # Eager runs log_softmax, which writes the log-probabilities, then picks each target's entry (a tiny second
        # kernel): priced as that log_softmax, the kernel the softmax model learned.
        scores = main.inputs[0]
        spec["bytes_written"] = max(spec["bytes_written"], scores.nbytes or 0)
        spec["out_elements"] = max(spec["out_elements"], scores.elements or 0)
    spec["recurrent"] = _recurrent(nodes)
    return KernelSpec(**spec)


#: Views of their first input's data (same elements, another shape): a kernel reading one reads that input.
_DATA_VIEWS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Dropout"})


def _viewed_tensors(nodes: Sequence[CostInput]) -> dict[str, TensorInfo]:
    """Output name -> the tensor it views, for the data views among ``nodes`` (chains followed to their source).

    A view launches nothing and reads nothing itself; the node that reads the view reads its source's memory. When
    both are in one kernel (a fused ``scaled_dot_product_attention`` call reshapes K before Q.K^T; a TVM group
    starts with a reshape), that source is what the kernel reads from outside."""
    viewed: dict[str, TensorInfo] = {}
    for node in nodes:
        if node.op in _DATA_VIEWS and node.inputs and node.inputs[0] is not None:
            source = viewed.get(node.inputs[0].name, node.inputs[0])
            for out in node.outputs:
                viewed[out.name] = source
    return viewed


def _recurrent(nodes: Sequence[CostInput]) -> tuple[str, int, int, int, int, int, int] | None:
    """The recurrent layer of a group holding one ONNX LSTM/GRU/RNN node of known shapes."""
    cells = [node for node in nodes if node.op in RECURRENT_OPS]
    if len(cells) != 1:
        return None
    node = cells[0]
    dims = recurrent_dims(node)
    if dims is None:
        return None
    steps, batch, directions, inputs, hidden = dims
    itemsize = node.inputs[0].itemsize if node.inputs[0] is not None else 4
    return node.op.lower(), int(steps), int(batch), int(directions), int(inputs), int(hidden), int(itemsize)


#: The ops of ``nn.LayerNorm`` as exported before opset 17 (mean, centre, square, mean, add eps, sqrt, divide), and
#: what else such a kernel may hold: the affine Mul and Add, casts, views.
_LAYER_NORM_OPS = Counter({"ReduceMean": 2, "Sub": 1, "Pow": 1, "Sqrt": 1, "Div": 1})
_LAYER_NORM_EXTRA = frozenset({"Add", "Mul", "Cast"}) | VIEW_OPS


def decomposed_layer_norm(ops: Iterable[str]) -> bool:
    """A kernel of exactly one layer norm written op by op (fused by the eager replay's ``layer_norm`` rule): it is a
    layer-norm kernel, priced as one, not a reduction."""
    counts = Counter(ops)
    return counts & _LAYER_NORM_OPS == _LAYER_NORM_OPS and set(counts - _LAYER_NORM_OPS) <= _LAYER_NORM_EXTRA


def _family(op: str) -> str:
    if op in _FAMILY_OF_OP:
        return _FAMILY_OF_OP[op]
    return "elementwise" if op in ELEMENTWISE_FLOPS else "memory"


def _main_node(nodes: Sequence[CostInput]) -> CostInput:
    """The node that decides the kernel's character: highest-precedence family, then most FLOPs."""
    def rank(node: CostInput) -> tuple[int, int]:
        return (-_PRECEDENCE.index(_family(node.op)), node_cost(node).flops)

    return max(nodes, key=rank)


def _shape(tensor) -> tuple[int, ...]:
    return tensor.shape if tensor is not None and tensor.shape is not None else ()


def _matmul_dims(node: CostInput) -> tuple[int, int, int, int]:
    if node.op == "Attention":  # its first product, Q.K^T, as the decomposed SDPA kernels are described
        dims = attention_dims(node)
        if dims is None:
            return 1, 1, 1, 1
        heads, q_len, kv_len, head, _ = dims
        return heads, q_len, kv_len, head
    a, b = _shape(node.inputs[0]), _shape(node.inputs[1])
    out = _shape(node.outputs[0])
    if node.op == "Gemm" or len(b) <= 2:
        # A shared 2-D weight: every leading dim of A folds into the GEMM's rows.
        k = (a[0] if node.attributes.get("transA", 0) else a[-1]) if a else 1
        n = out[-1] if out else 1
        m = math.prod(out[:-1]) if out else 1
        return 1, m, n, k
    k = a[-1] if a else 1
    m, n = (out[-2], out[-1]) if len(out) >= 2 else (1, out[-1] if out else 1)
    batch = math.prod(out[:-2]) if len(out) > 2 else 1
    return batch, m, n, k


def _conv_dims(node: CostInput) -> tuple[tuple[int, int, int, int], tuple[int, int, int]]:
    """The implicit GEMM and (window, stride, groups) of a convolution. A ConvTranspose is described as the forward
    convolution whose input gradient it computes (its output shape to its input shape, the same weight): the
    kernel PyTorch runs for it is that convolution's cuDNN backward-data, with the same FLOPs."""
    weight = _shape(node.inputs[1])
    groups = int(node.attributes.get("group", 1))
    window = math.prod(weight[2:]) if len(weight) > 2 else 1
    strides = node.attributes.get("strides") or [1]
    # weight: Conv [C_out, C_in / groups, k...]; ConvTranspose [C_in, C_out / groups, k...], whose forward
    # convolution maps C_out / groups channels to C_in: the same layout read the other way round
    c_out = weight[0] if weight else 1
    c_in_per_group = weight[1] if len(weight) > 1 else 1
    out = _shape(node.inputs[0] if node.op == "ConvTranspose" else node.outputs[0])
    pixels = math.prod(out[2:]) * (out[0] if out else 1)
    gemm = (groups, pixels, c_out // max(groups, 1), c_in_per_group * window)
    return gemm, (window, int(max(strides)), groups)


def _conv_form(node: CostInput) -> str:
    """What sets a convolution apart from the 2-D undilated ones every source measured: "3-D" (three or more
    spatial dims: cuDNN's 3-D kernels), "dilated" (no Winograd, gathered taps), both, or ""."""
    weight = _shape(node.inputs[1])
    forms = []
    if len(weight) > 4:
        forms.append("3-D")
    dilations = node.attributes.get("dilations")
    if isinstance(dilations, (list, tuple)) and any(isinstance(d, int) and d > 1 for d in dilations):
        forms.append("dilated")
    return " ".join(forms)


def _row_dims(node: CostInput) -> tuple[int, int]:
    data = _shape(node.inputs[0])
    if not data:
        return 1, 1
    if node.op in ("GlobalAveragePool", "GlobalMaxPool"):
        return math.prod(data[:2]), math.prod(data[2:])
    if node.op == "SoftmaxCrossEntropyLoss":  # scores (N, C, d1 ...): one row of C classes per sample and position
        classes = data[1] if len(data) > 1 else 1
        return math.prod(data) // max(classes, 1), classes
    if node.op == "NegativeLogLikelihoodLoss":  # one picked entry per target, summed
        target = _shape(node.inputs[1]) if len(node.inputs) > 1 else ()
        return 1, math.prod(target) if target else 1
    if node.op in ("MaxPool", "AveragePool"):
        out = _shape(node.outputs[0])
        return math.prod(out), math.prod(node.attributes.get("kernel_shape") or [1])
    axis = node.attributes.get("axis", -1)
    axes = node.attributes.get("axes")
    # Reduce ops of opset >= 18 take axes as an input whose value the graph does not carry
    # here: the last axis is assumed, as in most normalisation-style reductions.
    if node.op.startswith("Reduce") or node.op in ("ArgMax", "ArgMin", "CumSum", "CumProd", "TopK", "Hardmax"):
        reduced = [a % len(data) for a in (axes or [axis])]
    elif node.op in ("LayerNormalization", "GroupNormalization", "InstanceNormalization"):
        start = axis % len(data) if node.op == "LayerNormalization" else 2
        reduced = list(range(start, len(data)))
    else:  # Softmax: one axis
        reduced = [axis % len(data)]
    cols = math.prod(data[a] for a in reduced)
    return math.prod(data) // max(cols, 1), cols


def describe_graph_kernel(graph: ModelGraph, node_names: Sequence[str]) -> KernelSpec:
    """Describe the kernel that runs ``node_names`` of an ONNX graph as one launch."""
    members = set(node_names)
    dag = graph.dag
    nodes = [CostInput(op=dag.nodes[n]["op"], attributes=dag.nodes[n]["attributes"],
                       inputs=dag.nodes[n]["inputs"], outputs=dag.nodes[n]["outputs"])
             for n in sorted(members, key=lambda n: dag.nodes[n]["order"])]
    graph_outputs = {t.name for t in graph.outputs}
    external = set(graph_outputs)
    for name in members:
        for consumer in dag.successors(name):
            # a constant consumer (a CastLike or Shape of the value: folded, it reads the type or shape) reads no data
            if consumer not in members and not dag.nodes[consumer]["constant"]:
                external.update(dag.edges[name, consumer]["tensors"])
    spec = describe_kernel(nodes, external_outputs=external)
    if any(node.op in CONTROL_FLOW_OPS for node in nodes):
        # a Loop, Scan or If not written out: its cost is its body's, which the graph priced with its subgraphs
        # (lilou.graph.dag) and an op's own formula cannot see (a Scan of 16 GEMMs was one 0-FLOP memory pass)
        spec = replace(spec, flops=max(spec.flops, sum(int(dag.nodes[n]["flops"]) for n in members)),
                       bytes_read=max(spec.bytes_read, sum(int(dag.nodes[n]["bytes_read"]) for n in members)),
                       bytes_written=max(spec.bytes_written, sum(int(dag.nodes[n]["bytes_written"]) for n in members)))
    return spec

