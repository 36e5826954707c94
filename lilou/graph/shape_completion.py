"""Give every node output a static shape where ONNX shape inference leaves gaps.

Exporters build helper values from constants and static shapes (a Conv's zero bias,
the slice bounds of ``torch.roll``) that ``onnx.shape_inference`` cannot follow
through every op. Such values are evaluated here with ONNX's own reference runtime
(``onnx.reference``) instead of a hand-written evaluator.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import onnx


def _static_shape(value_type: onnx.TypeProto) -> tuple[int, ...] | None:
    if not value_type.HasField("tensor_type") or not value_type.tensor_type.HasField("shape"):
        return None
    dims = value_type.tensor_type.shape.dim
    if not all(d.HasField("dim_value") for d in dims):
        return None
    return tuple(d.dim_value for d in dims)


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


def _small_constants(model: onnx.ModelProto, max_elements: int) -> dict[str, np.ndarray]:
    return {
        t.name: onnx.numpy_helper.to_array(t)
        for t in model.graph.initializer
        if t.data_location != onnx.TensorProto.EXTERNAL and math.prod(t.dims) <= max_elements
    }


def _evaluate(node: onnx.NodeProto, inputs: list[np.ndarray | None], opset: int) -> list[np.ndarray] | None:
    from onnx.reference import ReferenceEvaluator

    try:
        feeds = {name: value for name, value in zip(node.input, inputs) if name}
        return list(ReferenceEvaluator(node, opsets={"": opset}).run(None, feeds))
    except Exception:  # an op the reference runtime lacks: leave it to shape inference
        return None


def _constant_outputs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]], elem_types: dict[str, int],
                      values: dict[str, np.ndarray], opset: int) -> list[np.ndarray] | None:
    """The node's outputs when they follow from constants and static shapes alone, else None."""
    if node.domain not in ("", "ai.onnx"):
        return None
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
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # e.g. log(0) or a cast of -inf while building masks
        for index, node in enumerate(model.graph.node):
            if index in known.folded or all(name in known.computed for name in node.output if name):
                continue
            results = _constant_outputs(node, known.shapes, known.elem_types, known.values, opset)
            if results is None:
                continue
            evaluated += 1
            for name, result in zip(node.output, results):
                result = np.asarray(result)
                if result.size <= max_elements:
                    known.values[name] = result
                known.shapes[name] = result.shape
                known.elem_types[name] = onnx.helper.np_dtype_to_tensor_dtype(result.dtype)
                known.computed[name] = onnx.helper.make_tensor_value_info(name, known.elem_types[name], result.shape)
            if all(name in known.values for name in node.output if name):
                known.folded.add(index)
    return evaluated


def _infer_folded(model: onnx.ModelProto, known: _Known) -> onnx.ModelProto:
    """Shape inference on a copy of ``model`` whose folded nodes are replaced by their values."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.ClearField("node")
    probe.graph.node.extend(n for i, n in enumerate(model.graph.node) if i not in known.folded)
    folded = _folded_outputs(model, known)
    probe.graph.initializer.extend(onnx.numpy_helper.from_array(known.values[name], name) for name in folded)
    # Symbolic dims from an earlier pass (``unk__14``) would stick: ONNX inference keeps a stated
    # dim_param over the value it could now infer. Keep only fully static shapes.
    static = [v for v in model.graph.value_info if _static_shape(v.type) is not None and v.name not in known.computed]
    probe.graph.ClearField("value_info")
    probe.graph.value_info.extend(static)
    probe.graph.value_info.extend(info for name, info in known.computed.items() if name not in folded)
    return onnx.shape_inference.infer_shapes(probe, data_prop=True)


def _folded_outputs(model: onnx.ModelProto, known: _Known) -> list[str]:
    return [name for i in sorted(known.folded) for name in model.graph.node[i].output if name]


def complete_shapes(model: onnx.ModelProto, max_elements: int = 1 << 16, max_rounds: int = 8) -> onnx.ModelProto:
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
    serialises it).
    """
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 18)
    known = _Known(*_known_types(onnx.shape_inference.infer_shapes(model, data_prop=True)))
    known.values = _small_constants(model, max_elements)
    inferred = model
    for _ in range(max_rounds):
        evaluated = _fold_constants(model, known, opset, max_elements)
        inferred = _infer_folded(model, known)
        if known.learn(inferred) == 0 and evaluated == 0:
            break
    folded = _folded_outputs(model, known)
    model.graph.ClearField("value_info")
    model.graph.value_info.extend(inferred.graph.value_info)
    model.graph.value_info.extend(v for v in inferred.graph.output if v.type.tensor_type.HasField("shape"))
    model.graph.value_info.extend(known.computed[name] for name in folded)
    return model
