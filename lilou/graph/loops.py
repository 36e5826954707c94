"""A ``Loop`` whose trip count is known, written as its body once per iteration.

``torch.jit.script`` keeps a Python loop whose length is not a constant (``for _ in range(x.size(0))``), and the
TorchScript exporter writes it as one ``Loop`` node holding its body. Priced as one node, such a loop was one
fallback kernel: eager launches the body's kernels once per iteration. :func:`unroll_loop` writes the body
``trips`` times in the ``Loop``'s place, the values it carries threaded from one iteration to the next, the
iteration number a constant, and each scan output the iterations' values stacked (``Unsqueeze`` + ``Concat``, as
``torch.stack`` of a list runs one kernel). Only a loop that surely runs ``trips`` times is unrolled: its
condition is absent or a constant true, and its body passes it on unchanged or writes a constant true.
The trip count comes from the file (a constant) or from the bound shapes (:func:`lilou.graph.dag.shape_model`
evaluates it as it does an ``If``'s condition).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import onnx
from onnx import TensorProto, helper

from lilou.graph.branches import outer_names, rename_in_subgraphs
from lilou.graph.constants import scalar_integers, scalar_truths
from lilou.graph.input_values import bound_value_names

#: Body nodes written at most per model; a longer loop stays one kernel, costed as its body times its trip count.
#: (A cap of 256 iterations per loop, under this one, priced ``for _ in range(x.size(0))`` at batch 512 as one
#: iteration: 0.03 ms against 15.5 at batch 256.)
MAX_UNROLLED_NODES = 20_000
#: Loops unrolled at most per model.
MAX_LOOPS = 256
#: Trip counts read from the bound shapes at most per model (each shapes the model once).
MAX_EVALUATIONS = 16
_ONNX = ("", "ai.onnx")


def loop_points(model: onnx.ModelProto) -> list[int]:
    """Indices of the top-level ``Loop`` nodes of the standard domain with a body."""
    return [index for index, node in enumerate(model.graph.node)
            if node.op_type == "Loop" and node.domain in _ONNX and loop_body(node) is not None]


def loop_body(node: onnx.NodeProto) -> onnx.GraphProto | None:
    """A ``Loop`` node's body graph, or None where it has none."""
    return next((a.g for a in node.attribute if a.name == "body" and a.type == onnx.AttributeProto.GRAPH), None)


#: The smallest trip count that is ONNX's "no bound" rather than a count: TorchScript writes every ``while`` loop
#: (and a ``for`` with a ``break``) as ``Loop(M=INT64_MAX, cond)``, other exporters INT32_MAX; the condition decides
#: how many times such a loop runs. Never a count to multiply a body by (it priced one such loop at 7.2e15 ms).
UNBOUNDED_TRIPS = 2**31 - 1


def runs_every_trip(model: onnx.ModelProto, index: int) -> bool:
    """Whether the loop at ``index`` runs exactly its trip count: no condition or a constant true one, passed on
    unchanged by the body (or written there as a constant true)."""
    return loop_runs_every_trip(model.graph.node[index], scalar_truths(model.graph))


def loop_runs_every_trip(node: onnx.NodeProto, constants: Mapping[str, bool]) -> bool:
    """:func:`runs_every_trip` for a ``Loop`` node of any graph, ``constants`` the truth values its graph (and the
    graphs around it) states (:func:`lilou.graph.constants.scalar_truths`)."""
    body = loop_body(node)
    if body is None:
        return False
    condition = node.input[1] if len(node.input) > 1 else ""
    if condition and constants.get(condition) is not True:
        return False
    if len(body.input) < 2 or not body.output:
        return False
    carried_in, written = body.input[1].name, body.output[0].name
    if written == carried_in:
        return True
    inner = {**constants, **scalar_truths(body)}
    producer = next((n for n in body.node if written in n.output), None)
    while producer is not None and producer.op_type == "Identity" and producer.input:
        written = producer.input[0]
        producer = next((n for n in body.node if written in n.output), None)
    return written == carried_in or inner.get(written) is True


def unroll_loop(model: onnx.ModelProto, index: int, trips: int, budget: int = MAX_UNROLLED_NODES) -> bool:
    """Write the loop at ``index`` as its body ``trips`` times (in place); False where it is not (more than ``budget``
    nodes, or a form this does not reproduce: sparse initializers, outputs that do not match the loop's)."""
    graph = model.graph
    node = graph.node[index]
    body = loop_body(node)
    carried = len(node.input) - 2
    scans = len(body.output) - 1 - carried
    if (trips < 0 or trips * max(1, len(body.node)) > budget or carried < 0 or scans < 0
            or len(body.input) != carried + 2 or len(node.output) > carried + scans or body.sparse_initializer
            or (trips == 0 and any(node.output[carried:]))):  # no iteration: empty scan outputs, never priced
        return False
    label = node.name or f"Loop #{index}"
    taken = outer_names(graph, skip=index) | set(node.output)
    nodes: list[onnx.NodeProto] = []

    def fresh(name: str) -> str:
        suffix, candidate = 0, name
        while candidate in taken:
            suffix += 1
            candidate = f"{name}__{suffix}"
        taken.add(candidate)
        return candidate

    constants = {}
    for tensor in body.initializer:  # constants of the body: written once, outside
        moved = graph.initializer.add()
        moved.CopyFrom(tensor)
        moved.name = constants[tensor.name] = fresh(tensor.name)
    true = fresh(f"{label}/lilou_true")
    graph.initializer.append(helper.make_tensor(true, TensorProto.BOOL, [], [True]))
    values = list(node.input[2:])  # what each carried value is before the next iteration
    stacked: list[list[str]] = [[] for _ in range(scans)]
    for trip in range(trips):
        step = fresh(f"{label}/lilou_iteration_{trip}")
        graph.initializer.append(helper.make_tensor(step, TensorProto.INT64, [], [trip]))
        names = {body.input[0].name: step, body.input[1].name: true, **constants}
        names.update({value.name: source for value, source in zip(body.input[2:], values)})
        for inner in body.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(inner)
            copy.name = f"{inner.name or inner.op_type}/iteration_{trip}"
            for position, name in enumerate(copy.input):
                copy.input[position] = names.get(name, name)
            rename_in_subgraphs(copy, names)
            for position, name in enumerate(copy.output):
                if name:
                    names[name] = fresh(f"{name}/iteration_{trip}")
                    copy.output[position] = names[name]
            nodes.append(copy)
        outputs = [names.get(value.name, value.name) for value in body.output]
        values = outputs[1:1 + carried]
        for column, value in enumerate(outputs[1 + carried:]):
            stacked[column].append(value)
    final = [*values, *[None] * scans]
    for position, output in enumerate(node.output):
        if not output:
            continue
        if position < carried:
            nodes.append(helper.make_node("Identity", [final[position]], [output], name=f"{label}/lilou_final_{position}"))
            continue
        column = position - carried
        rows = [helper.make_node("Unsqueeze", [value, _axes(graph, label, column)], [f"{output}/lilou_row_{trip}"],
                                 name=f"{label}/lilou_row_{column}_{trip}") for trip, value in enumerate(stacked[column])]
        nodes += rows
        nodes.append(helper.make_node("Concat", [r.output[0] for r in rows], [output], name=f"{label}/lilou_stack_{column}",
                                      axis=0))
    kept = list(graph.node)
    graph.ClearField("node")
    graph.node.extend(kept[:index] + nodes + kept[index + 1:])
    return True


def _pin_trip_count(model: onnx.ModelProto, index: int, trips: int) -> None:
    """Give the loop at ``index`` its trip count as a constant (the bound shapes decided it), so that its cost, as
    one node, is its body's times the count and not one iteration's."""
    graph, node = model.graph, model.graph.node[index]
    name = f"{node.name or f'Loop #{index}'}/lilou_trip_count"
    taken = outer_names(graph, skip=-1)
    while name in taken:
        name += "_"
    graph.initializer.append(helper.make_tensor(name, TensorProto.INT64, [], [trips]))
    node.input[0] = name


def _axes(graph: onnx.GraphProto, label: str, column: int) -> str:
    name = f"{label}/lilou_stack_axes_{column}"
    if not any(t.name == name for t in graph.initializer):
        graph.initializer.append(helper.make_tensor(name, TensorProto.INT64, [1], [0]))
    return name


def resolve_loops(model: onnx.ModelProto, notes: list[str], evaluate: Callable[[onnx.ModelProto, str], int | None],
                  budget: int = MAX_UNROLLED_NODES) -> int:
    """Unroll every top-level loop that runs a trip count known from the file or the bound shapes, writing at most
    ``budget`` body nodes in all; how many were written (0: nothing changed).

    ``evaluate(model, name)`` gives the value of a tensor the bound shapes decide, or None."""
    start = budget
    evaluations = 0  # each reads the model's shapes once
    for _ in range(MAX_LOOPS):
        unrolled = False
        constants = scalar_integers(model.graph)
        for index in loop_points(model):
            node = model.graph.node[index]
            count = node.input[0] if node.input else ""
            if not count or not runs_every_trip(model, index):
                continue
            trips = constants.get(count)
            source = "set by --value" if count in bound_value_names(model.graph) else "set in the file"
            if trips is None and evaluations < MAX_EVALUATIONS:
                evaluations += 1
                trips, source = evaluate(model, count), "decided by the bound shapes"
            label, size = node.name or str(index), len(loop_body(node).node)
            if trips is None or int(trips) >= UNBOUNDED_TRIPS:  # "no bound": never written out nor pinned
                continue
            if not unroll_loop(model, index, int(trips), budget):
                if count not in constants:  # the count the shapes decided, kept for the loop's cost
                    _pin_trip_count(model, index, int(trips))
                    why = (f"more body nodes than Lilou writes out ({MAX_UNROLLED_NODES:,} per model)"
                           if int(trips) * max(1, size) > budget else "a form Lilou does not write out")
                    notes.append(f"Loop {label!r} runs {int(trips)} times ({source}): {why}, so it is one kernel "
                                 "of its body times the count, which eager launches once per iteration")
                continue
            budget -= max(1, int(trips) * size)  # a loop of no iteration still changed the model
            notes.append(f"Loop {label!r} runs {int(trips)} times ({source}): its body is priced once per iteration, "
                         "as eager launches it")
            unrolled = True
            break  # indices moved: look again
        if not unrolled:
            break
    return start - budget
