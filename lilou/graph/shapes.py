"""Input-shape overrides and ONNX shape inference.

ONNX's own shape inference (``onnx.shape_inference`` with data propagation, so
``Shape -> Gather -> Concat -> Reshape`` chains resolve) is used rather than a
hand-written pass: it is maintained with the operator set itself.
"""
from __future__ import annotations

import ast
import contextvars
import functools
import math
import re
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import shape_inference

from lilou.errors import LilouInputError
from lilou.graph import guarded_inference
from lilou.graph.batch_axis import onnx_batch_axes, onnx_unbatched_inputs
from lilou.graph.legacy_types import needs_legacy_types, type_legacy_outputs
from lilou.graph.names import protobuf_text
from lilou.graph.shape_completion import complete_shapes, data_propagation_is_safe

#: The largest dimension and element count Lilou accepts: far above any real model, far below int64.
MAX_DIM = 1 << 40
MAX_ELEMENTS = 1 << 48

#: An Einsum equation as the ONNX spec writes it: letters, commas, ellipses, spaces, at most one arrow.
#: ONNX's shape inference loops forever on some other characters (e.g. 'ab?' with two inputs).
_EINSUM_EQUATION = re.compile(r"^[A-Za-z,.\s]*(->[A-Za-z.\s]*)?$")

#: Named dimensions a --shape may bind, and the expressions of them a file may write (Optimum's
#: ``past_sequence_length + sequence_length``): names, integers, + - * and // only, short.
_DIMENSION_NAME = re.compile(r"[A-Za-z_][\w.\-]{0,99}")
_MAX_EXPRESSION = 200

_SHAPE_SPEC = re.compile(r"^\s*([^=\s]+)\s*=\s*(\d+(?:\s*[xX,]\s*\d+)*)\s*$")


def parse_shape_overrides(specs: Sequence[str] | None) -> dict[str, tuple[int, ...]]:
    """Parse ``NAME=D1xD2x...`` strings (``--shape``) into ``{name: dims}``."""
    overrides: dict[str, tuple[int, ...]] = {}
    for spec in specs or ():
        match = _SHAPE_SPEC.match(spec)
        if not match:
            raise LilouInputError(f"cannot parse --shape {spec!r}; expected NAME=D1xD2x... such as input_ids=1x128")
        dims = tuple(int(d) for d in re.split(r"\s*[xX,]\s*", match.group(2)))
        _check_dims(dims, repr(spec[:80]))
        overrides[match.group(1)] = dims
    return overrides


def _is_integer(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _check_dims(dims: tuple[int, ...], what: str) -> None:
    if any(d <= 0 for d in dims):
        raise LilouInputError(f"--shape {what}: every dimension must be a positive integer (Lilou prices no "
                              "empty tensor; for an empty KV cache, the prompt pass, bind 1: one cached token "
                              "more)")
    if any(d > MAX_DIM for d in dims):
        raise LilouInputError(f"--shape {what}: a dimension above 2^40 is not a real model input; "
                              "use a realistic size")
    if math.prod(dims) > MAX_ELEMENTS:
        raise LilouInputError(f"--shape {what}: {math.prod(dims):.3g} elements is above Lilou's limit "
                              "of 2^48 elements per tensor; use a realistic size")


def checked_shapes(shapes: Mapping[str, Sequence[int]] | None) -> dict[str, tuple[int, ...]]:
    """``shapes`` as the Python API takes them (``{"input_ids": (8, 512)}``, ``{"sequence_length": [512]}``),
    checked as ``--shape`` is: a name, then positive integer sizes; anything else is a one-line input error."""
    if shapes is None:
        return {}
    if not isinstance(shapes, Mapping):
        raise LilouInputError(f"shapes must map input or dimension names to sizes, got {type(shapes).__name__}")
    checked = {}
    for name, dims in shapes.items():
        if not isinstance(name, str) or isinstance(dims, str | bytes) or not isinstance(dims, Sequence | np.ndarray) \
                or not all(_is_integer(d) for d in dims):
            raise LilouInputError(f"shapes[{str(name)[:80]!r}]: give a sequence of positive integer sizes, e.g. "
                                  f"(8, 512), got {str(dims)[:80]}")
        checked[name] = tuple(int(d) for d in dims)
        _check_dims(checked[name], f"{name[:80]}={'x'.join(map(str, checked[name]))[:80]}")
    return checked


def runtime_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs fed at run time (old files also list initializers as inputs)."""
    initializers = {t.name for t in model.graph.initializer}
    return [value for value in model.graph.input if value.name not in initializers]


def check_batch(batch: int) -> None:
    """A batch size is a positive integer up to ``MAX_DIM``; anything else is a one-line input error."""
    if not _is_integer(batch) or batch <= 0:
        raise LilouInputError(f"--batch must be a positive integer, got {repr(batch)[:80]}")
    if batch > MAX_DIM:
        raise LilouInputError(f"--batch {batch} is above 2^40, not a real batch size; use a realistic one")


def apply_input_shapes(model: onnx.ModelProto, batch: int | None = None,
                       shapes: Mapping[str, Sequence[int]] | None = None,
                       unbatched: frozenset[str] | None = None) -> None:
    """Set input dims in place: ``batch`` sets every batched input's batch dim (the leading one; the second of a
    time-major recurrent layer's inputs; not an input in ``unbatched``, by default
    :func:`lilou.graph.batch_axis.onnx_unbatched_inputs`: a weight fed as an input); ``shapes`` whole inputs
    (``{"input_ids": (8, 512)}``) or named dynamic dimensions (``{"sequence_length": (512,)}``: every dimension
    the file names so, or writes as an expression of it such as Optimum's ``past_sequence_length +
    sequence_length``, in every input). An input's name wins over a dimension's; ``batch`` and a named leading
    dimension must agree.

    Raises if a named input or dimension does not exist, a rank differs, or a dynamic dim is left unset.
    """
    if batch is not None:
        check_batch(batch)
    shapes = dict(shapes or {})  # checked by shape_model (checked_shapes), its one caller
    inputs = runtime_inputs(model)
    names = [protobuf_text(value.name) for value in inputs]
    dimensions = dimension_names_of(inputs)
    bound: dict[str, int] = {}
    for key, dims in shapes.items():
        if key not in names and key in dimensions:
            if len(dims) != 1:
                raise LilouInputError(f"--shape {key}: a named dimension takes one size, e.g. {key}=512")
            bound[key] = int(dims[0])
    unknown = sorted(set(shapes) - set(names) - set(bound))
    if unknown:
        constants = {t.name for t in model.graph.initializer} & {v.name for v in model.graph.input}
        if constants & set(unknown):
            shadowed = sorted(constants & set(unknown))
            raise LilouInputError(f"--shape {shadowed[0]}: the input has an initializer of the same name (its default "
                                  "value, as exporters list weights with keep_initializers_as_inputs), so it is priced "
                                  "as that constant and its shape is the initializer's; remove the initializer from "
                                  "the file to feed it at run time")
        named = f"; its named dimensions: {', '.join(sorted(dimensions))}" if dimensions else ""
        listed = f"the model's inputs are: {', '.join(names)}" if names else "the model has no run-time inputs"
        raise LilouInputError(f"--shape names unknown input(s) {', '.join(unknown)}; {listed}{named}")
    took_batch, pinned = False, []
    axes = onnx_batch_axes(model.graph)  # the batch is second in a time-major recurrent layer's inputs
    if unbatched is None and batch is not None:
        unbatched = frozenset(onnx_unbatched_inputs(model.graph, inputs))  # weights fed as inputs
    unbatched = unbatched or frozenset()
    if batch is not None:
        _bind_batch_names(inputs, axes, batch, bound, skip=unbatched | set(shapes))
    for value in inputs:
        dims = value.type.tensor_type.shape.dim
        axis = axes.get(value.name, 0)
        if value.name in shapes:
            wanted = shapes[value.name]
            if value.type.tensor_type.HasField("shape") and len(dims) != len(wanted):
                raise LilouInputError(f"--shape {value.name}: the input has rank {len(dims)}, got {len(wanted)} dims")
            _set_dims(value, wanted)
            pinned += [f"{value.name}={'x'.join(map(str, wanted))}"] if len(wanted) > axis and wanted[axis] != batch else []
            continue
        if bound and batch is not None and len(dims) > axis and dims[axis].dim_value <= 0 and dims[axis].dim_param:
            _check_batch_agrees(value.name, protobuf_text(dims[axis].dim_param), batch, bound)
        if bound:
            _bind_dimensions(value, bound)
        if batch is not None and len(dims) > axis and value.name not in unbatched:
            dims[axis].Clear()
            dims[axis].dim_value = batch
            took_batch = True
    if batch is not None and not took_batch and pinned:
        # every input's shape is given whole: --batch would set nothing, and the prediction be labelled with it
        raise LilouInputError(f"--batch {batch} sets no input: --shape gives {', '.join(pinned)} whole, with another "
                              "leading dimension; drop --batch, or give the shape at that batch")
    read = _names_read(model.graph)
    _require_static_inputs([value for value in inputs if value.name in read], dimensions)
    if batch is not None or shapes:
        # Intermediate and output shapes recorded by the exporter describe the old inputs
        # (or a symbolic batch); let inference derive them from the new ones.
        model.graph.ClearField("value_info")
        for value in model.graph.output:
            if value.type.HasField("tensor_type"):  # reaching into a sequence or map output made it a tensor (ZipMap)
                value.type.tensor_type.ClearField("shape")


def _bind_batch_names(inputs: Sequence[onnx.ValueInfoProto], axes: Mapping[str, int], batch: int,
                      bound: dict[str, int], skip: set[str] | frozenset[str]) -> None:
    """``--batch`` also names a size: the dimension name a batched input's batch axis is written with (``batch``)
    is that size wherever the file writes it, as ``--shape batch=N`` would set it. Silero VAD's ``state`` is ``[2,
    batch, 128]``: ``--batch`` left its ``batch`` unset (and set its 2), and the file was refused. A name ``--shape``
    bound to another size is refused as before (:func:`_check_batch_agrees`)."""
    for value in inputs:
        dims, axis = value.type.tensor_type.shape.dim, axes.get(value.name, 0)
        if value.name in skip or len(dims) <= axis or dims[axis].dim_value > 0:
            continue
        name = protobuf_text(dims[axis].dim_param)
        if _DIMENSION_NAME.fullmatch(name) and name not in bound:
            bound[name] = batch


def _check_batch_agrees(name: str, leading: str, batch: int, bound: Mapping[str, int]) -> None:
    """Refuse ``batch`` where the named dimensions set input ``name``'s leading dimension (``leading``) otherwise."""
    size = _dimension_value(leading, bound)
    if size is not None and size != batch:
        given = ", ".join(f"{key}={bound[key]}" for key in sorted(_dimension_names(leading) & set(bound)))
        raise LilouInputError(f"--batch {batch} and --shape {given} disagree: input {name}'s leading dimension is "
                              f"{leading[:80]!r}; give the batch once")


def dimension_names_of(inputs: Sequence[onnx.ValueInfoProto]) -> set[str]:
    """The names the inputs' dynamic dimensions are written with (a name, or the names in an expression)."""
    found: set[str] = set()
    for value in inputs:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_value <= 0 and dim.dim_param:
                found |= {name for name in _dimension_names(protobuf_text(dim.dim_param)) if _DIMENSION_NAME.fullmatch(name)}
    return found


def _bind_dimensions(value: onnx.ValueInfoProto, bound: Mapping[str, int]) -> None:
    """Set every dynamic dimension of ``value`` that ``bound`` determines."""
    for dim in value.type.tensor_type.shape.dim:
        if dim.dim_value > 0 or not dim.dim_param:
            continue
        size = _dimension_value(protobuf_text(dim.dim_param), bound)
        if size is None:
            continue
        if not 0 < size <= MAX_DIM:
            shown = size if size <= MAX_DIM else "more than 2^40"
            name = protobuf_text(dim.dim_param)[:80]
            raise LilouInputError(f"--shape: input {value.name!r}'s dimension {name!r} comes to {shown}; "
                                  "a dimension must be a positive integer up to 2^40")
        dim.Clear()
        dim.dim_value = size


def _dimension_names(expression: str) -> set[str]:
    """The names a dim_param is written with: itself, or those its arithmetic expression reads."""
    tree = _parse_dimension(expression)
    if tree is None:
        return {expression}
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def _parse_dimension(expression: str) -> ast.Expression | None:
    """``expression`` as an arithmetic expression of names and integers, or None (a plain or odd name).

    A name that holds a hyphen and no space (``batch-size``) is a name, as ``--shape batch-size=4`` writes it; read
    as ``batch - size`` it asked for two sizes and silently took their difference."""
    if len(expression) > _MAX_EXPRESSION or not re.fullmatch(r"[\w\s+\-*/()]+", expression):
        return None
    if _DIMENSION_NAME.fullmatch(expression):
        return None
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    allowed = (ast.Expression, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Name, ast.Load, ast.Constant)
    if not all(isinstance(node, allowed) for node in ast.walk(tree)):
        return None
    if any(isinstance(node, ast.Constant) and type(node.value) is not int for node in ast.walk(tree)):
        return None
    return tree


def _dimension_value(expression: str, bound: Mapping[str, int]) -> int | None:
    """The size of a dim_param under ``bound`` (None: a name in it is not bound)."""
    if expression in bound:
        return bound[expression]
    tree = _parse_dimension(expression)
    if tree is None or not {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} <= set(bound):
        return None

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant):
            return min(int(node.value), MAX_DIM + 1)
        if isinstance(node, ast.Name):
            return bound[node.id]
        left, right = value(node.left), value(node.right)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        return left // right if right else 0

    return value(tree)


def _set_dims(value: onnx.ValueInfoProto, dims: Sequence[int]) -> None:
    shape = value.type.tensor_type.shape
    del shape.dim[:]
    for d in dims:
        shape.dim.add().dim_value = int(d)


def _names_read(graph: onnx.GraphProto) -> set[str]:
    """Every tensor name a node of ``graph`` or of its subgraphs reads, and the graph's outputs: an input that is
    none of them feeds nothing, and its shape does not matter (a file may declare one it never uses)."""
    read = {value.name for value in graph.output}
    stack = [graph]
    while stack:
        current = stack.pop()
        for node in current.node:
            read.update(node.input)
            for attribute in node.attribute:
                stack.extend([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs)
        read.update(value.name for value in current.output)
    return read


def _require_static_inputs(inputs: Sequence[onnx.ValueInfoProto], dimensions: set[str] | None = None) -> None:
    for value in inputs:
        tensor_type = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            raise LilouInputError(f"input {value.name!r} is not a tensor (sequences and maps are not supported)")
        if not tensor_type.HasField("shape"):
            raise LilouInputError(f"input {value.name!r} has no shape; pass --shape {value.name}=D1xD2...")
        if any(d.HasField("dim_value") and d.dim_value == 0 for d in tensor_type.shape.dim):
            shown = "x".join(str(d.dim_value) if d.HasField("dim_value") else (protobuf_text(d.dim_param) or "?")
                             for d in tensor_type.shape.dim)
            raise LilouInputError(f"input {value.name!r} has a zero-size dimension ({shown}): an empty tensor has no "
                                  f"work to price; set its size with --shape {value.name}=D1xD2...")
        dynamic = [protobuf_text(d.dim_param) or "?" for d in tensor_type.shape.dim if d.dim_value <= 0]
        if dynamic:
            shown = "x".join(str(d.dim_value) if d.dim_value > 0 else (protobuf_text(d.dim_param) or "?")
                             for d in tensor_type.shape.dim)
            names = sorted({n for d in dynamic for n in _dimension_names(d) if n in (dimensions or ())})
            by_name = f", by name in every input ({', '.join(f'--shape {n}=N' for n in names[:4])})" if names else ""
            raise LilouInputError(
                f"input {value.name!r} has dynamic dimensions ({shown}); set them with "
                f"--shape {value.name}=D1xD2...{by_name} (or --batch N for the leading one)")
        dims = [d.dim_value for d in tensor_type.shape.dim]
        if math.prod(dims) > MAX_ELEMENTS:
            raise LilouInputError(f"input {value.name!r} has shape {'x'.join(map(str, dims))}, "
                                  f"{math.prod(dims):.3g} elements: above Lilou's limit of 2^48 elements per tensor")


#: What ONNX's shape inference (through the guarded child) raises on a model it cannot infer.
_INFERENCE_ERRORS = (shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError, ValueError)


def infer_shapes(model: onnx.ModelProto, notes: list[str] | None = None,
                 evaluated: dict[str, int] | None = None) -> onnx.ModelProto:
    """ONNX shape inference with data propagation, then constant evaluation for any gaps (``evaluated``
    receives the sizes of the tensors that evaluation computed, :func:`complete_shapes`), both in the guarded child
    (:mod:`lilou.graph.guarded_inference`).

    A contradiction (e.g. a --batch that a fixed Reshape cannot take) is bad input.
    """
    _check_einsum_equations(model.graph, model.functions)
    probe, unread = _unread_initializers_as_inputs(model)
    probe, unlisted = _initializers_listed_as_inputs(probe, copied=probe is not model)
    if needs_legacy_types(probe):
        probe = _with_legacy_types(probe, copied=probe is not model)
    data_prop = data_propagation_is_safe(probe)
    try:
        inferred, completion = _guarded_inference(probe, unread, data_prop)
    except guarded_inference.FinishFailed as failed:
        raise _completion_failed(failed) from None
    except _INFERENCE_ERRORS as exc:
        if not data_prop:
            raise _inference_failed(exc) from None
        # ONNX's data propagation can reject what the model itself never computes: BLOOM's ALiBi slopes
        # (a Mul of 1-D values of lengths 4 and 32 inside a shape computation) stop it, while inference
        # without it, plus Lilou's own constant folding (complete_shapes), gives every shape.
        try:
            inferred, completion = _guarded_inference(probe, unread, data_prop=False)
        except guarded_inference.FinishFailed as failed:
            raise _completion_failed(failed) from None
        except _INFERENCE_ERRORS:
            raise _inference_failed(exc) from None
    _restore_initializers(inferred, unread)
    if unlisted:
        inputs = [v for v in inferred.graph.input if v.name not in unlisted]
        inferred.graph.ClearField("input")
        inferred.graph.input.extend(inputs)
    if notes is not None:
        notes.extend(completion["notes"])
    if evaluated is not None:
        evaluated.update(completion["evaluated"])
    return inferred


def _with_legacy_types(model: onnx.ModelProto, copied: bool) -> onnx.ModelProto:
    """``model`` (a copy unless ``copied``) with the outputs of its opset 1-5 ops that ONNX cannot type typed as
    :mod:`lilou.graph.legacy_types` finds them, in the guarded child: strict inference stopped at the first of them."""
    try:
        inferred, typed = guarded_inference.infer_then(model, _legacy_types_finish, check_type=False, strict_mode=False)
    except guarded_inference.FinishFailed as failed:
        raise _completion_failed(failed) from None
    except _INFERENCE_ERRORS as exc:
        raise _inference_failed(exc) from None
    if not copied:
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        model = probe
    names = set(typed or ())
    model.graph.value_info.extend(v for v in inferred.graph.value_info if v.name in names)
    return model


def _legacy_types_finish(inferred: onnx.ModelProto) -> list[str]:
    return type_legacy_outputs(inferred)


def _guarded_inference(probe: onnx.ModelProto, unread: list[onnx.TensorProto], data_prop: bool
                       ) -> tuple[onnx.ModelProto, dict]:
    """ONNX's inference of ``probe`` and Lilou's completion of its shapes, in the guarded child: the inferred model
    and the completion's notes and evaluated sizes (what the completion raises: ``FinishFailed``)."""
    return guarded_inference.infer_then(probe, functools.partial(_completed, unread=unread, data_prop=data_prop),
                                        check_type=False, strict_mode=True, data_prop=data_prop)


def _completion_failed(failed: guarded_inference.FinishFailed) -> Exception:
    """An ONNX error of the completion is bad input, as inference's own; anything else is raised as it came."""
    if isinstance(failed.error, (shape_inference.InferenceError, onnx.checker.ValidationError)):
        return _inference_failed(failed.error)
    return failed.error


def _completed(inferred: onnx.ModelProto, unread: list[onnx.TensorProto], data_prop: bool) -> dict:
    """In the guarded child, after ONNX's inference: every output given a static shape where constants and shapes
    decide it (:func:`complete_shapes`, in place). With data propagation done, only the folded copies are inferred
    again (not the model itself)."""
    notes: list[str] = []
    evaluated: dict[str, int] = {}
    _restore_initializers(inferred, unread)
    if _outputs_without_static_shape(inferred):
        complete_shapes(inferred, notes=notes, inferred=data_prop, evaluated=evaluated)
    return {"notes": notes, "evaluated": {name: int(size) for name, size in evaluated.items()}}  # JSON: no numpy ints


#: Whether the sizes being inferred were asked for (--batch, --shape): only then may a failure be blamed on them.
SIZES_GIVEN: contextvars.ContextVar[bool] = contextvars.ContextVar("lilou_sizes_given", default=False)


def _inference_failed(exc: Exception) -> LilouInputError:
    message = " ".join(str(exc).split())
    hint = ("; if you changed --batch or --shape, the model may have been exported with fixed shapes: re-export it "
            "with the shape you want") if SIZES_GIVEN.get() else ""
    return LilouInputError(f"shape inference failed ({message[:300]}){hint}")


def _check_einsum_equations(graph: onnx.GraphProto, functions=()) -> None:
    """Reject Einsum equations ONNX's shape inference cannot parse (it may never return on them)."""
    nodes = [*graph.node, *(n for f in functions for n in f.node)]
    for node in nodes:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _check_einsum_equations(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    _check_einsum_equations(g)
            elif node.op_type == "Einsum" and attr.name == "equation":
                equation = attr.s.decode("utf-8", "replace")
                if not _EINSUM_EQUATION.match(equation):
                    raise LilouInputError(f"Einsum {node.name!r} has an invalid equation {equation[:60]!r}: only "
                                          "letters, commas, '...', spaces and one '->' are allowed")


def _unread_initializers_as_inputs(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[onnx.TensorProto]]:
    """Shape inference refuses to look at initializers whose bytes were not loaded; their
    shapes are all it needs, so present them as graph inputs of the same type and shape. Those whose bytes a
    guarded child dropped (:func:`lilou.graph.guarded_inference.without_weight_bytes`) stay where they are: no
    inference reads a tensor that large, and the model is shaped as with its bytes."""
    unread = [t for t in model.graph.initializer
              if t.data_location == onnx.TensorProto.EXTERNAL and not guarded_inference.bytes_dropped(t)]
    if not unread:
        return model, []
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    kept = [t for t in probe.graph.initializer
            if t.data_location != onnx.TensorProto.EXTERNAL or guarded_inference.bytes_dropped(t)]
    probe.graph.ClearField("initializer")
    probe.graph.initializer.extend(kept)
    listed = {v.name for v in probe.graph.input}
    probe.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                             for t in unread if t.name not in listed)
    return probe, unread


def _initializers_listed_as_inputs(model: onnx.ModelProto, copied: bool) -> tuple[onnx.ModelProto, set[str]]:
    """Before IR version 4 an initializer is also a graph input, and ONNX's inference reads only the initializers
    listed there: a file that breaks the rule (hand-edited, or an old converter's) had no shape past its first weight
    (an AlexNet at 0 FLOPs). List them on the copy inference sees (``model`` itself where ``copied``); the names
    listed, which come off the inferred model's inputs again."""
    if model.ir_version >= 4:
        return model, set()
    listed = {v.name for v in model.graph.input}
    missing = [t for t in model.graph.initializer if t.name not in listed]
    if not missing:
        return model, set()
    if not copied:
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        model = probe
    model.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in missing)
    return model, {t.name for t in missing}


def _restore_initializers(inferred: onnx.ModelProto, unread: list[onnx.TensorProto]) -> None:
    """Put the unread initializers back in place of the inputs that stood for them; a model they are back in already
    (the completion restores them before it folds, in the parent where it runs there) is left as it is."""
    if not unread:
        return
    names = {t.name for t in unread}
    inputs = [v for v in inferred.graph.input if v.name not in names]
    inferred.graph.ClearField("input")
    inferred.graph.input.extend(inputs)
    present = {t.name for t in inferred.graph.initializer}
    inferred.graph.initializer.extend(t for t in unread if t.name not in present)


def _outputs_without_static_shape(model: onnx.ModelProto) -> bool:
    graph = model.graph
    known = {t.name for t in graph.initializer}
    for value in (*graph.input, *graph.value_info, *graph.output):
        dims = value.type.tensor_type.shape.dim
        if value.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            known.add(value.name)
    return any(name and name not in known for node in graph.node for name in node.output)
