"""Give every node output a static shape where ONNX shape inference leaves gaps.

Exporters build helper values from constants and static shapes (a Conv's zero bias,
the slice bounds of ``torch.roll``) that ``onnx.shape_inference`` cannot follow
through every op. Such values are evaluated here with ONNX's own reference runtime
(``onnx.reference``) instead of a hand-written evaluator; the few ops of shape arithmetic take a numpy copy of
its code first (:mod:`lilou.graph.fast_eval`), which gives the same arrays faster.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import onnx

from lilou.errors import LilouInputError
from lilou.graph import fast_eval
from lilou.graph.costs import ELEMENTWISE_FLOPS

#: No constant above this many elements is ever materialised: its value stays unknown (shape only).
MAX_FOLD_ELEMENTS = 1 << 20
#: Evaluated constants up to this many elements keep their values for the nodes after them; larger ones keep a shape.
MAX_VALUE_ELEMENTS = 1 << 16

# Ops whose output has at most as many elements as all their inputs together (a safe size bound).
_SHRINKING_OPS = frozenset({
    "Shape", "Size", "Gather", "GatherElements", "GatherND", "Slice", "Squeeze", "Unsqueeze", "Reshape", "Flatten",
    "Identity", "Cast", "CastLike", "Transpose", "Concat", "Split", "ReduceSum", "ReduceMean", "ReduceMax",
    "ReduceMin", "ReduceProd", "ArgMax", "ArgMin", "Neg", "Abs", "Not", "Floor", "Ceil", "Round", "Sqrt",
    "Reciprocal", "Exp", "Log", "Sign", "Relu", "Sigmoid", "Tanh", "Softmax", "Erf", "Sin", "Cos", "Clip",
    "NonZero", "Compress", "Dropout", "Trilu", "IsNaN", "IsInf", "CumSum", "Constant",
})
# Ops whose output size follows from their input values (worked out by _value_shape, never from a stated shape).
_VALUE_SIZED_OPS = frozenset({"ConstantOfShape", "ConstantFill", "Range", "Expand", "Tile"})
# Ops whose output never has more elements than the product of their inputs' (batch x M x N <= |A| |B|).
_PRODUCT_BOUNDED_OPS = frozenset({"MatMul", "Gemm", "Einsum", "MatMulInteger"})
# Elementwise ops with numpy broadcasting: the output has the broadcast shape of the inputs.
_BROADCAST_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Mean", "Sum", "Equal", "Greater", "GreaterOrEqual",
    "Less", "LessOrEqual", "And", "Or", "Xor", "Where", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
})


def _static_shape(value_type: onnx.TypeProto) -> tuple[int, ...] | None:
    if not value_type.HasField("tensor_type"):
        return None
    tensor_type = value_type.tensor_type  # one protobuf lookup: this runs for every value, several times
    if not tensor_type.HasField("shape"):
        return None
    dims = tensor_type.shape.dim
    shape = tuple(d.dim_value for d in dims)
    if 0 in shape and not all(d.HasField("dim_value") for d in dims):
        return None  # a dim_value of 0 is either a real 0 or an unset (symbolic) dim
    return shape


def _known_types(model: onnx.ModelProto) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """Static shapes and element types of the values the model (with its value_info) states."""
    graph = model.graph
    shapes = {t.name: tuple(t.dims) for t in graph.initializer}
    elem_types = {t.name: t.data_type for t in graph.initializer}
    for info in (*graph.input, *graph.value_info, *graph.output):
        shape = _static_shape(info.type)
        if shape is not None:
            shapes[info.name] = shape
        if info.type.HasField("tensor_type"):
            elem_types[info.name] = info.type.tensor_type.elem_type
    return shapes, elem_types


def data_propagation_is_safe(model: onnx.ModelProto) -> bool:
    """ONNX shape inference with ``data_prop`` materialises 1-D tensors as lists of dims (about 140 bytes
    an element): a few-byte file with ``ConstantOfShape([10**8])`` would take gigabytes. Say whether no
    constant-built tensor, and no graph input, of rank 1 exceeds the folding budget."""
    graph = model.graph
    values = small_constants(graph, 64)
    for value in graph.input:
        shape = _static_shape(value.type)
        if shape is not None and len(shape) == 1 and shape[0] > MAX_FOLD_ELEMENTS:
            return False
    shapes = {t.name: tuple(t.dims) for t in graph.initializer}
    for node in graph.node:
        shape = _value_shape(node, shapes, values)
        # Only 1-D values are propagated: a [1, 512, 16384] zeros_like is not materialised, and turning data
        # propagation off for it loses the shape of every Expand built from Shape -> Concat downstream.
        if shape is not None and len(shape) <= 1 and math.prod(shape) > MAX_FOLD_ELEMENTS:
            return False
    return True


def _small_constants(model: onnx.ModelProto, max_elements: int) -> dict[str, np.ndarray]:
    values = {t.name: small_tensor_value(t, max_elements) for t in model.graph.initializer}
    return {name: value for name, value in values.items() if value is not None}


def small_constants(graph: onnx.GraphProto, max_elements: int, skip: frozenset[str] = frozenset()
                    ) -> dict[str, np.ndarray]:
    """Values of the graph's inline initializers (but those named in ``skip``) and Constant nodes of at most
    ``max_elements`` each (:func:`small_tensor_value`)."""
    tensors = [(t.name, t) for t in graph.initializer if t.name not in skip]
    tensors += [(n.output[0], a.t) for n in graph.node if n.op_type == "Constant" and n.output
                for a in n.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR]
    values = {name: small_tensor_value(tensor, max_elements) for name, tensor in tensors}
    return {name: value for name, value in values.items() if value is not None}


def range_length(start: float, limit: float, delta: float) -> int | None:
    """Elements of ``Range(start, limit, delta)`` (the ONNX formula, in Python ints: no int64 wrap-around), or None
    when it has no finite count."""
    if delta == 0 or not all(math.isfinite(v) for v in (start, limit, delta)):
        return None
    ratio = (limit - start) / delta
    return max(math.ceil(ratio), 0) if math.isfinite(ratio) else None


def small_tensor_value(tensor: onnx.TensorProto, max_elements: int) -> np.ndarray | None:
    """The values of an inline tensor of at most ``max_elements``, or None: external or weight-stripped data,
    negative dims, or data that does not fill the dims (a damaged or hostile file; the checks that refuse it
    with a message run elsewhere, this only decides what constant folding may read)."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL or any(d < 0 for d in tensor.dims):
        return None
    if math.prod(tensor.dims) > max_elements or tensor.data_type == onnx.TensorProto.STRING:
        return None
    try:
        return onnx.numpy_helper.to_array(tensor)
    except (ValueError, TypeError, KeyError, OverflowError, MemoryError):
        return None


def _evaluate(node: onnx.NodeProto, inputs: list[np.ndarray | None], opset: int) -> list[np.ndarray] | None:
    try:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return None  # a subgraph reads names of the outer graph, which one node cannot see
        fast = fast_eval.evaluate(node, inputs, opset)
        if fast is not None:
            return fast
        evaluator = _evaluator(_canonical_node(node), opset)
        feeds = {f"i{k}": value for k, (name, value) in enumerate(zip(node.input, inputs)) if name}
        return list(evaluator.run(None, feeds))
    except Exception:  # an op the reference runtime lacks: leave it to shape inference
        return None


def _canonical_node(node: onnx.NodeProto) -> bytes:
    """The node with its inputs named i0.., its outputs o0.. and no name: one key per op and attributes.

    A transformer's layers repeat the same shape arithmetic; building onnx.reference's evaluator (0.2 ms)
    once per distinct node instead of once per node saves most of constant folding's time."""
    canonical = onnx.NodeProto()
    canonical.CopyFrom(node)
    canonical.ClearField("name")
    canonical.ClearField("doc_string")
    canonical.ClearField("metadata_props")
    canonical.input[:] = [f"i{k}" if name else "" for k, name in enumerate(node.input)]
    canonical.output[:] = [f"o{k}" if name else "" for k, name in enumerate(node.output)]
    return canonical.SerializeToString()


@functools.lru_cache(maxsize=512)
def _evaluator(canonical: bytes, opset: int):
    """onnx.reference's evaluator of one node at the file's opset, built from a one-node model: built from the bare
    NodeProto, the reference takes the newest version of the op whatever ``opsets`` says, so an opset-11
    ``Unsqueeze`` (axes an attribute) failed as the opset-13 one and every shape computed from it stayed unknown
    (Swin-tiny exported at opset 11: 444 nodes of unknown shape, half its kernels lost)."""
    from onnx.reference import ReferenceEvaluator

    node = onnx.NodeProto.FromString(canonical)
    outputs = list(node.output)
    while outputs and not outputs[-1]:
        outputs.pop()
    if not all(outputs):
        raise ValueError("an unnamed output before a named one")  # not evaluated (the caller catches it)
    graph = onnx.helper.make_graph([node], "node", [onnx.helper.make_empty_tensor_value_info(n) for n in node.input if n],
                                   [onnx.helper.make_empty_tensor_value_info(n) for n in outputs])
    return ReferenceEvaluator(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)]))


def _value_shape(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]],
                 values: dict[str, np.ndarray]) -> tuple[int, ...] | None:
    """The first output's shape, worked out without evaluating the node, for ops that make big tensors."""
    if node.op_type not in _VALUE_SIZED_OPS:
        return None  # the common case: this runs for every node, in several passes

    def value(i: int) -> np.ndarray | None:
        return values.get(node.input[i]) if len(node.input) > i and node.input[i] else None

    try:
        if node.op_type == "ConstantOfShape" and value(0) is not None:
            return tuple(int(d) for d in np.asarray(value(0)).reshape(-1))
        if node.op_type == "ConstantFill":  # opset <= 8 (TorchScript's LSTM state at opset 7): ``shape`` or input_as_shape
            return _constant_fill_shape(node, value(0))
        if node.op_type == "Range" and all(value(i) is not None for i in range(3)):
            length = range_length(*(float(np.asarray(value(i)).reshape(-1)[0]) for i in range(3)))
            return None if length is None else (length,)
        # The input's own value gives its true shape; the stated one may be a stale declaration.
        source = tuple(value(0).shape) if value(0) is not None else shapes.get(node.input[0] if node.input else "")
        if node.op_type == "Expand" and source is not None and value(1) is not None:
            target = tuple(int(d) for d in np.asarray(value(1)).reshape(-1))
            return _broadcast([source, target])
        if node.op_type == "Tile" and source is not None and value(1) is not None:
            repeats = [int(r) for r in np.asarray(value(1)).reshape(-1)]
            return tuple(d * r for d, r in zip(source, repeats))
    except (ValueError, TypeError, OverflowError, IndexError):
        return None
    return None


def _constant_fill_shape(node: onnx.NodeProto, source: np.ndarray | None) -> tuple[int, ...] | None:
    """ConstantFill (an experimental op of opsets 1-8, no longer in ONNX): with input_as_shape its input's value is
    the shape, else the ``shape`` attribute; ``extra_shape`` is appended. Without input_as_shape, an input lends its
    shape, which only its value here gives."""
    attrs = {a.name: a for a in node.attribute}
    extra = tuple(int(d) for d in attrs["extra_shape"].ints) if "extra_shape" in attrs else ()
    if node.input and node.input[0]:
        if source is None:
            return None
        if "input_as_shape" in attrs and attrs["input_as_shape"].i:
            return tuple(int(d) for d in np.asarray(source).reshape(-1)) + extra
        return tuple(np.asarray(source).shape) + extra
    return tuple(int(d) for d in attrs["shape"].ints) + extra if "shape" in attrs else None


def _constant_fill_value(node: onnx.NodeProto, shape: tuple[int, ...]) -> np.ndarray:
    attrs = {a.name: a for a in node.attribute}
    dtype = onnx.helper.tensor_dtype_to_np_dtype(int(attrs["dtype"].i) if "dtype" in attrs else onnx.TensorProto.FLOAT)
    return np.full(shape, attrs["value"].f if "value" in attrs else 0.0, dtype=dtype)


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        dims = {s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0} - {1}
        out.append(max(dims) if dims else 1)
    return tuple(out)


def _output_bound(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]],
                  values: dict[str, np.ndarray]) -> int | None:
    """An upper bound on the elements of each output, from the inputs alone, or None when it cannot be known
    beforehand (the node is then not evaluated).

    A shape the file states for an output is no bound: a graph output declared [1] can be a Range(0, 1e8), and
    ONNX's inference keeps the declaration when it cannot check it (an op the file's opset does not have, a
    value-dependent size); evaluating it took 1.6 GB (fuzz case 53982 of seed 2)."""
    computed = _value_shape(node, shapes, values)
    if computed is not None:
        return math.prod(computed)
    if node.op_type in _VALUE_SIZED_OPS:
        return None
    sizes = [math.prod(values[name].shape) for name in node.input if name and name in values]
    if node.op_type in _SHRINKING_OPS:
        return sum(sizes)
    if node.op_type in _BROADCAST_OPS or node.op_type in ELEMENTWISE_FLOPS:
        return math.prod(_broadcast([tuple(values[n].shape) for n in node.input if n and n in values]) or ())
    if node.op_type in _PRODUCT_BOUNDED_OPS:
        return math.prod(sizes)
    return None


def _constant_outputs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]], elem_types: dict[str, int],
                      values: dict[str, np.ndarray], opset: int) -> list[np.ndarray] | None:
    """The node's outputs when they follow from constants and static shapes alone, else None."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type in ("Shape", "CastLike") or all(name in values for name in node.input if name):
        bound = _output_bound(node, shapes, values)
        if bound is None or bound > MAX_FOLD_ELEMENTS:
            return None
    if node.op_type == "ConstantFill":
        shape = _value_shape(node, shapes, values)
        return None if shape is None or any(d < 0 for d in shape) else [_constant_fill_value(node, shape)]
    if node.op_type == "Shape" and node.input[0] in shapes:
        dims = np.array(shapes[node.input[0]], dtype=np.int64)
        attrs = {a.name: a.i for a in node.attribute}
        return [dims[attrs.get("start", 0):attrs.get("end", len(dims))]]
    if node.op_type == "CastLike" and node.input[0] in values and node.input[1] in elem_types:
        # The second input only lends its element type (often a graph input, whose values are unknown).
        return [values[node.input[0]].astype(onnx.helper.tensor_dtype_to_np_dtype(elem_types[node.input[1]]))]
    if all(name in values for name in node.input if name):
        return _evaluate(node, [values.get(name) for name in node.input], opset)
    return None


@dataclass
class _Known:
    """What is known about the values of a graph while completing its shapes."""

    shapes: dict[str, tuple[int, ...]]
    elem_types: dict[str, int]
    values: dict[str, np.ndarray] = field(default_factory=dict)  # small constant values
    computed: dict[str, onnx.ValueInfoProto] = field(default_factory=dict)  # outputs evaluated here
    folded: set[int] = field(default_factory=set)  # nodes whose outputs are all in ``values``
    too_big: dict[str, int] = field(default_factory=dict)  # outputs left unevaluated: name -> elements

    def learn(self, inferred: onnx.ModelProto) -> int:
        """Take the shapes of an inferred model; returns how many were new."""
        shapes, elem_types = _known_types(inferred)
        new = len(shapes.keys() - self.shapes.keys())
        self.shapes.update(shapes)
        self.elem_types.update(elem_types)
        return new


def _fold_constants(model: onnx.ModelProto, known: _Known, opset: int, max_elements: int) -> int:
    """Evaluate the nodes whose outputs follow from constants and known shapes; returns how many."""
    evaluated = 0
    # e.g. log(0) or a cast of -inf while building masks. np.errstate is local to this thread (a context variable);
    # warnings.catch_warnings() swaps the process-wide filter list, which under a host's thread pool once left
    # ("ignore", Warning) installed for good (audit ua43c, finding 2).
    with np.errstate(all="ignore"):
        for index, node in enumerate(model.graph.node):
            if index in known.folded or all(name in known.computed for name in node.output if name):
                continue
            results = _constant_outputs(node, known.shapes, known.elem_types, known.values, opset)
            if results is None:
                _note_too_big(node, known)
                continue
            results = [np.asarray(result) for result in results]
            if any(_not_a_tensor(result) for result in results):
                continue  # an optional's None or a sequence: no tensor value, left to shape inference
            evaluated += 1
            for name, result in zip(node.output, results):
                if result.size <= max_elements:
                    known.values[name] = result
                known.shapes[name] = result.shape
                known.elem_types[name] = onnx.helper.np_dtype_to_tensor_dtype(result.dtype)
                known.computed[name] = onnx.helper.make_tensor_value_info(name, known.elem_types[name], result.shape)
            if all(name in known.values for name in node.output if name):
                known.folded.add(index)
    return evaluated


def _not_a_tensor(result: np.ndarray) -> bool:
    """An object array that holds something else than strings (None, nested sequences): no ONNX tensor."""
    return result.dtype == object and not all(isinstance(v, (str, bytes)) for v in result.flat)


def _note_too_big(node: onnx.NodeProto, known: _Known) -> None:
    """A constant too big to evaluate: record its shape (when it follows from known values), not its value."""
    if not node.output or not node.output[0] or not all(name in known.values for name in node.input if name):
        return
    shape = _value_shape(node, known.shapes, known.values)
    bound = _output_bound(node, known.shapes, known.values)
    if bound is None or bound <= MAX_FOLD_ELEMENTS:
        return
    name = node.output[0]
    known.too_big[name] = bound
    if shape is not None and any(d >= 2**63 for d in shape):
        raise LilouInputError(f"{node.op_type} {node.name or name!r} makes a tensor of shape {list(shape)}: a dimension "
                              "of 2^63 or more cannot exist (ONNX dims are int64); the file is malformed")
    if shape is not None and name not in known.computed and all(d >= 0 for d in shape):
        elem_type = _output_elem_type(node, known)
        if elem_type:
            known.shapes[name] = shape
            known.computed[name] = onnx.helper.make_tensor_value_info(name, elem_type, shape)


def _output_elem_type(node: onnx.NodeProto, known: _Known) -> int:
    if node.op_type == "ConstantOfShape":
        for attr in node.attribute:
            if attr.name == "value":
                return attr.t.data_type
        return onnx.TensorProto.FLOAT
    if node.op_type == "ConstantFill":
        dtype = next((a.i for a in node.attribute if a.name == "dtype"), 0)
        return int(dtype) or onnx.TensorProto.FLOAT
    source = node.input[0] if node.op_type in ("Range", "Expand", "Tile") else ""
    return known.elem_types.get(source, 0)


def _infer_folded(model: onnx.ModelProto, known: _Known) -> onnx.ModelProto:
    """Shape inference on a copy of ``model`` whose folded nodes are replaced by their values."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.ClearField("node")
    probe.graph.node.extend(n for i, n in enumerate(model.graph.node) if i not in known.folded)
    for node in probe.graph.node:  # inference never reads them; the dynamo exporter's stack traces are most of a file
        node.ClearField("metadata_props")
    folded = _folded_outputs(model, known)
    probe.graph.initializer.extend(onnx.numpy_helper.from_array(known.values[name], name) for name in folded)
    # Symbolic dims from an earlier pass (``unk__14``) would stick: ONNX inference keeps a stated
    # dim_param over the value it could now infer. Keep only fully static shapes.
    static = [v for v in model.graph.value_info if v.name not in known.computed and _static_shape(v.type) is not None]
    probe.graph.ClearField("value_info")
    probe.graph.value_info.extend(static)
    probe.graph.value_info.extend(info for name, info in known.computed.items() if name not in folded)
    return onnx.shape_inference.infer_shapes(probe, data_prop=data_propagation_is_safe(probe))


def _folded_outputs(model: onnx.ModelProto, known: _Known) -> list[str]:
    return [name for i in sorted(known.folded) for name in model.graph.node[i].output if name]


#: Rounds of folding and inference :func:`complete_shapes` runs at most; it stops as soon as a round learns nothing.
#: Files of opset < 13 need about one per block: ONNX's inference does not propagate the values of Shape-1 there,
#: so a block whose reshape reads the shape of the block before waits for the round that learned it (PoolFormer-S12
#: at opset 11: 17 rounds; files of opset >= 13 need one or two).
MAX_ROUNDS = 64


def values_of(inferred: onnx.ModelProto, names: Iterable[str], max_rounds: int = 8) -> dict[str, np.ndarray]:
    """The values of ``names`` that follow from constants and the static shapes of an inferred model (an ``If``'s
    condition written as ``x.size(0) > 1``), by the folding :func:`complete_shapes` runs; others are left out."""
    opset = next((o.version for o in inferred.opset_import if o.domain in ("", "ai.onnx")), 18)
    known = _Known(*_known_types(inferred))
    known.values = _small_constants(inferred, MAX_VALUE_ELEMENTS)
    wanted = set(names)
    for _ in range(max_rounds):
        if wanted <= known.values.keys() or _fold_constants(inferred, known, opset, MAX_VALUE_ELEMENTS) == 0:
            break
    return {name: known.values[name] for name in wanted if name in known.values}


def complete_shapes(model: onnx.ModelProto, max_elements: int = MAX_VALUE_ELEMENTS, max_rounds: int = MAX_ROUNDS,
                    notes: list[str] | None = None, inferred: bool = False,
                    evaluated: dict[str, int] | None = None) -> onnx.ModelProto:
    """Give every node output a static shape in ``value_info`` (in place; returns ``model``).

    The dynamo exporter records the shape of each aten call's result, but not of the
    helper values inside a decomposition, e.g. the zero bias it builds for a Conv
    without bias as ``Expand(CastLike(0), Expand(Shape(weight)[0:1], [1]))``, or the
    slice bounds of ``torch.roll``. ONNX shape inference cannot recover all of those:
    it propagates values through few ops (not Expand, not Mod). They depend only on
    constants and static shapes, so they are evaluated here, node by node, with the
    ONNX reference runtime (inputs: Constant nodes, small initializers, ``Shape`` of
    tensors of known shape, earlier results). Shape inference then runs on a copy in
    which those nodes are replaced by their values, which may reveal more shapes to
    evaluate from; repeat until nothing changes. The graph itself is not changed,
    only ``value_info``. The model must be weight-free or small (shape inference
    serialises it). ``inferred=True`` says that ``model`` already went through ONNX's
    shape inference with data propagation, which is then not run on it again. ``evaluated``, when given,
    receives the element count of every tensor evaluated here or left unevaluated as too big (what this
    completion's outcome depends on, :mod:`lilou.graph.batch_series`).
    """
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 18)
    if not inferred:
        model_types = onnx.shape_inference.infer_shapes(model, data_prop=data_propagation_is_safe(model))
    known = _Known(*_known_types(model if inferred else model_types))
    known.values = _small_constants(model, max_elements)
    result = model
    for _ in range(max_rounds):
        stated = len(known.computed)
        count = _fold_constants(model, known, opset, max_elements)
        if count == 0 and len(known.computed) == stated and result is not model:
            break  # the probe would be the last round's again: its inference cannot say more
        result = _infer_folded(model, known)
        if known.learn(result) == 0 and count == 0:
            break
    if notes is not None and known.too_big:
        shown = ", ".join(f"{name} ({elements:,} elements)" for name, elements in list(known.too_big.items())[:3])
        notes.append(f"{len(known.too_big)} constant(s) above {MAX_FOLD_ELEMENTS:,} elements were not evaluated "
                     f"({shown}{' ...' if len(known.too_big) > 3 else ''}): their values are unknown, shapes only")
    if evaluated is not None:
        evaluated.update({name: math.prod(known.shapes[name]) for name in known.computed if name in known.shapes})
        evaluated.update(known.too_big)
    folded = _folded_outputs(model, known)
    model.graph.ClearField("value_info")
    model.graph.value_info.extend(result.graph.value_info)
    model.graph.value_info.extend(v for v in result.graph.output if v.type.tensor_type.HasField("shape"))
    model.graph.value_info.extend(known.computed[name] for name in folded)
    return model
