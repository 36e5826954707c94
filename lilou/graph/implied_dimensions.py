"""Named dimensions of a decoder file that follow from the others, bound when ``--shape`` leaves them out.

onnxruntime-genai's decoder files (:mod:`lilou.graph.contrib_decoder`) size their inputs with five names:
``batch_size``, ``sequence_length`` and ``past_sequence_length`` say what a user asks about (how many sequences,
new tokens and cached tokens); ``total_sequence_length`` (the attention mask's length) and the KV cache's head size
(``kv_cache_dim``, the last axis of every ``past_key_values.*`` input) follow from them and from the model. A user
had to look both up and bind them by hand. Here ``total_sequence_length`` is bound to past + new tokens (what
onnxruntime-genai feeds), the cache's head size to the one the attention's packed projection gives
(``num_heads`` query and ``kv_num_heads`` key and value heads side by side; or its split, or the projection behind a
separate rotation), and the cache of the sliding-window layers (``past_sliding_length``, Gemma 2 and 3) to the past
length up to the window; a note says so each time. A size the user binds
always wins, and nothing is guessed where the model does not say it (no packed projection: the name stays unbound
and the dynamic-dimension error names it).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from lilou.graph.constants import constant_tensors
from lilou.graph.contrib_decoder import gqa_projection_head_size
from lilou.graph.names import protobuf_text
from lilou.graph.shapes import dimension_names_of, runtime_inputs

_PAST, _NEW, _TOTAL = "past_sequence_length", "sequence_length", "total_sequence_length"
#: The cache length of the layers that attend over a sliding window (Gemma 2 and 3's local layers).
_PAST_WINDOW = "past_sliding_length"


def implied_dimensions(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None
                       ) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """``shapes`` with the dimensions that follow from it added, and a note for each one added."""
    shapes = dict(shapes or {})
    if not shapes or not any(node.op_type == "GroupQueryAttention" for node in model.graph.node):
        return shapes, []
    inputs = runtime_inputs(model)
    named = dimension_names_of(inputs)
    notes = []
    if _TOTAL in named and _TOTAL not in shapes and _bound(shapes, _PAST) and _bound(shapes, _NEW):
        total = shapes[_PAST][0] + shapes[_NEW][0]
        shapes[_TOTAL] = (total,)
        notes.append(f"{_TOTAL} is bound to {_PAST} + {_NEW} = {total}, as onnxruntime-genai feeds it")
    if _PAST_WINDOW in named and _PAST_WINDOW not in shapes and _bound(shapes, _PAST):
        window = _cache_window(model)
        if window is not None:
            size = min(shapes[_PAST][0], window)
            shapes[_PAST_WINDOW] = (size,)
            notes.append(f"{_PAST_WINDOW} (the cache of the sliding-window layers) is bound to min({_PAST}, {window}) "
                         f"= {size}: onnxruntime-genai's windowed cache holds at most the window")
    cache_axis = _cache_head_dimension(inputs)
    if cache_axis is not None and cache_axis not in shapes:
        size = _head_size(model)
        if size is not None:
            shapes[cache_axis] = (size,)
            notes.append(f"{cache_axis} (the KV cache's head size) is bound to {size}, the attention's head size")
    return shapes, notes


def _cache_window(model: onnx.ModelProto) -> int | None:
    """The window every GroupQueryAttention with a windowed cache (``sliding_window_cache``) attends over, when they
    agree."""
    windows = set()
    for node in model.graph.node:
        attributes = {a.name: a for a in node.attribute}
        if node.op_type == "GroupQueryAttention" and "sliding_window_cache" in attributes \
                and attributes["sliding_window_cache"].i:
            window = attributes.get("local_window_size")
            windows.add(window.i if window is not None and window.type == onnx.AttributeProto.INT else 0)
    return windows.pop() if len(windows) == 1 and min(windows) > 0 else None


def _bound(shapes: Mapping[str, Sequence[int]], name: str) -> bool:
    return name in shapes and len(shapes[name]) == 1


def _cache_head_dimension(inputs: Sequence[onnx.ValueInfoProto]) -> str | None:
    """The one name the last axis of every 4-D ``past_key_values.*`` input is written with, if they share one."""
    names = set()
    for value in inputs:
        dims = value.type.tensor_type.shape.dim
        if protobuf_text(value.name).startswith("past_key_values.") and len(dims) == 4:
            last = dims[3]
            if last.dim_value > 0:
                continue
            names.add(last.dim_param if isinstance(last.dim_param, str) else "")
    return names.pop() if len(names) == 1 and "" not in names else None


def _head_size(model: onnx.ModelProto) -> int | None:
    """The head size every GroupQueryAttention's packed projection gives, when they agree."""
    dims = {t.name: tuple(t.dims) for t in model.graph.initializer}
    producers = {out: node for node in model.graph.node for out in node.output if out}
    constants = constant_tensors(model.graph)
    sizes = {gqa_projection_head_size(node, dims, producers, constants) for node in model.graph.node
             if node.op_type == "GroupQueryAttention" and node.domain == "com.microsoft"}
    return sizes.pop() if len(sizes) == 1 and None not in sizes else None
