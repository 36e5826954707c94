"""``F.scaled_dot_product_attention`` recognised by its form, where no exporter name says where it is.

Eager runs the call as one attention kernel (flash or memory-efficient attention). Below opset 23, both ONNX
exporters write it as its math (TorchScript's ``symbolic_opset14.scaled_dot_product_attention``, torchlib's
``aten_scaled_dot_product_attention``): Q and K^T each multiplied by the square root of the scale, ``Q.K^T``, the
mask added, a softmax over the last axis, ``P.V``; TorchScript zeroes the rows a boolean mask left empty after the
softmax (``Where(IsNaN(p), 0, p)``). The dynamo exporter also names the call
(:func:`lilou.fusion.export_names.fused_call_nodes`); TorchScript names nothing, so a TorchScript export of a
Hugging Face model with its default attention (``attn_implementation="sdpa"``: Llama, Mistral, Qwen, T5, the
diffusers UNet) was read as seven to nine kernels per attention where eager runs one.

Hand-written attention scales after the product (``Q.K^T / sqrt(d)``, or Q alone before it) and is not matched; one
that scales Q and K^T both before their product (openai-whisper's before it used SDPA) has the same form and is read
as SDPA too, although eager runs it as several kernels, as with the activations of
:func:`lilou.fusion.eager_replay.gelu_decompositions`. A boolean mask turned into 0 / -inf by a ``Where`` that only
the call reads is the call's, as the dynamo exporter names it.
"""
from __future__ import annotations

from lilou.graph.dag import ModelGraph


def sdpa_decompositions(graph: ModelGraph, constant: set[str] | None = None) -> list[list[str]]:
    """The runtime nodes of every decomposed ``scaled_dot_product_attention``: the two scaling ``Mul`` nodes,
    ``Q.K^T``, the mask's ``Add`` when there is one, the ``Softmax``, TorchScript's ``IsNaN`` and ``Where`` when
    there, and ``P.V`` (the call's end, first in the list).

    Every value inside must be read by the pattern alone, each scale must be a constant scalar, and K^T must come
    from a ``Transpose`` (both exporters transpose K inside the call)."""
    dag = graph.dag
    constant = graph.constant_tensors() if constant is None else constant
    nodes = dag.nodes

    def runtime_readers(node: str) -> list[str]:
        return [r for r in dag.successors(node) if not nodes[r]["constant"]]

    def producer(node: str, index: int) -> str | None:
        """The runtime node writing input ``index`` of ``node``, None for a constant or graph input."""
        inputs = nodes[node]["inputs"]
        if index >= len(inputs) or inputs[index] is None or inputs[index].name in constant:
            return None
        writer = graph.writer(node, inputs[index].name)
        return writer if writer is not None and not nodes[writer]["constant"] else None

    def op(node: str | None) -> str | None:
        return nodes[node]["op"] if node else None  # None: a constant; "": a graph input

    def only_read_by(node: str, *readers: str) -> bool:
        return sorted(runtime_readers(node)) == sorted(readers)

    def scaled(mul: str | None) -> str | None:
        """The node writing the runtime input of ``mul`` = runtime x constant scalar ("" for a graph input), else
        None."""
        if op(mul) != "Mul":
            return None
        inputs = nodes[mul]["inputs"]
        scalars = [t for t in inputs if t is not None and t.name in constant and t.shape is not None
                   and all(d == 1 for d in t.shape)]
        runtime = [i for i, t in enumerate(inputs) if t is not None and t.name not in constant]
        if len(inputs) != 2 or len(scalars) != 1 or len(runtime) != 1:
            return None
        return producer(mul, runtime[0]) or ""

    found = []
    for pv in graph.runtime_nodes():
        if nodes[pv]["op"] != "MatMul":
            continue
        members = [pv]
        probabilities = producer(pv, 0)
        if op(probabilities) == "Where":  # TorchScript: Where(IsNaN(p), 0, p)
            where = probabilities
            softmax, isnan = producer(where, 2), producer(where, 0)
            if op(softmax) != "Softmax" or op(isnan) != "IsNaN" or producer(isnan, 0) != softmax \
                    or producer(where, 1) is not None or not only_read_by(where, pv) \
                    or not only_read_by(isnan, where) or not only_read_by(softmax, isnan, where):
                continue
            members += [where, isnan]
        elif op(probabilities) == "Softmax" and only_read_by(probabilities, pv):
            softmax = probabilities
        else:
            continue
        if not _last_axis(nodes[softmax]):
            continue
        members.append(softmax)
        scores = producer(softmax, 0)
        if op(scores) == "Add":  # the mask, added to Q.K^T
            added = [producer(scores, i) for i in range(2)]
            qk = next((p for p in added if op(p) == "MatMul"), None)
            if qk is None or not only_read_by(scores, softmax):
                continue
            members.append(scores)
            mask = next((p for p in added if p != qk), None)
            if op(mask) == "Where" and only_read_by(mask, scores) \
                    and [producer(mask, i) is None for i in range(3)] == [False, True, True]:
                members.append(mask)  # a boolean mask made 0 / -inf inside the call
            scores_reader = scores
        else:
            qk, scores_reader = scores, softmax
        if op(qk) != "MatMul" or not only_read_by(qk, scores_reader):
            continue
        mul_q, mul_k = producer(qk, 0), producer(qk, 1)
        if mul_q is None or mul_k is None or mul_q == mul_k:
            continue
        key = scaled(mul_k)
        while op(key) == "Reshape":  # torchlib transposes K between reshapes to 3-D and back
            key = producer(key, 0)
        if scaled(mul_q) is None or op(key) != "Transpose" or not only_read_by(mul_q, qk) \
                or not only_read_by(mul_k, qk):
            continue
        members += [qk, mul_q, mul_k]
        found.append(members)
    return found


def _last_axis(softmax: dict) -> bool:
    """Is the softmax over the last axis? Both exporters write the axis (-1); before opset 13 a softmax without one
    is over axis 1 of the input flattened to 2-D."""
    axis = softmax["attributes"].get("axis")
    inputs = softmax["inputs"]
    rank = len(inputs[0].shape) if inputs and inputs[0] is not None and inputs[0].shape is not None else None
    return axis == -1 or (axis is not None and rank is not None and axis == rank - 1)
