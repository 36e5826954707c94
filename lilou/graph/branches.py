"""An ``If`` whose branch is known or chosen, written as that branch's nodes.

ONNX writes a condition as one ``If`` node that holds both branches as subgraphs. Priced as one node, a model
behind an ``If`` was one fallback kernel at no FLOPs: Optimum's ``decoder_model_merged.onnx``, the layout of
most decoder LLMs on the Hugging Face Hub, holds the prompt pass and the cached decode step under one ``If`` on
its input ``use_cache_branch``. :func:`inline_branch` puts the nodes of one branch in the ``If``'s place, so
every op in it is shaped, fused and priced like any other. Which branch: a condition the file states as a
constant (an initializer or a ``Constant`` node) picks its branch exactly; a condition read from a graph input is
known only at run time, and :func:`lilou.graph.dag.shape_model` prices the larger branch at the bound shapes and
says so.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import onnx

from lilou.errors import LilouInputError
from lilou.graph.constants import scalar_truths

BRANCHES = ("then_branch", "else_branch")
T = TypeVar("T")


@dataclass(frozen=True)
class BranchPoint:
    """One top-level ``If``: its index in the node list, its label and what its condition is."""

    index: int
    label: str
    condition: str
    constant: bool | None  # the condition's value when it is a constant, else None
    runtime_input: bool    # the condition is a graph input (set only at run time)


def branch_points(model: onnx.ModelProto) -> list[BranchPoint]:
    """The top-level ``If`` nodes of the standard domain that hold both branches, in node order."""
    graph = model.graph
    constants = scalar_truths(graph)
    inputs = {value.name for value in graph.input} - {tensor.name for tensor in graph.initializer}
    points = []
    for index, node in enumerate(graph.node):
        if node.op_type != "If" or node.domain not in ("", "ai.onnx") or not node.input:
            continue
        if not set(BRANCHES) <= {a.name for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}:
            continue  # a branch missing or misnamed (fuzz seed 3010: 'tjen_branch'): left as the file has it
        condition = node.input[0]
        points.append(BranchPoint(index=index, label=node.name or f"If #{index}", condition=condition,
                                  constant=constants.get(condition), runtime_input=condition in inputs))
    return points


def branch_graph(model: onnx.ModelProto, point: BranchPoint, branch: str) -> onnx.GraphProto:
    """The subgraph ``branch`` (``then_branch`` or ``else_branch``) of the ``If`` at ``point``."""
    node = model.graph.node[point.index]
    return next(a.g for a in node.attribute if a.name == branch and a.type == onnx.AttributeProto.GRAPH)


def inline_branch(model: onnx.ModelProto, point: BranchPoint, branch: str) -> bool:
    """Replace the ``If`` at ``point`` by the nodes of its ``branch`` (in place); False where it cannot be.

    The branch's outputs become the ``If``'s outputs (the node that writes one writes the ``If``'s name instead;
    an output the branch only passes through gets an ``Identity``); its initializers move to the outer graph (its
    value infos do not: shapes are inferred again); a name the branch writes that the outer graph already holds is
    renamed from the node that writes it on, in nested subgraphs too.
    A branch with sparse initializers, or with more outputs than the ``If`` names, is left alone."""
    graph = model.graph
    node = graph.node[point.index]
    body = branch_graph(model, point, branch)
    if body.sparse_initializer or len(body.output) != len(node.output):
        return False
    taken = outer_names(graph, skip=point.index) | set(node.output)
    written = [name for inner in body.node for name in inner.output if name] + [t.name for t in body.initializer]
    renames = {}
    for name in written:
        if name in taken or name in renames:
            renames[name] = _fresh(name, taken)
    outputs = {}  # the branch output a node writes -> the If's output written in its place
    passed: list[tuple[str, str]] = []
    written_by_node = {name for inner in body.node for name in inner.output if name}
    for inner_output, outer_output in zip(body.output, node.output):
        if not outer_output:
            continue
        source = inner_output.name
        if source in written_by_node and source not in outputs:
            outputs[source] = outer_output
        else:
            passed.append((source, outer_output))
    # a name maps to its new one from the node that writes it on: a node before reads the outer value
    active = {tensor.name: renames[tensor.name] for tensor in body.initializer if tensor.name in renames}
    nodes = []
    for inner in body.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        for index, name in enumerate(copy.input):
            copy.input[index] = active.get(name, name)
        rename_in_subgraphs(copy, active)
        for index, name in enumerate(copy.output):
            if name:
                active[name] = outputs.get(name, renames.get(name, name))
                copy.output[index] = active[name]
        nodes.append(copy)
    passed = [(active.get(source, source), target) for source, target in passed]
    nodes += [onnx.helper.make_node("Identity", [source], [target], name=f"{point.label}/{branch}/{target}")
              for source, target in passed]
    for tensor in body.initializer:
        moved = graph.initializer.add()
        moved.CopyFrom(tensor)
        moved.name = renames.get(tensor.name, tensor.name)
    kept = list(graph.node)
    graph.ClearField("node")
    graph.node.extend(kept[:point.index] + nodes + kept[point.index + 1:])
    return True


def outer_names(graph: onnx.GraphProto, skip: int) -> set[str]:
    """Every value name the outer graph holds, the ``If`` being inlined (node ``skip``) aside."""
    names = {value.name for value in graph.input} | {tensor.name for tensor in graph.initializer}
    names |= {value.name for value in graph.value_info} | {value.name for value in graph.output}
    for index, node in enumerate(graph.node):
        names.update(node.input)
        if index != skip:
            names.update(node.output)
    names.discard("")
    return names


def _fresh(name: str, taken: set[str]) -> str:
    suffix = 1
    while f"{name}__{suffix}" in taken:
        suffix += 1
    fresh = f"{name}__{suffix}"
    taken.add(fresh)
    return fresh


def rename_in_subgraphs(node: onnx.NodeProto, renames: dict[str, str]) -> None:
    """Rename the outer-scope values that nested subgraphs read (their own names stay)."""
    for attribute in node.attribute:
        graphs = [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)
        for sub in graphs:
            own = {v.name for v in sub.input} | {t.name for t in sub.initializer}
            own |= {name for inner in sub.node for name in inner.output}
            local = {name: new for name, new in renames.items() if name not in own}
            for inner in sub.node:
                for index, name in enumerate(inner.input):
                    inner.input[index] = local.get(name, name)
                rename_in_subgraphs(inner, local)
            for output in sub.output:
                output.name = local.get(output.name, output.name)


#: ``If`` nodes inlined at most per model (each one's branch may hold more); any after them stay one kernel.
MAX_INLINED = 64
#: Shapings of the whole model spent at most on deciding ``If`` nodes: one to read a condition the shapes decide, two
#: to price both branches of a run-time one; as many as 8 shapings of a 20,000-node model, so a small model (a
#: scripted one of a few hundred nodes with a dozen conditions) resolves them all, within 8 and 64.
SHAPING_BUDGET_NODES = 160_000
MIN_SHAPINGS, MAX_SHAPINGS = 8, 64


def shaping_budget(model: onnx.ModelProto) -> int:
    """How many shapings of ``model`` :func:`resolve_branches` may spend (see :data:`SHAPING_BUDGET_NODES`)."""
    nodes = sum(1 for _ in _all_nodes(model.graph))
    return max(MIN_SHAPINGS, min(MAX_SHAPINGS, SHAPING_BUDGET_NODES // max(nodes, 1)))


def _all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for sub in ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else
                        list(attribute.graphs) if attribute.type == onnx.AttributeProto.GRAPHS else []):
                yield from _all_nodes(sub)

Size = tuple[float, float]  # FLOPs, bytes moved


def resolve_branches(model: onnx.ModelProto, notes: list[str],
                     size: Callable[[onnx.ModelProto], tuple[Size, T]],
                     evaluate: Callable[[onnx.ModelProto, str], bool | None] | None = None
                     ) -> tuple[onnx.ModelProto, T | None]:
    """Inline every ``If`` whose branch is known, and the larger branch of each ``If`` on a run-time condition.

    ``evaluate(model, name)`` gives a condition's value where it follows from the bound shapes (``x.size(0) > 1``
    in a scripted module), or None. ``size`` shapes a candidate model and returns its total FLOPs and bytes with
    whatever the shaping made (the caller's shaped model); where the last candidate chosen is the model returned,
    that is returned with it, so the caller need not shape it again. ``notes`` receives one line per ``If``
    resolved."""
    shaped: T | None = None
    budget = shaping_budget(model)
    for _ in range(MAX_INLINED):
        if _inline_constant_conditions(model, notes):
            shaped = None
        points = [p for p in branch_points(model) if p.constant is None]
        if not points or budget < 2:
            break
        point = points[0]
        value = None
        if not point.runtime_input and evaluate is not None:
            value, budget = evaluate(model, point.condition), budget - 1
        if value is None:
            if budget < 2:
                break
            budget -= 2  # both branches shaped
        if value is not None:
            branch = BRANCHES[0] if value else BRANCHES[1]
            if not inline_branch(model, point, branch):
                break
            shaped = None
            notes.append(f"If {point.label!r} reads its condition from {point.condition!r}, which the shapes decide "
                         f"({str(value).lower()}): its {_named(branch)} is priced, as the one that runs at them")
            continue
        candidates, failed = [], []
        for branch in BRANCHES:
            candidate, inner_notes = onnx.ModelProto(), []
            candidate.CopyFrom(model)
            if not inline_branch(candidate, point, branch):
                return model, shaped
            _inline_constant_conditions(candidate, inner_notes)  # so a nested If is sized as what runs
            try:
                (flops, moved), made = size(candidate)
            except LilouInputError as exc:
                failed.append((branch, exc))
                continue
            candidates.append(((flops, moved), branch, candidate, made, inner_notes))
        if not candidates:
            raise failed[0][1]
        where = (f"the run-time input {point.condition!r}" if point.runtime_input
                 else f"{point.condition!r}, a value known only at run time")
        chosen, branch, model, shaped, inner_notes = max(candidates, key=lambda c: c[0])
        if failed:
            notes.append(f"If {point.label!r} reads its condition from {where}: priced as its {_named(branch)}; its "
                         f"{_named(failed[0][0])} cannot run at these shapes ({failed[0][1]})")
        else:
            other = next(c[0] for c in candidates if c[1] != branch)
            notes.append(f"If {point.label!r} reads its condition from {where}: priced as its {_named(branch)}, the "
                         f"larger of the two at these shapes (the model with it {_sized(chosen)}; with the other "
                         f"{_sized(other)}); the other branch is not priced")
        notes.extend(inner_notes)
    return model, shaped


def _inline_constant_conditions(model: onnx.ModelProto, notes: list[str]) -> bool:
    """Inline every top-level ``If`` whose condition is a constant, nested ones included; True if any was."""
    changed = False
    for _ in range(MAX_INLINED):
        point = next((p for p in branch_points(model) if p.constant is not None), None)
        if point is None:
            break
        branch = BRANCHES[0] if point.constant else BRANCHES[1]
        nodes = len(branch_graph(model, point, branch).node)
        if not inline_branch(model, point, branch):
            break
        changed = True
        notes.append(f"If {point.label!r} has a constant condition ({str(point.constant).lower()}): its "
                     f"{_named(branch)} ({nodes} nodes) is priced, as the only one that runs")
    return changed


def _named(branch: str) -> str:
    return branch.replace("_", " ")


def _sized(size: Size) -> str:
    flops, moved = size
    return f"{_si(flops)}FLOPs, {_si(moved)}B moved"


def _si(value: float) -> str:
    """``7.31 M`` for 7,310,000: three significant digits and a decimal prefix."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}"
    return f"{value:.3g} "
