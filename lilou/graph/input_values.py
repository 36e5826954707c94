"""Run-time inputs whose value the user states (``--value use_cache_branch=false``), written as constants.

Shapes say how much work a model does, but a few inputs are flags or settings whose *value* picks the work: an
``If`` on Optimum's ``use_cache_branch`` runs the prompt pass or the cached decode step, Silero VAD's ``sr``
picks the 8 kHz or the 16 kHz path. Without a value Lilou prices the larger branch of such an ``If`` and says so
(:mod:`lilou.graph.branches`); with one, the input becomes an initializer holding it, so the condition is a
constant (or follows from one by constant folding) and the branch that runs is priced exactly. The input is still
fed at run time: the ops that read its value (Silero's ``sr`` in a Mul and a Cast) stay kernels, not constants
(:func:`bound_value_names`). Values are small by design: a flag, a size, a few settings, never a tensor of data.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from lilou.errors import LilouInputError
from lilou.graph.names import protobuf_text
from lilou.graph.shapes import runtime_inputs

#: The most elements one ``--value`` may set: a flag or a setting, not a tensor of data.
MAX_VALUE_ELEMENTS = 64
#: The ``doc_string`` of an initializer that holds a stated value: it is still fed at run time, so the ops that read
#: it are kernels, not constants (:func:`bound_value_names`).
BOUND_VALUE_DOC = "lilou --value: a run-time input with a stated value"

Value = bool | int | float
_SPEC = re.compile(r"^\s*([^=\s]+)\s*=\s*(.+?)\s*$")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def parse_input_values(specs: Sequence[str] | None) -> dict[str, tuple[Value, ...]]:
    """Parse ``NAME=V`` or ``NAME=V1,V2,...`` strings (``--value``): ``true``/``false`` or numbers."""
    values: dict[str, tuple[Value, ...]] = {}
    for spec in specs or ():
        match = _SPEC.match(spec)
        if not match:
            raise LilouInputError(f"cannot parse --value {spec[:80]!r}; expected NAME=VALUE such as "
                                  "use_cache_branch=false or sr=16000 (NAME=V1,V2,... for a short list)")
        name, text = match.groups()
        if name in values:  # the last one was kept without a word (audit ua43d, finding 8)
            raise LilouInputError(f"--value {name} given twice; give each input (or loop) one --value")
        items = [item.strip() for item in text.split(",")]
        if len(items) > MAX_VALUE_ELEMENTS:
            raise LilouInputError(f"--value {name}: {len(items)} values; --value sets a flag or a setting of at "
                                  f"most {MAX_VALUE_ELEMENTS} elements, not a tensor of data")
        values[name] = tuple(_parse_item(name, item) for item in items)
    return values


def _parse_item(name: str, item: str) -> Value:
    lowered = item.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if not _NUMBER.match(item):
        raise LilouInputError(f"--value {name}: {item[:40]!r} is not true, false or a number")
    number = float(item)
    if not math.isfinite(number):
        raise LilouInputError(f"--value {name}: {item[:40]!r} is not a finite number")
    return int(item) if re.fullmatch(r"[+-]?\d+", item) else number


def check_input_values(values: Mapping[str, Sequence[Value]] | None) -> dict[str, tuple[Value, ...]]:
    """``values`` as the API takes them (``{"use_cache_branch": [False]}``, or a bare value; numpy arrays and
    scalars too), checked as :func:`parse_input_values` checks the command line."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise LilouInputError(f"values must map input names to values, got {type(values).__name__}")
    checked: dict[str, tuple[Value, ...]] = {}
    for name, given in values.items():
        if isinstance(given, np.ndarray):
            given = given.reshape(-1).tolist()
        items = tuple(given) if isinstance(given, (list, tuple)) else (given,)
        if not isinstance(name, str) or not name:
            raise LilouInputError(f"values: {name!r} is not an input name")
        if not items or len(items) > MAX_VALUE_ELEMENTS:
            raise LilouInputError(f"values[{name!r}]: give 1 to {MAX_VALUE_ELEMENTS} values, got {len(items)}")
        checked[name] = tuple(_checked_item(name, item) for item in items)
    return checked


def _checked_item(name: str, item: object) -> Value:
    """A Python bool or a finite number (a numpy one as the Python one); anything else is an input error."""
    if isinstance(item, np.bool_ | np.integer | np.floating):
        item = item.item()
    if isinstance(item, bool):
        return item
    if not isinstance(item, (int, float)):
        raise LilouInputError(f"values[{name!r}]: {str(item)[:40]!r} is a {type(item).__name__}; give a bool or a "
                              "number, e.g. False or 16000")
    if isinstance(item, float) and not math.isfinite(item):  # an int is finite (isfinite of 10**400 overflowed)
        raise LilouInputError(f"values[{name!r}]: {item} is not a finite number")
    return item


def bind_input_values(model: onnx.ModelProto, values: Mapping[str, Sequence[Value]] | None,
                      shapes: Mapping[str, Sequence[int]] | None = None) -> list[str]:
    """Write each input of ``values`` as an initializer holding its value (in place); one note per input.

    The input's shape is its own where the file fixes it, else ``shapes[name]`` (``--shape``), else the values'
    count for an input of rank 0 or 1. Raises a one-line error for an unknown input, a type that holds no number,
    a value the type cannot hold (2.5 for an integer, 300 for a uint8) or a count that does not fill the shape."""
    values = check_input_values(values)
    if not values:
        return []
    inputs = {value.name: value for value in runtime_inputs(model)}
    unknown = sorted(set(values) - set(inputs))
    if unknown:
        raise LilouInputError(f"--value names unknown input(s) {', '.join(unknown)}; the model's inputs are: "
                              f"{', '.join(protobuf_text(name) for name in inputs)}")
    notes = []
    for name, items in values.items():
        array = _as_array(inputs[name], items, (shapes or {}).get(name))
        tensor = numpy_helper.from_array(array, name)
        tensor.doc_string = BOUND_VALUE_DOC
        model.graph.initializer.append(tensor)
        if model.ir_version >= 4:  # older files list every initializer among the inputs as well
            model.graph.input.remove(inputs[name])
        shown = ", ".join(str(item).lower() if isinstance(item, bool) else str(item) for item in items)
        notes.append(f"input {name!r} is set to {shown} (--value): what reads it (an If's condition, a size) is "
                     "priced for that value")
    return notes


def _as_array(value: onnx.ValueInfoProto, items: tuple[Value, ...], shape: Sequence[int] | None) -> np.ndarray:
    name, tensor_type = value.name, value.type.tensor_type
    if not value.type.HasField("tensor_type"):
        raise LilouInputError(f"--value {name}: the input is not a tensor (a sequence or a map), so it holds no value")
    element = tensor_type.elem_type
    try:
        dtype: np.dtype | None = np.dtype(helper.tensor_dtype_to_np_dtype(element))
    except (KeyError, TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.kind not in "biuf":
        kind = onnx.TensorProto.DataType.Name(element) if element in onnx.TensorProto.DataType.values() else element
        raise LilouInputError(f"--value {name}: the input holds {kind} elements, not booleans or numbers")
    dims = _shape_of(value, len(items), shape)
    if math.prod(dims) != len(items):
        count = math.prod(dims)
        raise LilouInputError(f"--value {name}: the input's shape {'x'.join(map(str, dims)) or '(a scalar)'} holds "
                              f"{count} element{'s' if count != 1 else ''}, got {len(items)} values")
    for item in items:
        _check_fits(name, dtype, item)
    return np.array(items, dtype=dtype).reshape(dims)


def _shape_of(value: onnx.ValueInfoProto, count: int, shape: Sequence[int] | None) -> tuple[int, ...]:
    if shape is not None:
        return tuple(int(d) for d in shape)
    tensor_type = value.type.tensor_type
    if not tensor_type.HasField("shape"):
        return (count,) if count > 1 else ()
    dims = tensor_type.shape.dim
    if all(d.HasField("dim_value") for d in dims):
        return tuple(d.dim_value for d in dims)
    if len(dims) == 1:
        return (count,)
    raise LilouInputError(f"--value {value.name}: the input's shape has dynamic dimensions; give it with --shape "
                          f"{value.name}=D1xD2... as well")


def _check_fits(name: str, dtype: np.dtype, item: Value) -> None:
    if dtype.kind == "b":
        if item not in (True, False, 0, 1):
            raise LilouInputError(f"--value {name}: the input is boolean; give true or false, got {shown_value(item)}")
        return
    if dtype.kind in "iu":
        if isinstance(item, float) and not item.is_integer():
            raise LilouInputError(f"--value {name}: the input holds {dtype.name} integers; got {item}")
        limits = np.iinfo(dtype)
        if not limits.min <= int(item) <= limits.max:
            raise LilouInputError(f"--value {name}: {shown_value(item)} does not fit the input's {dtype.name} "
                                  f"({limits.min} to {limits.max})")
        return
    if abs(item) > float(np.finfo(dtype).max):  # an int compared exactly: float(10**400) overflowed
        raise LilouInputError(f"--value {name}: {shown_value(item)} does not fit the input's {dtype.name}")


def shown_value(item: Value) -> str:
    """A value as an error shows it: a 400-digit integer (JSON has no bound) by its first digits and its length."""
    text = str(item)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text.lstrip('-'))} digits)"


def bound_value_names(graph: onnx.GraphProto) -> set[str]:
    """The inputs :func:`bind_input_values` wrote as initializers: read by value for shapes and branches, but fed
    at run time, so what reads them runs on the GPU as it would without the value stated."""
    return {tensor.name for tensor in graph.initializer if tensor.doc_string == BOUND_VALUE_DOC}
