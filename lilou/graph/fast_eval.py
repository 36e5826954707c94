"""A numpy fast path for the few ops that make up shape arithmetic, before ``onnx.reference``.

Constant folding (:mod:`lilou.graph.shape_completion`) evaluates hundreds of small nodes per model, nearly all
Constant, Concat, Reshape, Unsqueeze, Gather, Slice, Cast ... Running each through ``onnx.reference`` costs a
node copy, a serialisation and the evaluator's own checks (about 0.1 ms a node), and importing it 30-50 ms.
Each function here is the numpy code of that op's class in ``onnx.reference.ops`` (onnx 1.23), so it
gives the same array: same dtype, shape and values. Only plain cases are taken: all inputs given, one output,
the attributes the op's reference class reads with the types the spec declares, numeric dtypes. Anything else,
and any exception, returns None and the caller asks the reference evaluator, which then decides (evaluates or
fails) as before. ``tests/test_shape_completion.py`` checks every node this handles in real exports against
``onnx.reference``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

_A = onnx.AttributeProto
# Input dtypes taken: bool, ints, IEEE floats (not strings, objects, ml_dtypes' bfloat16 and float8s).
_PLAIN_DTYPES = frozenset(np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
                                               np.uint16, np.uint32, np.uint64, np.float16, np.float32, np.float64))
# ONNX element types whose numpy dtype is a plain one (``onnx.helper.tensor_dtype_to_np_dtype``).
_PLAIN_ELEM_TYPES = {t: np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t)) for t in (
    onnx.TensorProto.BOOL, onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32,
    onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32,
    onnx.TensorProto.UINT64, onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)}

Attrs = dict[str, onnx.AttributeProto]


class _NotHandled(Exception):
    """A case the reference evaluator must decide."""


@dataclass(frozen=True)
class _Op:
    run: Callable[[list[np.ndarray], Attrs], np.ndarray]
    inputs: tuple[int, int]  # fewest and most inputs
    attributes: dict[str, int]  # name -> AttributeProto type, the only ones accepted
    since: int = 1  # the first opset whose reference class this mirrors
    attribute_since: tuple[tuple[str, int], ...] = ()  # attributes that exist from a later opset on


def evaluate(node: onnx.NodeProto, inputs: list[np.ndarray | None], opset: int) -> list[np.ndarray] | None:
    """The node's outputs as ``onnx.reference`` gives them, or None when this path does not take the node."""
    op = _OPS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    if op is None or opset < op.since or len(node.output) != 1 or not node.output[0]:
        return None
    if not op.inputs[0] <= len(inputs) <= op.inputs[1] or not all(node.input):
        return None
    if any(not isinstance(value, np.ndarray) or value.dtype not in _PLAIN_DTYPES for value in inputs):
        return None
    attrs = {}
    for attr in node.attribute:
        if attr.ref_attr_name or op.attributes.get(attr.name) != attr.type or attr.name in attrs:
            return None
        attrs[attr.name] = attr
    if any(name in attrs and opset < since for name, since in op.attribute_since):
        return None  # an older class of the op, which the reference refuses with this attribute
    try:
        return [np.asarray(op.run(inputs, attrs))]
    except Exception:  # noqa: BLE001 - whatever the case, the reference evaluator decides it
        return None


def _same_dtype(*values: np.ndarray) -> None:
    """The reference's binary ops refuse inputs of two dtypes."""
    if any(value.dtype != values[0].dtype for value in values):
        raise _NotHandled


def _tensor(attr: onnx.AttributeProto) -> np.ndarray:
    """A TENSOR attribute as OpRun converts it (to_array)."""
    tensor = attr.t
    if tensor.data_location != onnx.TensorProto.DEFAULT or tensor.data_type not in _PLAIN_ELEM_TYPES:
        raise _NotHandled
    return onnx.numpy_helper.to_array(tensor)


# Constant_12's other attributes: OpRun's conversion of the attribute, then np.array in this dtype.
_CONSTANT_LISTS = {
    "value_int": (lambda attr: int(attr.i), np.int64),
    "value_ints": (lambda attr: [int(i) for i in attr.ints], np.int64),
    "value_float": (lambda attr: np.float32(attr.f), np.float32),
    "value_floats": (lambda attr: [np.float32(f) for f in attr.floats], np.float32),
}


def _constant(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    if len(attrs) != 1:  # none, or several (the reference then picks one by its own order)
        raise _NotHandled
    name, attr = next(iter(attrs.items()))
    if name == "value":
        return _tensor(attr)
    convert, dtype = _CONSTANT_LISTS[name]
    return np.array(convert(attr), dtype=dtype)


def _concat(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    axis = attrs["axis"].i
    if any(value.ndim == 0 or not -value.ndim <= axis < value.ndim for value in inputs):
        raise _NotHandled
    return np.concatenate(inputs, axis)


def _reshape(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, shape = inputs  # reshape_reference_implementation
    new_shape = np.copy(shape)
    if "allowzero" not in attrs or attrs["allowzero"].i != 1:
        zeros = np.where(shape == 0)
        new_shape[zeros] = np.array(data.shape)[zeros]
    return np.reshape(data, new_shape)


def _unsqueeze(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, axes = inputs  # Unsqueeze_13 with 1-D axes
    if axes.ndim != 1:
        raise _NotHandled
    return np.expand_dims(data, axis=tuple(axes))


def _squeeze(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    if len(inputs) == 1:  # Squeeze_13
        return np.squeeze(inputs[0])
    data, axes = inputs
    if axes.ndim != 1:
        raise _NotHandled
    return np.squeeze(data, axis=tuple(axes))


def _identity(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    return inputs[0].copy()


def _cast(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    dtype = _PLAIN_ELEM_TYPES.get(attrs["to"].i)  # cast_to: astype for every type but strings and float8s
    if dtype is None:
        raise _NotHandled
    return inputs[0].astype(dtype)


def _gather(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    x, indices = inputs
    if indices.dtype.kind not in "iu":
        raise _NotHandled
    if not x.flags["C_CONTIGUOUS"]:
        x = np.ascontiguousarray(x)
    if not indices.flags["C_CONTIGUOUS"]:
        indices = np.ascontiguousarray(indices)
    return np.take(x, indices, axis=attrs["axis"].i if "axis" in attrs else 0)


def _slice(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, starts, ends = inputs[:3]  # op_slice._slice
    axes = inputs[3] if len(inputs) > 3 else None
    steps = inputs[4] if len(inputs) > 4 else None
    if starts.ndim == 0:
        starts = np.array([starts])
    if ends.ndim == 0:
        ends = np.array([ends])
    if axes is None:
        if steps is None:
            slices = [slice(s, e) for s, e in zip(starts, ends)]
        else:
            slices = [slice(s, e, d) for s, e, d in zip(starts, ends, steps)]
    else:
        slices = [slice(0, a) for a in data.shape]
        if steps is None:
            for s, e, a in zip(starts, ends, axes):
                slices[a] = slice(s, e)
        else:
            for s, e, a, d in zip(starts, ends, axes, steps):
                slices[a] = slice(s, e, d)
    return data[tuple(slices)]


def _binary(function: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    """OpRunBinaryNumpy: one dtype in and out."""
    def run(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
        _same_dtype(*inputs)
        result = np.asarray(function(*inputs))
        if result.dtype != inputs[0].dtype:
            raise _NotHandled
        return result
    return run


def _comparison(function: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    """OpRunBinaryComparison and And: one dtype in, bool out."""
    def run(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
        _same_dtype(*inputs)
        return function(*inputs)
    return run


def _integer_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if not issubclass(x.dtype.type, np.integer):  # Div: numpy's division for floats, C's truncation for ints
        return np.divide(x, y)
    quotient = np.floor_divide(x, y)
    remainder = np.remainder(x, y)
    needs_adjust = (remainder != 0) & ((x < 0) ^ (y < 0))
    return quotient + needs_adjust.astype(quotient.dtype)


def _where(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    condition, x, y = inputs
    if x.dtype != y.dtype:
        raise _NotHandled
    return np.where(condition, x, y).astype(x.dtype)


def _constant_of_shape(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    if "value" not in attrs:
        value = np.array(0, dtype=np.float32)
    else:
        filler = _tensor(attrs["value"])
        if filler.size != 1:
            raise _NotHandled
        value = filler.flat[0]
    if inputs[0].ndim != 1:
        raise _NotHandled
    return np.full(tuple(inputs[0]), value)


def _range(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    starts, ends, steps = inputs
    if starts.dtype == np.float16:  # computed in a stash type by the reference: left to it
        raise _NotHandled
    return np.arange(starts.item(), ends.item(), steps.item()).astype(starts.dtype)


def _expand(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, shape = inputs
    return data * np.ones(shape, dtype=data.dtype)


def _transpose(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    perm = list(attrs["perm"].ints) if "perm" in attrs else []
    if not perm:
        return np.transpose(inputs[0])
    if len(perm) != inputs[0].ndim:
        raise _NotHandled
    return np.transpose(inputs[0], axes=perm)


def _not(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    return np.logical_not(inputs[0])


def _neg(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    result = np.asarray(np.negative(inputs[0]))
    if result.dtype != inputs[0].dtype:  # OpRunUnaryNum refuses a change of dtype
        raise _NotHandled
    return result


def _cumsum(inputs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    if any(attrs[name].i for name in ("exclusive", "reverse") if name in attrs):
        raise _NotHandled  # the plain running sum only
    x, axis = inputs[0], np.asarray(inputs[1])
    if axis.ndim != 0:
        raise _NotHandled
    return np.cumsum(x, axis=axis, dtype=x.dtype)


_INT = _A.INT
_OPS: dict[str, _Op] = {
    "Constant": _Op(_constant, (0, 0), {"value": _A.TENSOR, "value_int": _INT, "value_ints": _A.INTS,
                                        "value_float": _A.FLOAT, "value_floats": _A.FLOATS},
                    attribute_since=tuple((name, 12) for name in _CONSTANT_LISTS)),
    "Concat": _Op(_concat, (1, 1 << 31), {"axis": _INT}, since=4),
    "Reshape": _Op(_reshape, (2, 2), {"allowzero": _INT}, since=5, attribute_since=(("allowzero", 14),)),
    "Unsqueeze": _Op(_unsqueeze, (2, 2), {}, since=13),
    "Squeeze": _Op(_squeeze, (1, 2), {}, since=13),
    "Identity": _Op(_identity, (1, 1), {}),
    "Cast": _Op(_cast, (1, 1), {"to": _INT}, since=6),
    "Gather": _Op(_gather, (2, 2), {"axis": _INT}),
    "Slice": _Op(_slice, (3, 5), {}, since=10),
    "Add": _Op(_binary(np.add), (2, 2), {}, since=7),
    "Sub": _Op(_binary(np.subtract), (2, 2), {}, since=7),
    "Mul": _Op(_binary(np.multiply), (2, 2), {}, since=7),
    "Div": _Op(_binary(_integer_div), (2, 2), {}, since=7),
    "Max": _Op(_binary(np.maximum), (2, 2), {}, since=8),
    "Min": _Op(_binary(np.minimum), (2, 2), {}, since=8),
    "Equal": _Op(_comparison(np.equal), (2, 2), {}, since=7),
    "Less": _Op(_comparison(np.less), (2, 2), {}, since=7),
    "Greater": _Op(_comparison(np.greater), (2, 2), {}, since=7),
    "LessOrEqual": _Op(_comparison(np.less_equal), (2, 2), {}, since=12),
    "GreaterOrEqual": _Op(_comparison(np.greater_equal), (2, 2), {}, since=12),
    "And": _Op(_comparison(np.logical_and), (2, 2), {}, since=7),
    "Or": _Op(_comparison(np.logical_or), (2, 2), {}, since=7),
    "Not": _Op(_not, (1, 1), {}),
    "Neg": _Op(_neg, (1, 1), {}, since=6),
    "CumSum": _Op(_cumsum, (2, 2), {"exclusive": _INT, "reverse": _INT}, since=11),
    "Where": _Op(_where, (3, 3), {}, since=9),
    "ConstantOfShape": _Op(_constant_of_shape, (1, 1), {"value": _A.TENSOR}, since=9),
    "Range": _Op(_range, (3, 3), {}, since=11),
    "Expand": _Op(_expand, (2, 2), {}, since=8),
    "Transpose": _Op(_transpose, (1, 1), {"perm": _A.INTS}),
}
