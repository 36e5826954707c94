"""Iterations the user states for a ``Loop`` that its data stops (``--value LOOP=N``, ``values={"LOOP": N}``).

A ``while`` loop (TorchScript writes ``Loop(M=INT64_MAX, cond)``) or a ``for`` loop with a ``break`` runs as many
times as its data decides: no file says how many, so Lilou writes out one iteration (:func:`assume_one_iteration`)
and warns. The user often knows
(a decoder that generates 32 tokens, a refinement loop of 8 steps): naming the ``Loop`` node with the count makes
it a loop of that many iterations, which :mod:`lilou.graph.loops` then writes out (or prices as its body times
the count, where it is too long to write out) as any counted loop. The body is kept whole: the nodes that compute
the condition run on the GPU in every iteration, and are priced so; only the decision is taken from the user.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lilou.errors import LilouInputError
from lilou.graph.input_values import BOUND_VALUE_DOC, Value, check_input_values, shown_value
from lilou.graph.loops import (MAX_LOOPS, MAX_UNROLLED_NODES, UNBOUNDED_TRIPS, loop_body, loop_points, runs_every_trip,
                               unroll_loop)
from lilou.graph.constants import scalar_integers, scalar_truths
from lilou.graph.names import protobuf_text
from lilou.graph.shapes import runtime_inputs

__all__ = ["assume_one_iteration", "split_loop_values", "state_loop_iterations", "stating_iterations"]


def split_loop_values(model: onnx.ModelProto, values: Mapping[str, Sequence[Value]] | None
                      ) -> tuple[dict[str, tuple[Value, ...]], dict[str, tuple[Value, ...]]]:
    """(values naming a top-level ``Loop`` node and not a run-time input, the rest) of ``values``. A name that is
    neither, in a model with named loops, is refused here, naming both kinds (:func:`bind_input_values` names the
    inputs alone)."""
    values = check_input_values(values)
    inputs = {value.name for value in runtime_inputs(model)}
    loops = {model.graph.node[index].name for index in loop_points(model)} - {""}
    counts = {name: tuple(items) for name, items in values.items() if name in loops and name not in inputs}
    unknown = sorted(set(values) - inputs - loops)
    if unknown and loops:
        raise LilouInputError(f"--value names {', '.join(protobuf_text(name) for name in unknown)}, neither an input "
                              f"of the model ({', '.join(protobuf_text(name) for name in sorted(inputs)) or 'none'}) "
                              f"nor one of its Loops ({', '.join(protobuf_text(name) for name in sorted(loops))})")
    return counts, {name: tuple(items) for name, items in values.items() if name not in counts}


def state_loop_iterations(model: onnx.ModelProto, counts: Mapping[str, Sequence[Value]]) -> list[str]:
    """Make each named ``Loop`` run its stated count (in place): the count an initializer, no condition before the
    first iteration, and a constant true as the body's condition. One note per loop."""
    loops = {name: model.graph.node[next(i for i in loop_points(model) if model.graph.node[i].name == name)]
             for name in counts}
    trips = {name: _count(name, items) for name, items in counts.items()}
    sizes = {name: len(loop_body(loop).node) for name, loop in loops.items()}
    _check_budget(trips, sizes)
    notes = []
    for name, node in loops.items():
        count = f"{name}/lilou_stated_iterations"
        tensor = numpy_helper.from_array(np.array(trips[name], dtype=np.int64), count)
        tensor.doc_string = BOUND_VALUE_DOC  # "set by --value" in the loop's note
        model.graph.initializer.append(tensor)
        node.input[0] = count
        if len(node.input) > 1:
            node.input[1] = ""
        body = loop_body(node)
        if body.output[0].name != body.input[1].name:  # the body decides whether to go on: now it always does
            go_on = f"{name}/lilou_stated_go_on"  # a constant, not a node: the body's size is what the budget counts
            body.initializer.append(helper.make_tensor(go_on, TensorProto.BOOL, [], [True]))
            body.output[0].name = go_on
        notes.append(f"Loop {name!r} is stated to run {trips[name]} iteration{'s' if trips[name] != 1 else ''} "
                     "(--value): the condition that stops it is still computed in each one")
    return notes


def _check_budget(trips: Mapping[str, int], sizes: Mapping[str, int]) -> None:
    """Refuse stated counts that :mod:`lilou.graph.loops` could not write out: such a loop would stay one node,
    priced from a body without shapes, no answer to stand behind."""
    total = sum(trips[name] * sizes[name] for name in trips)
    if total <= MAX_UNROLLED_NODES:
        return
    if len(trips) == 1:
        (name, count), = trips.items()
        raise LilouInputError(f"--value {name}={count}: {count:,} iterations of its {sizes[name]} nodes are more than "
                              f"Lilou writes out ({MAX_UNROLLED_NODES:,} nodes per model); price at most "
                              f"{MAX_UNROLLED_NODES // max(1, sizes[name]):,} iterations and scale the loop's share")
    raise LilouInputError(f"--value: the stated loops ({', '.join(f'{n}={c}' for n, c in trips.items())}) write "
                          f"{total:,} nodes, more than Lilou writes out ({MAX_UNROLLED_NODES:,} per model); state "
                          "fewer iterations and scale the loops' share")


def _count(name: str, items: Sequence[Value]) -> int:
    # a float must be whole; an int is (float() of a 400-digit one, which JSON allows, was an OverflowError: audit ua46)
    whole = not isinstance(items[0], float) or items[0].is_integer() if items else False
    if len(items) != 1 or isinstance(items[0], bool) or not whole or items[0] < 0:
        shown = ",".join(shown_value(item).lower() for item in items)
        raise LilouInputError(f"--value {name}={shown}: {name!r} is a Loop; give the number of iterations it runs, "
                              "a whole number from 0")
    if int(items[0]) >= UNBOUNDED_TRIPS:
        raise LilouInputError(f"--value {name}={shown_value(int(items[0]))}: more iterations than any loop runs "
                              f"(at most {UNBOUNDED_TRIPS - 1:,})")
    return int(items[0])



def assume_one_iteration(model: onnx.ModelProto, notes: list[str], budget: int) -> int:
    """Write out once (in place) each top-level ``Loop`` whose iterations neither the file, the bound shapes nor
    the user state, writing at most ``budget`` body nodes; how many were written. Kept as one node, such a loop
    was priced from a body whose tensors have no shapes (a TorchScript loop's carried state has none), near zero;
    written out, its one iteration has the shapes of the values it starts from. A counted loop too long to write
    out is left to :mod:`lilou.graph.loops`."""
    start = budget
    for _ in range(MAX_LOOPS):
        constants = scalar_integers(model.graph)
        for index in loop_points(model):
            node = model.graph.node[index]
            count = node.input[0] if node.input else ""
            trips = constants.get(count) if count else None
            every = runs_every_trip(model, index)
            if every and trips is not None and trips < UNBOUNDED_TRIPS:
                continue  # a counted loop: lilou.graph.loops writes it out or prices it as one node
            label, size = node.name or node.op_type, len(loop_body(node).node)
            condition = node.input[1] if len(node.input) > 1 else ""
            never = bool(condition) and scalar_truths(model.graph).get(condition) is False
            if not unroll_loop(model, index, 0 if never else 1, budget):
                continue
            budget -= max(1, 0 if never else size)
            if never:
                notes.append(f"Loop {label!r} never runs: its condition is false before the first iteration")
            elif every and trips is None and count:
                notes.append(f"Loop {label!r} has no constant trip count: costed as one iteration of its body, "
                             "written out (a count the file takes as an input can be given with --value NAME=N)")
            elif every:  # nothing can stop it: no condition, and a count that is ONNX's "no bound" (or none)
                notes.append(f"Loop {label!r} has no bound: no condition stops it and its count is ONNX's \"no bound\" "
                             "(2^31-1 or more), so its iterations are unknown; it is costed as one iteration of its "
                             f"body, written out; {stating_iterations(node, top_level=True)}")
            else:
                bound = "no bound" if trips is None or trips < 0 or trips >= UNBOUNDED_TRIPS else f"at most {trips}"
                notes.append(f"Loop {label!r} stops on a condition known only at run time ({bound}): its iterations "
                             "are unknown, so it is costed as one iteration of its body, written out; "
                             f"{stating_iterations(node, top_level=True)}")
            break  # indices moved: look again
        else:
            break
    return start - budget


def stating_iterations(loop: onnx.NodeProto, top_level: bool) -> str:
    """How a user gives the iterations of a ``Loop`` its data stops, or why they cannot."""
    if loop.name and top_level:
        return f"state them with --value {loop.name}=N (values={{{loop.name!r}: N}} in the API)"
    where = "a loop inside another graph" if not top_level else "a loop without a name in the file"
    return f"{where} cannot be given a count: multiply by the iterations you expect, or export it as a for loop " \
           "without break"
