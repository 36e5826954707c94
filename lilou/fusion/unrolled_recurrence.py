"""Recurrent layers written out step by step, found from the graph's shape when the weights' names are gone.

The dynamo exporter writes an ``nn.RNN`` (``aten.rnn_tanh``) as one input projection for every step, sliced per
step, and per step ``h @ W_hh^T + b``, the step's slice added, a ``tanh``. Eager runs the whole layer as one cuDNN
call: the oracle's recurrent group. Where the weights keep torch's names (``weight_hh_l0``) the replay knows such a
layer by them (:func:`lilou.fusion.eager_replay.recurrent_weight_layer`); an optimised export folds them into
``val_<k>`` initialisers, and the layer is known only by what a recurrence is: matmuls that read one weight, each
reached from the one before through element-wise work alone, every step reading its slice of one projection of
the whole sequence. A transformer whose layers share weights (ALBERT) passes through other matmuls between two
reads of one weight, and is not taken for one.
"""
from __future__ import annotations

from lilou.graph.dag import ModelGraph

#: Ops that end a step's element-wise run: another library call lies between two reads of the weight.
_CALL_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "LSTM", "GRU", "RNN"})
#: How deep a step's element-wise run may be between two reads of the recurrent weight (bias add, the step's input,
#: an LSTM's gates and cell update, a view or two); a longer run is not the step of a recurrent layer.
_MAX_STEP_DEPTH = 10
#: How deep the views and element-wise nodes between an input projection and the steps that read it may be
#: (``linear``'s bias add, the per-step ``Slice`` and ``Squeeze``, a layout transpose).
_MAX_PROJECTION_DEPTH = 5


def unrolled_recurrent_matmuls(graph: ModelGraph) -> frozenset[str]:
    """The matmuls of every recurrent layer written out step by step: the steps' matmuls (two or more reads of one
    constant weight, each reached from the one before through element-wise work at most :data:`_MAX_STEP_DEPTH`
    deep, no other library call) and the input projection of the whole sequence that the steps slice. Without that
    projection a chain is a Python loop (``h = tanh(h @ W)``: a kernel per call in eager), not an ``nn.RNN``; a
    recurrent cell written by hand and exported with the optimiser is indistinguishable from one, and is taken
    for it."""
    return graph.derived("unrolled recurrent matmuls", lambda: _recurrent_matmuls(graph))


def _recurrent_matmuls(graph: ModelGraph) -> frozenset[str]:
    dag = graph.dag
    constant = graph.constant_tensors()
    readers: dict[str, list[str]] = {}
    for node in graph.runtime_nodes():
        inputs = dag.nodes[node]["inputs"]
        if dag.nodes[node]["op"] in ("MatMul", "Gemm") and len(inputs) > 1 and inputs[1] is not None \
                and inputs[1].name in constant:
            readers.setdefault(inputs[1].name, []).append(node)
    found: set[str] = set()
    for matmuls in readers.values():
        if len(matmuls) < 2:
            continue
        steps = [_step_nodes(graph, a, b) for a, b in zip(matmuls, matmuls[1:])]
        projections = _input_projections(graph, set(matmuls), steps) if all(steps) else set()
        if projections:
            found.update(matmuls)
            found.update(projections)
    return frozenset(found)


def _forward(graph: ModelGraph, start: str, limit: int) -> set[str]:
    """Runtime nodes reached from ``start`` at most ``limit`` nodes deep through nodes that are not library calls
    (a call is reached but not passed)."""
    dag = graph.dag
    seen: set[str] = set()
    frontier = [start]
    for _ in range(limit):
        following = []
        for node in frontier:
            for reader in dag.successors(node):
                if reader not in seen and not dag.nodes[reader]["constant"]:
                    seen.add(reader)
                    if dag.nodes[reader]["op"] not in _CALL_OPS:
                        following.append(reader)
        frontier = following
    return seen


def _step_nodes(graph: ModelGraph, first: str, second: str) -> set[str]:
    """The nodes of one step, from ``first`` to the next read of its weight, ``second``: empty when ``second`` is
    not reached through element-wise work alone."""
    reached = _forward(graph, first, _MAX_STEP_DEPTH)
    if second not in reached:
        return set()
    dag = graph.dag
    step, stack = {first, second}, [second]
    while stack:  # the reached nodes that lead to ``second``
        for producer in dag.predecessors(stack.pop()):
            if producer in reached and producer not in step:
                step.add(producer)
                stack.append(producer)
    return step


def _input_projections(graph: ModelGraph, matmuls: set[str], steps: list[set[str]]) -> set[str]:
    """Other matmuls whose output, through views and element-wise nodes, reaches every step but one at most: the
    projection of the whole sequence that the steps slice (the first step, before any read of the recurrent weight,
    and the last, after it, are not among ``steps``)."""
    dag = graph.dag
    projections = set()
    for node in graph.runtime_nodes():
        if node in matmuls or dag.nodes[node]["op"] not in ("MatMul", "Gemm"):
            continue
        reached = _forward(graph, node, _MAX_PROJECTION_DEPTH)
        if sum(1 for step in steps if reached & (step - matmuls)) >= max(1, len(steps) - 1):
            projections.add(node)
    return projections
