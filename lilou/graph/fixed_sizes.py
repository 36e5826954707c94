"""An input the file fixes, asked at another size: do the graph's own shapes follow it?

``--batch 8`` on a file exported at batch 1 works when the exporter wrote its reshapes from the input's shape;
one exported with fixed sizes bakes them into constant shapes (``Reshape`` to ``[2, 1500, 6, 64]``), which no
longer fit, so shape inference leaves every tensor after them unknown and the prediction prices a fraction of the
model (Whisper's encoder at batch 1 from a batch-2 export: 45 of its nodes). Such a size cannot be priced, nor run:
it is refused with the inputs and nodes that say why (:func:`lilou.graph.dag.shape_model`).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import onnx

from lilou.graph.costs import TensorInfo


@dataclass(frozen=True)
class ResizedInput:
    """An input whose fixed size was changed: the file's dims (0 where dynamic) and the dims asked for."""

    name: str
    fixed: tuple[int, ...]
    asked: tuple[int, ...]

    def __str__(self) -> str:
        def shown(dims: tuple[int, ...]) -> str:
            return "x".join(str(d) if d > 0 else "?" for d in dims)

        return f"{self.name} {shown(self.fixed)} -> {shown(self.asked)}"


def input_dims(inputs: Iterable[onnx.ValueInfoProto]) -> dict[str, tuple[int, ...]]:
    """Every input's dims as written (0 for a dynamic one)."""
    return {value.name: tuple(int(d.dim_value) for d in value.type.tensor_type.shape.dim) for value in inputs}


def resized_inputs(before: Mapping[str, tuple[int, ...]], inputs: Iterable[onnx.ValueInfoProto]) -> list[ResizedInput]:
    """The inputs where a dimension the file fixed (``before``) now has another size."""
    after = input_dims(inputs)
    return [ResizedInput(name, fixed, after[name]) for name, fixed in before.items()
            if name in after and len(after[name]) == len(fixed)
            and any(old > 0 and new != old for old, new in zip(fixed, after[name]))]


def with_fixed_sizes(model: onnx.ModelProto, resized: Iterable[ResizedInput]) -> onnx.ModelProto:
    """A copy of ``model`` with its resized inputs back at the file's sizes and every inferred shape cleared."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    fixed = {r.name: r.fixed for r in resized}
    for value in copy.graph.input:
        if value.name in fixed:
            for dim, size in zip(value.type.tensor_type.shape.dim, fixed[value.name]):
                if size > 0:
                    dim.Clear()
                    dim.dim_value = size
    copy.graph.ClearField("value_info")
    for value in copy.graph.output:
        value.type.tensor_type.ClearField("shape")
    return copy


def unshaped_nodes(model: onnx.ModelProto, tensors: Mapping[str, TensorInfo]) -> list[str]:
    """The nodes with an output whose shape inference left unknown."""
    return [node.name or node.output[0] for node in model.graph.node
            if any(name and (name not in tensors or tensors[name].shape is None) for name in node.output)]
