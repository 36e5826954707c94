"""FLOPs and bytes of one ONNX node from its input/output shapes.

Conventions (used everywhere in Lilou):

* A multiply-add counts as **two** FLOPs (ResNet-50 at 224x224 is ~8.2 GFLOPs).
* Elementwise ops count the arithmetic operations of their ONNX definition per
  output element (``Add`` 1, ``Sigmoid`` 4, ``Gelu`` 8, ...); pure data movement
  (``Transpose``, ``Concat``, ``Gather``, ``Cast``, ``Pad``...) has 0 FLOPs.
* Bytes read are the input tensors a kernel must load (weights included), bytes
  written the outputs. Ops that only change metadata (``Reshape``, ``Squeeze``,
  ``Shape``, ...) move no bytes: eager runtimes make them views.
  ``Gather``/``Slice`` read only the rows/elements they output, not the whole table.

Why hand-written: the maintained libraries either count MACs (fvcore, thop) on
torch modules rather than ONNX graphs, or skip most ops (onnx-tool is not kept up
with current opsets). The formulas below are short and each is tested.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Shape = tuple[int, ...]


#: Element types narrower than a byte, and their bits (ml_dtypes' names).
SUB_BYTE_BITS = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4}


@dataclass(frozen=True)
class TensorInfo:
    """Static facts about one tensor: its shape (None if unknown) and element size in bytes."""

    name: str
    shape: Shape | None
    dtype: str
    itemsize: int

    @property
    def elements(self) -> int | None:
        return None if self.shape is None else math.prod(self.shape)

    @property
    def nbytes(self) -> int | None:
        """Bytes the tensor holds; 4-bit types pack two elements per byte (numpy gives them one byte each)."""
        elements = self.elements
        if elements is None:
            return None
        bits = SUB_BYTE_BITS.get(self.dtype)
        return -(-elements * bits // 8) if bits else elements * self.itemsize


@dataclass(frozen=True)
class NodeCost:
    flops: int
    bytes_read: int
    bytes_written: int
    #: Kernels eager PyTorch launches for the node: 1 for an op, and for a Loop, Scan or If left as one node its
    #: body's launches times its iterations (:func:`lilou.graph.dag._node_cost`).
    launches: int = 1


@dataclass(frozen=True)
class CostInput:
    """What a cost formula may look at."""

    op: str
    attributes: Mapping[str, Any]
    inputs: Sequence[TensorInfo | None]   # None for an omitted optional input
    outputs: Sequence[TensorInfo]


# Ops that only rewrite metadata: no kernel in eager runtimes, no FLOPs, no bytes.
VIEW_OPS = frozenset({
    "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Shape", "Size",
    "Constant", "Dropout", "Optional", "OptionalGetElement",
})

# torch.split exports as SplitToSequence + SequenceAt. In eager PyTorch both are views, and a sequence
# element is a reference: no kernel, no FLOPs, no bytes. Kept out of VIEW_OPS, which also feeds the
# fusion model's node features.
SEQUENCE_OPS = frozenset({"SplitToSequence", "SequenceAt"})

# Pure data movement: 0 FLOPs, bytes from tensors.
MOVEMENT_OPS = frozenset({
    "Transpose", "Concat", "Split", "Slice", "Pad", "Expand", "Tile", "Cast", "CastLike",
    "Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements", "DepthToSpace",
    "SpaceToDepth", "ConstantOfShape", "ConstantFill", "Range", "Trilu", "OneHot", "NonZero", "Compress",
    "ReverseSequence", "EyeLike",
})

# Arithmetic operations per output element, from each op's ONNX definition.
ELEMENTWISE_FLOPS: dict[str, int] = {
    "Add": 1, "Sub": 1, "Mul": 1, "Div": 1, "Pow": 1, "Mod": 1, "Max": 1, "Min": 1, "Mean": 1,
    "Sum": 1, "Neg": 1, "Abs": 1, "Sign": 1, "Reciprocal": 1, "Sqrt": 1, "Exp": 1, "Log": 1,
    "Erf": 1, "Sin": 1, "Cos": 1, "Tan": 1, "Floor": 1, "Ceil": 1, "Round": 1,
    "Equal": 1, "Greater": 1, "GreaterOrEqual": 1, "Less": 1, "LessOrEqual": 1,
    "And": 1, "Or": 1, "Xor": 1, "Not": 1, "Where": 1, "IsNaN": 1, "IsInf": 1,
    "Relu": 1, "Tanh": 1, "Clip": 2, "LeakyRelu": 2, "PRelu": 2, "Elu": 3, "Selu": 4,
    "Celu": 4, "ThresholdedRelu": 1, "Sigmoid": 4, "HardSigmoid": 3, "HardSwish": 4,
    "Softplus": 3, "Softsign": 3, "Mish": 6, "Gelu": 8, "BiasGelu": 9, "FastGelu": 10,
    "QuickGelu": 5, "Swish": 5,
    # Inverse and hyperbolic trigonometry, bitwise and shrink ops (torch.asin ... , torch.bitwise_*, Hardshrink and
    # Softshrink, which torch.onnx writes as Shrink).
    "Asin": 1, "Acos": 1, "Atan": 1, "Sinh": 1, "Cosh": 1, "Asinh": 1, "Acosh": 1, "Atanh": 1,
    "BitwiseAnd": 1, "BitwiseOr": 1, "BitwiseXor": 1, "BitwiseNot": 1, "BitShift": 1, "Shrink": 2,
}

# Per-element cost of the normalisations (ONNX function bodies): mean, centre,
# square, mean, scale by 1/std, then the optional affine scale and bias.
_NORM_BASE_FLOPS = 5


def _elements(tensor: TensorInfo | None) -> int:
    return 0 if tensor is None or tensor.elements is None else tensor.elements


def _bytes(tensors: Sequence[TensorInfo | None]) -> int:
    return sum(t.nbytes or 0 for t in tensors if t is not None)


def _out_elements(node: CostInput) -> int:
    return sum(_elements(t) for t in node.outputs)


def _conv_flops(node: CostInput) -> int:
    weight = node.inputs[1]
    if weight is None or weight.shape is None or not node.outputs or node.outputs[0].shape is None:
        return 0
    out = node.outputs[0].shape
    # weight: [C_out, C_in / group, k1, k2, ...]
    macs_per_output = math.prod(weight.shape[1:])
    flops = 2 * math.prod(out) * macs_per_output
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        flops += math.prod(out)
    return flops


def _conv_transpose_flops(node: CostInput) -> int:
    data, weight = node.inputs[0], node.inputs[1]
    if data is None or data.shape is None or weight is None or weight.shape is None:
        return 0
    # weight: [C_in, C_out / group, k1, k2, ...]; every input element scatters into C_out/g * k outputs.
    flops = 2 * math.prod(data.shape) * math.prod(weight.shape[1:])
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        flops += _out_elements(node)
    return flops


def _matmul_flops(node: CostInput) -> int:
    a, b = node.inputs[0], node.inputs[1]
    if a is None or b is None or a.shape is None or b.shape is None or node.outputs[0].shape is None:
        return 0
    # a 1-D . 1-D product (a dot) has the scalar shape (): 2 * K, as eager's ``dot``
    k = a.shape[-1] if len(a.shape) >= 1 else 1
    return 2 * math.prod(node.outputs[0].shape) * k


def _gemm_flops(node: CostInput) -> int:
    a = node.inputs[0]
    out = node.outputs[0].shape
    if a is None or a.shape is None or out is None:
        return 0
    k = a.shape[0] if node.attributes.get("transA", 0) else a.shape[-1]
    flops = 2 * math.prod(out) * k
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        flops += math.prod(out)
    return flops


def _norm_flops(node: CostInput) -> int:
    affine = sum(1 for t in node.inputs[1:3] if t is not None)
    return (_NORM_BASE_FLOPS + affine) * _elements(node.inputs[0])


def batchnorm_training(node: CostInput) -> bool:
    """A BatchNormalization that normalises with the batch's own statistics (``training_mode=1``, what
    ``torch.onnx.export(..., training=TrainingMode.PRESERVE)`` writes for a module left in ``train()``), as
    PyTorch runs a model nobody called ``eval()`` on."""
    return node.op == "BatchNormalization" and bool(node.attributes.get("training_mode", 0))


def _batchnorm_flops(node: CostInput) -> int:
    if batchnorm_training(node):  # batch mean and variance first, then normalise and scale like a norm
        return (_NORM_BASE_FLOPS + 2) * _elements(node.inputs[0])
    # Inference: scale and shift folded per channel, 2 per element.
    return 2 * _elements(node.inputs[0])


#: max, subtract, exp, sum, divide.
_SOFTMAX_FLOPS = 5


def _softmax_flops(node: CostInput) -> int:
    return _SOFTMAX_FLOPS * _elements(node.inputs[0])


def _softmax_cross_entropy_flops(node: CostInput) -> int:
    # A log-softmax over the classes (axis 1), then the target's negated entry picked and averaged.
    return (_SOFTMAX_FLOPS + 1) * _elements(node.inputs[0])


def _nll_loss_flops(node: CostInput) -> int:
    # One entry picked per target (and weighted), then averaged.
    return 2 * _elements(node.inputs[1]) if len(node.inputs) > 1 else 0


def _pool_flops(node: CostInput) -> int:
    """One operation per output element and window element; a window wider than its input (ceil_mode, as in
    HF EfficientNet's 1280-wide pooler over 7x7) reads at most the input's extent on that axis."""
    kernel = list(node.attributes.get("kernel_shape") or ())
    data = node.inputs[0] if node.inputs else None
    if data is not None and data.shape is not None and len(data.shape) == len(kernel) + 2:
        kernel = [min(int(k), int(d)) for k, d in zip(kernel, data.shape[2:])]
    return _out_elements(node) * max(1, math.prod(kernel))


def _global_pool_flops(node: CostInput) -> int:
    return _elements(node.inputs[0])


def _reduce_flops(node: CostInput) -> int:
    # One operation per input element (plus the division of a mean, per output).
    extra = _out_elements(node) if node.op in ("ReduceMean", "ReduceL2", "ReduceLogSumExp") else 0
    per_element = 2 if node.op in ("ReduceSumSquare", "ReduceL2", "ReduceLogSumExp") else 1
    return per_element * _elements(node.inputs[0]) + extra


def _resize_flops(node: CostInput) -> int:
    mode = node.attributes.get("mode", "nearest")
    if isinstance(mode, bytes):
        mode = mode.decode()
    data, out = node.inputs[0], node.outputs[0]
    if mode == "nearest" or data is None or data.shape is None or out.shape is None:
        return 0
    resized_axes = sum(1 for i, o in zip(data.shape, out.shape) if i != o)
    points = (4 if mode == "cubic" else 2) ** resized_axes
    return 2 * points * _out_elements(node)  # one multiply-add per contributing point


#: GridSample's modes (opset 16 names, opset 20 names) -> (points per spatial axis each output element weighs,
#: FLOPs per output location and spatial axis for its coordinate). PyTorch's grid_sampler_2d/3d kernels
#: (aten/src/ATen/native/cuda/GridSampler.cu), which onnxruntime's CUDA GridSample follows, run one thread per
#: output location: it reads the location's grid coordinate, unnormalises it per axis (add 1, scale by the size,
#: subtract, halve: 4 FLOPs) and clips or reflects it for the padding mode, then for each channel gathers its points
#: of the input and writes one value. Nearest rounds the coordinate (+1 per axis) and copies one point; linear takes
#: the floor and the two fractions (+3 per axis) and each of its 2^axes points' weight as the product of its
#: fractions (axes - 1 multiplies a point); cubic evaluates four cubic-convolution coefficients per axis (about 20
#: FLOPs) over 4^axes points, separably. Each point then costs a multiply-add per channel (2 FLOPs), as Resize's
#: points do (:func:`_resize_flops`); nearest's copy costs none.
_GRID_SAMPLE_MODES = {"nearest": (1, 5), "bilinear": (2, 7), "linear": (2, 7), "bicubic": (4, 25), "cubic": (4, 25)}


def _grid_sample_mode(node: CostInput) -> tuple[int, int]:
    mode = node.attributes.get("mode", "bilinear")
    if isinstance(mode, bytes):
        mode = mode.decode()
    return _GRID_SAMPLE_MODES.get(mode, _GRID_SAMPLE_MODES["bilinear"])


def _grid_sample_geometry(node: CostInput) -> tuple[int, int, int] | None:
    """(spatial axes, output locations N x spatial out, output elements) of a GridSample with known shapes."""
    out = node.outputs[0] if node.outputs else None
    if out is None or out.shape is None or len(out.shape) < 3:
        return None
    axes = len(out.shape) - 2
    return axes, math.prod(out.shape) // max(out.shape[1], 1), _elements(out)


def _grid_sample_flops(node: CostInput) -> int:
    """Per output location its coordinate (per spatial axis, :data:`_GRID_SAMPLE_MODES`), per output element a
    multiply-add per input point it weighs (none for nearest): bilinear 2-D, 8 FLOPs an element and 18 a location
    (C = 3 is 14 an element, the ~10-14 of a hand count)."""
    geometry = _grid_sample_geometry(node)
    if geometry is None:
        return 0
    axes, locations, elements = geometry
    side, per_axis = _grid_sample_mode(node)
    points = side ** axes
    weights = points * (axes - 1) if side == 2 else 0  # linear: each point's weight, a product of fractions
    return (per_axis * axes + weights) * locations + (2 * points * elements if side > 1 else 0)


def _grid_sample_reads(node: CostInput) -> list[tuple[TensorInfo, int]]:
    """The grid whole, and of the input the points gathered (2^axes per output element for linear, 4^axes cubic,
    one nearest, each as wide as the input's element) up to the input's size: a grid that upsamples reads the
    same points for neighbouring outputs from the cache, one that samples a few points of a large input reads only
    those (the whole input was counted, which made a 64x64 crop of a 4K frame a pass over the frame)."""
    data, grid = (list(node.inputs) + [None, None])[:2]
    geometry = _grid_sample_geometry(node)
    reads = [(grid, grid.nbytes or 0)] if grid is not None else []
    if data is None:
        return reads
    if geometry is None or data.nbytes is None or not data.elements:
        return [(data, data.nbytes or 0)] + reads
    axes, _, elements = geometry
    side, _ = _grid_sample_mode(node)
    gathered = -(-elements * side ** axes * data.nbytes // data.elements)
    return [(data, min(data.nbytes, gathered))] + reads


def _cumsum_flops(node: CostInput) -> int:
    return _elements(node.inputs[0])


def _topk_flops(node: CostInput) -> int:
    """A compare per input element for each of log2(k) selection passes (a radix or bitonic select), at least one."""
    out = node.outputs[0].shape if node.outputs and node.outputs[0].shape else ()
    axis = node.attributes.get("axis", -1)
    k = out[axis % len(out)] if out and isinstance(axis, int) and -len(out) <= axis < len(out) else 1
    return _elements(node.inputs[0]) * max(1, math.ceil(math.log2(max(k, 1) + 1)))


def _hardmax_flops(node: CostInput) -> int:
    """A compare per element along the axis, then the one-hot write."""
    return _elements(node.inputs[0]) + _out_elements(node)


def attention_dims(node: CostInput) -> tuple[int, int, int, int, int] | None:
    """(batch x query heads, query length, key length with the past, Q/K head size, V head size) of an ONNX
    ``Attention`` node (opset 23: what ``torch.onnx.export`` writes for ``F.scaled_dot_product_attention``), its
    Q, K and V either 4-D ``[batch, heads, length, head size]`` or 3-D ``[batch, length, heads x head size]`` with
    the head counts as attributes; None when a shape is unknown."""
    q, k, v = (node.inputs[i] if len(node.inputs) > i else None for i in range(3))
    if any(t is None or t.shape is None or len(t.shape) not in (3, 4) for t in (q, k, v)):
        return None
    q_heads, kv_heads = node.attributes.get("q_num_heads", 0), node.attributes.get("kv_num_heads", 0)
    if len(q.shape) == 4:
        batch, q_heads, q_len, head = q.shape
    elif isinstance(q_heads, int) and q_heads > 0:
        batch, q_len, head = q.shape[0], q.shape[1], q.shape[2] // q_heads
    else:
        return None
    kv_len = k.shape[2] if len(k.shape) == 4 else k.shape[1]
    if len(v.shape) == 4:
        v_head = v.shape[3]
    elif isinstance(kv_heads, int) and kv_heads > 0:
        v_head = v.shape[2] // kv_heads
    else:
        return None
    past = node.inputs[4] if len(node.inputs) > 4 else None
    if past is not None and past.shape is not None and len(past.shape) == 4:
        kv_len += past.shape[2]
    return batch * q_heads, q_len, kv_len, head, v_head


def _attention_flops(node: CostInput) -> int:
    """What the decomposed ``scaled_dot_product_attention`` the dynamo exporter writes below opset 23 counts: Q and
    K (one copy per query head) scaled by the square root of the scale, Q.K^T and P.V (2 FLOPs per multiply-add),
    the mask (given or causal) added to and the softmax taken over every score."""
    dims = attention_dims(node)
    if dims is None:
        return 0
    heads, q_len, kv_len, head, v_head = dims
    scores = heads * q_len * kv_len
    masked = (len(node.inputs) > 3 and node.inputs[3] is not None) or bool(node.attributes.get("is_causal", 0))
    scaled = _elements(node.inputs[0]) + heads * kv_len * head
    return 2 * scores * (head + v_head) + (int(masked) + _SOFTMAX_FLOPS) * scores + scaled


def _rotary_flops(node: CostInput) -> int:
    """x cos + rotate(x) sin on the rotated part of every element (3 per element), the rest copied."""
    return 3 * _out_elements(node)


# Recurrent layers (ONNX LSTM / GRU / RNN, one node per layer; what cuDNN runs as its fused RNN
# kernels). Per time step, direction and batch row, a layer with G gates of hidden size H on an
# input of size I computes the input and recurrent projections (2*G*H*(I+H)), both biases (2*G*H)
# and the gates' pointwise work below (from PyTorch's LSTMCell/GRUCell/RNNCell equations; sigmoid
# and tanh at their ELEMENTWISE_FLOPS costs).
RECURRENT_OPS = frozenset({"LSTM", "GRU", "RNN"})
#: Ops that run subgraphs: their cost is their body's, which lilou.graph.dag prices (their own formula sees none).
CONTROL_FLOW_OPS = frozenset({"Loop", "If", "Scan"})
_RECURRENT_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_RECURRENT_POINTWISE = {
    "LSTM": 3 * 4 + 2 * 1 + 4,  # sigmoid i, f, o; tanh g, tanh c; c = f*c + i*g (3), h = o*tanh(c) (1)
    "GRU": 2 * 4 + 1 + 5,       # sigmoid r, z; tanh n; r*(W_hn h + b_hn), add, h = (1-z)*n + z*h (3)
    "RNN": 1,                   # tanh (or relu)
}


def recurrent_dims(node: CostInput) -> tuple[int, int, int, int, int] | None:
    """(time steps, batch, directions, input size, hidden size) of an LSTM/GRU/RNN node, if known."""
    x, w = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
    if x is None or x.shape is None or len(x.shape) != 3 or w is None or w.shape is None or len(w.shape) != 3:
        return None
    steps, batch = (x.shape[1], x.shape[0]) if node.attributes.get("layout", 0) == 1 else x.shape[:2]
    directions = w.shape[0]
    hidden = node.attributes.get("hidden_size") or w.shape[1] // _RECURRENT_GATES[node.op]
    return steps, batch, directions, x.shape[2], int(hidden)


def _recurrent_flops(node: CostInput) -> int:
    dims = recurrent_dims(node)
    if dims is None:
        return 0
    steps, batch, directions, inputs, hidden = dims
    gates = _RECURRENT_GATES[node.op]
    biased = len(node.inputs) > 3 and node.inputs[3] is not None  # B (input 3) absent: nn.LSTM(bias=False)
    per_step = (2 * gates * hidden * (inputs + hidden) + (2 * gates * hidden if biased else 0)
                + _RECURRENT_POINTWISE[node.op] * hidden)
    return steps * batch * directions * per_step


def _recurrent_reads(node: CostInput) -> list[tuple[TensorInfo, int]]:
    """Every input once, except the recurrent weight R (input 2), read again at every time step:
    the hidden state of step t needs step t-1's, so each step's recurrent GEMM reads R anew."""
    reads = [(t, t.nbytes or 0) for t in node.inputs if t is not None]
    dims = recurrent_dims(node)
    if dims is None or len(node.inputs) < 3 or node.inputs[2] is None:
        return reads
    steps = dims[0]
    return [(t, n * steps if t is node.inputs[2] else n) for t, n in reads]


def _einsum_flops(node: CostInput) -> int:
    """FLOPs of an Einsum as torch.einsum evaluates it: operands contracted pairwise, left to right, each pair costing
    the product of the sizes of every label either holds, twice when a label is summed away there (a multiply-add),
    once when none is (an outer or element-wise product); one operand costs its elements when it sums a label away,
    nothing when it only permutes. ``...`` stands for the dimensions an operand does not name (aligned from the
    right, as they broadcast), and a label's size is the largest its operands give it (a size-1 dimension
    broadcasts). Before session 37 an equation with ``...`` counted 0, a broadcast batch of 1 set the label's size,
    and three operands were counted as one product over every label (12.8x torch's count for ``ij,jk,kl->il``)."""
    equation = node.attributes.get("equation", "")
    if isinstance(equation, bytes):
        equation = equation.decode("utf-8", "replace")
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    tensors = list(node.inputs)
    if len(terms) != len(tensors) or any(t is None or t.shape is None for t in tensors):
        return 0
    operands: list[list[str]] = []
    sizes: dict[str, int] = {}
    for term, tensor in zip(terms, tensors):
        labels = _einsum_labels(term, len(tensor.shape))
        if labels is None:
            return 0
        operands.append(labels)
        for label, size in zip(labels, tensor.shape):
            sizes[label] = max(sizes.get(label, 1), size)
    broadcast = sorted((label for label in sizes if label.startswith(".")), key=lambda label: -int(label[1:]))
    if arrow:
        explicit = [c for c in rhs.replace("...", "") if c.isalpha()]
        output = set(explicit) | (set(broadcast) if "..." in rhs else set())
    else:  # implicit output: the labels that appear once, and the broadcast dimensions
        counts = {label: sum(labels.count(label) for labels in operands) for label in sizes}
        output = {label for label, count in counts.items() if count == 1} | set(broadcast)
    if len(operands) == 1:
        (labels,) = operands
        return math.prod(sizes[label] for label in set(labels)) if set(labels) - output else 0
    flops, current = 0, operands[0]
    for position, labels in enumerate(operands[1:], start=1):
        later = output.union(*map(set, operands[position + 1:]))
        both = set(current) | set(labels)
        kept = [label for label in both if label in later]
        flops += (2 if len(kept) < len(both) else 1) * math.prod(sizes[label] for label in both)
        current = kept
    return flops


def _einsum_labels(term: str, rank: int) -> list[str] | None:
    """The labels of one Einsum operand of ``rank`` dimensions: its letters, and for ``...`` one label per dimension
    it covers, named by its place from the right (``.1`` the last); None when the term does not fit the rank."""
    named, dots, rest = term.partition("...")
    if "." in named + rest or not (named + rest).isalpha() and (named + rest):
        return None
    letters = list(named + rest)
    covered = rank - len(letters)
    if covered < 0 or (not dots and covered):
        return None
    return list(named) + [f".{covered - i}" for i in range(covered)] + list(rest)


_FLOP_FORMULAS: dict[str, Callable[[CostInput], int]] = {
    "Conv": _conv_flops,
    "ConvTranspose": _conv_transpose_flops,
    "MatMul": _matmul_flops,
    "Gemm": _gemm_flops,
    "LayerNormalization": _norm_flops,
    "SimplifiedLayerNormalization": _norm_flops,
    "RMSNormalization": _norm_flops,
    "InstanceNormalization": _norm_flops,
    "GroupNormalization": _norm_flops,
    "BatchNormalization": _batchnorm_flops,
    "Softmax": _softmax_flops,
    "LogSoftmax": _softmax_flops,
    "SoftmaxCrossEntropyLoss": _softmax_cross_entropy_flops,
    "NegativeLogLikelihoodLoss": _nll_loss_flops,
    "MaxPool": _pool_flops,
    "AveragePool": _pool_flops,
    "LpPool": _pool_flops,
    "GlobalAveragePool": _global_pool_flops,
    "GlobalMaxPool": _global_pool_flops,
    "ReduceMean": _reduce_flops, "ReduceSum": _reduce_flops, "ReduceMax": _reduce_flops,
    "ReduceMin": _reduce_flops, "ReduceProd": _reduce_flops, "ReduceL1": _reduce_flops,
    "ReduceL2": _reduce_flops, "ReduceSumSquare": _reduce_flops, "ReduceLogSumExp": _reduce_flops,
    "ArgMax": _reduce_flops, "ArgMin": _reduce_flops,
    "Resize": _resize_flops,
    "GridSample": _grid_sample_flops,
    "Upsample": _resize_flops,
    "CumSum": _cumsum_flops,
    "CumProd": _cumsum_flops,
    "TopK": _topk_flops,
    "Hardmax": _hardmax_flops,
    "Attention": _attention_flops,
    "RotaryEmbedding": _rotary_flops,
    "Einsum": _einsum_flops,
    "LSTM": _recurrent_flops,
    "GRU": _recurrent_flops,
    "RNN": _recurrent_flops,
}

#: Every op whose cost Lilou knows; anything else is reported as unsupported.
SUPPORTED_OPS = frozenset(VIEW_OPS | SEQUENCE_OPS | MOVEMENT_OPS | set(ELEMENTWISE_FLOPS) | set(_FLOP_FORMULAS))


#: Variadic elementwise ops: n inputs take n - 1 operations per output element (a Mean's n - 1 adds and its scale: n).
_VARIADIC_OPS = {"Sum": 0, "Max": 0, "Min": 0, "Mean": 1}


def node_flops(node: CostInput) -> int:
    if node.op in _VARIADIC_OPS:
        inputs = sum(1 for t in node.inputs if t is not None)
        return max(inputs - 1 + _VARIADIC_OPS[node.op], 0) * _out_elements(node)
    if node.op in ELEMENTWISE_FLOPS:
        return ELEMENTWISE_FLOPS[node.op] * _out_elements(node)
    formula = _FLOP_FORMULAS.get(node.op)
    return formula(node) if formula else 0


def input_reads(node: CostInput) -> list[tuple[TensorInfo, int]]:
    """(input tensor, bytes a kernel reads of it) for every input the node reads by value.

    Shape-like inputs lend only metadata, and Gather/Slice read only the rows they
    output, not the whole table. Fused kernels use this too (``lilou.latency.kernel_model.kernel``).
    """
    if node.op in VIEW_OPS or node.op in SEQUENCE_OPS or node.op in ("ConstantOfShape", "ConstantFill", "Range", "EyeLike"):
        return []
    inputs = [t for t in node.inputs if t is not None]
    if node.op == "CastLike":
        inputs = inputs[:1]  # the second input lends its type only
    if node.op in ("Expand", "Tile") and node.inputs and node.inputs[0] is not None:
        inputs = inputs[:1]  # the target shape, the repeats: metadata the kernel's launch reads, not memory
    if node.op in _RECURRENT_GATES:
        return _recurrent_reads(node)
    if node.op == "NegativeLogLikelihoodLoss" and len(inputs) > 1:
        # one input entry per target is read, not the whole input
        picked = (inputs[1].elements or 0) * (inputs[0].itemsize or 4)
        return [(inputs[0], picked)] + [(t, t.nbytes or 0) for t in inputs[1:]]
    if node.op in ("Gather", "GatherElements", "GatherND", "Slice") and inputs:
        selected = _selected_bytes(inputs[0], node.outputs)
        rest = [] if node.op == "Slice" else inputs[1:]
        return [(inputs[0], selected)] + [(t, t.nbytes or 0) for t in rest]
    if node.op == "RotaryEmbedding" and len(node.inputs) > 3 and node.inputs[3] is not None:
        # cos and sin caches hold every position ([max positions, rotary dim / 2]); the kernel reads the rows of
        # position_ids only
        positions = node.inputs[3].elements or 0
        return [(t, _rows_read(t, positions) if t is node.inputs[1] or t is node.inputs[2] else t.nbytes or 0)
                for t in inputs]
    if node.op == "GridSample" and inputs:
        return _grid_sample_reads(node)
    if batchnorm_training(node) and inputs:
        # One pass over X for the batch statistics, a second to normalise it: X is read twice.
        return [(inputs[0], 2 * (inputs[0].nbytes or 0))] + [(t, t.nbytes or 0) for t in inputs[1:]]
    return [(t, t.nbytes or 0) for t in inputs]


def _selected_bytes(table: TensorInfo, outputs: Sequence[TensorInfo | None]) -> int:
    """Bytes a gather or slice reads of ``table``: its output's elements, each as wide as the table's (a table
    stored in 4 bits and gathered into floats, ``GatherBlockQuantized``, reads half a byte per element)."""
    output = outputs[0] if outputs else None
    if output is None or output.elements is None or not table.elements or table.nbytes is None \
            or table.dtype == output.dtype:
        return _bytes(outputs)
    return -(-output.elements * table.nbytes // table.elements)


def _rows_read(table: TensorInfo, rows: int) -> int:
    """Bytes of ``rows`` rows of a 2-D ``table`` (all of it when it is not 2-D or has fewer rows)."""
    if table.shape is None or len(table.shape) != 2 or table.shape[0] <= rows:
        return table.nbytes or 0
    return -(-rows * (table.nbytes or 0) // table.shape[0])


def node_bytes(node: CostInput) -> tuple[int, int]:
    """(bytes read, bytes written) by the node as one kernel."""
    if node.op in VIEW_OPS or node.op in SEQUENCE_OPS:
        return 0, 0
    return sum(nbytes for _, nbytes in input_reads(node)), _bytes(node.outputs)


def node_cost(node: CostInput) -> NodeCost:
    read, written = node_bytes(node)
    return NodeCost(flops=int(node_flops(node)), bytes_read=int(read), bytes_written=int(written))
