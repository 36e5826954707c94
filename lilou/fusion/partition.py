"""Kernel groups: which ONNX nodes run together as one GPU kernel.

A :class:`Partition` covers every node of a :class:`~lilou.graph.dag.ModelGraph`
exactly once. Groups that launch a kernel are listed in execution order; nodes
that launch none (view/shape-only ops, constant subgraphs a runtime folds) sit in
groups with ``launches=False`` so nothing is dropped silently.

Oracles (``lilou.fusion.backends``), the rule baseline and the GNN all produce
partitions; the GNN and the rules produce them from *fused edges* through
:func:`partition_from_fused_edges`, which keeps every group convex: contracting a
group never creates a cycle, so the kernels can run in some order.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from lilou.errors import LilouInputError
from lilou.graph.costs import VIEW_OPS
from lilou.graph.dag import ModelGraph

Edge = tuple[str, str]


@dataclass(frozen=True)
class KernelGroup:
    """ONNX node names (file order) that one kernel computes, or that launch none."""

    nodes: tuple[str, ...]
    launches: bool = True
    #: Why no kernel is launched: "view" (metadata-only ops) or "constant" (folded before run time).
    reason: str = ""


@dataclass
class Partition:
    backend: str
    groups: list[KernelGroup]
    #: Where the grouping came from: "oracle", "gnn" or "rules".
    source: str = "oracle"
    warnings: list[str] = field(default_factory=list)

    @property
    def kernels(self) -> list[KernelGroup]:
        """Groups that launch a GPU kernel, in execution order."""
        return [g for g in self.groups if g.launches]

    def group_index(self) -> dict[str, int]:
        return {node: i for i, group in enumerate(self.groups) for node in group.nodes}

    def to_json(self) -> dict:
        return {
            "backend": self.backend,
            "kernels": [{"nodes": list(g.nodes)} for g in self.kernels],
            "no_kernel": [{"nodes": list(g.nodes), "reason": g.reason} for g in self.groups if not g.launches],
        }

    @classmethod
    def from_json(cls, payload: Mapping, source: str = "oracle") -> Partition:
        groups = [KernelGroup(tuple(k["nodes"])) for k in payload["kernels"]]
        groups += [KernelGroup(tuple(k["nodes"]), launches=False, reason=k.get("reason", ""))
                   for k in payload.get("no_kernel", [])]
        return cls(backend=payload["backend"], groups=groups, source=source)


def check_covers(graph: ModelGraph, partition: Partition) -> None:
    """Raise ValueError unless every node of ``graph`` is in exactly one group."""
    seen: dict[str, int] = {}
    for i, group in enumerate(partition.groups):
        for node in group.nodes:
            if node in seen:
                raise ValueError(f"node {node!r} is in groups {seen[node]} and {i}")
            seen[node] = i
    missing = set(graph.dag.nodes) - set(seen)
    extra = set(seen) - set(graph.dag.nodes)
    if missing or extra:
        raise ValueError(f"partition misses {sorted(missing)[:5]} and has unknown nodes {sorted(extra)[:5]}")


def runtime_edges(graph: ModelGraph) -> list[Edge]:
    """Producer -> consumer edges between nodes a runtime executes, in file order.

    These are the edges the fusion models classify; edges from constant subgraphs
    carry no decision (the constant side is folded).
    """
    dag = graph.dag
    order = {n: d["order"] for n, d in dag.nodes(data=True) if not d["constant"]}  # runtime nodes only
    edges = [(u, v) for u, v in dag.edges if u in order and v in order]
    return sorted(edges, key=lambda e: (order[e[0]], order[e[1]]))


def topological_file_order(graph: ModelGraph) -> list[str]:
    """``nx.lexicographical_topological_sort(dag, key=order)``: file order, as loaded graphs are topological."""
    dag = graph.dag
    order = {n: d["order"] for n, d in dag.nodes(data=True)}
    return _lexicographic_topological_order(order, dag.edges, lambda: dag)


def _lexicographic_topological_order(key: Mapping[Hashable, Any], edges: Iterable[tuple[Hashable, Hashable]],
                                     build: Callable[[], nx.DiGraph]) -> list:
    """What ``nx.lexicographical_topological_sort(build(), key=key.__getitem__)`` returns, without its heap when
    the answer is plain: where no two keys tie and every edge runs forward in key order, the sort by key is
    the one order whose every step takes the least key ready. Otherwise (and for a cycle's error) networkx
    decides, on the graph ``build`` makes (``key`` holds its nodes in insertion order)."""
    if len(set(key.values())) == len(key) and all(key[u] < key[v] for u, v in edges):
        return sorted(key, key=key.__getitem__)
    return list(nx.lexicographical_topological_sort(build(), key=key.__getitem__))


def fused_edge_labels(graph: ModelGraph, partition: Partition) -> dict[Edge, bool]:
    """For each runtime edge: do both ends sit in the same kernel group?"""
    group = partition.group_index()
    return {(u, v): group[u] == group[v] for u, v in runtime_edges(graph)}


def partition_from_groups(graph: ModelGraph, runtime_groups: Iterable[Iterable[str]], backend: str,
                          source: str = "oracle", no_kernel: Iterable[Iterable[str]] = ()) -> Partition:
    """Order groups of runtime nodes for execution and add the no-kernel groups.

    Runtime nodes missing from ``runtime_groups`` become singleton groups; constant
    nodes each get a ``launches=False`` group; view-only groups (all ops in
    ``VIEW_OPS``) and the groups in ``no_kernel`` launch nothing.
    """
    dag = graph.dag
    data = dict(dag.nodes(data=True))
    order = {n: d["order"] for n, d in data.items()}
    member: dict[str, int] = {}
    groups: list[list[str]] = []
    silent: set[int] = set()
    labelled = [(nodes, True) for nodes in no_kernel] + [(nodes, False) for nodes in runtime_groups]
    for nodes, is_silent in labelled:
        nodes = [n for n in nodes if n in data and not data[n]["constant"] and n not in member]
        if nodes:
            if is_silent:
                silent.add(len(groups))
            for n in nodes:
                member[n] = len(groups)
            groups.append(sorted(nodes, key=order.__getitem__))
    for n in graph.runtime_nodes():
        if n not in member:
            member[n] = len(groups)
            groups.append([n])

    between = [(member[u], member[v]) for u, v in runtime_edges(graph) if member[u] != member[v]]

    def quotient() -> nx.DiGraph:
        graph = nx.DiGraph()
        graph.add_nodes_from(range(len(groups)))
        graph.add_edges_from(between)
        return graph

    try:
        ordered = _lexicographic_topological_order({g: order[nodes[0]] for g, nodes in enumerate(groups)}, between,
                                                   quotient)
    except nx.NetworkXUnfeasible as exc:
        raise LilouInputError(f"{backend} kernel groups of {graph.name} are not convex: they form a cycle") from exc

    result = []
    for g in ordered:
        launches = g not in silent and not all(data[n]["op"] in VIEW_OPS for n in groups[g])
        result.append(KernelGroup(tuple(groups[g]), launches=launches, reason="" if launches else "view"))
    result += [KernelGroup((n,), launches=False, reason="constant")
               for n in graph.nodes_in_order() if data[n]["constant"]]
    return Partition(backend=backend, groups=result, source=source)


def partition_from_group_ids(graph: ModelGraph, group_of: Mapping[str, Hashable], backend: str,
                             source: str) -> Partition:
    """Kernel groups from a group id per runtime node (what the replays compute)."""
    members: dict[Hashable, list[str]] = {}
    for node, group in group_of.items():
        members.setdefault(group, []).append(node)
    return partition_from_groups(graph, members.values(), backend, source=source)


def partition_from_fused_edges(graph: ModelGraph, fused: Iterable[Edge], backend: str,
                               source: str = "gnn", scores: Mapping[Edge, float] | None = None) -> Partition:
    """Groups = nodes joined by fused edges, repaired so every group stays convex.

    Nodes are visited in topological order; a node joins the group of each fused
    predecessor unless the merged group would have a path that leaves it and comes
    back (which no single kernel can compute). Predecessors are tried by
    decreasing ``scores`` (e.g. GNN confidence) when given, else in file order.
    Memory is linear in the graph (:class:`_ConvexGroups`).
    """
    dag = graph.dag
    nodes = graph.runtime_nodes()
    index = {n: i for i, n in enumerate(nodes)}
    fused_set = set(fused)
    groups = _ConvexGroups([[index[s] for s in dag.successors(n) if s in index] for n in nodes],
                           [[index[p] for p in dag.predecessors(n) if p in index] for n in nodes])
    for n in nodes:
        v = index[n]
        preds = [p for p in dag.predecessors(n) if p in index and (p, n) in fused_set]
        if scores is not None:
            preds.sort(key=lambda p: -scores.get((p, n), 0.0))
        else:
            preds.sort(key=index.__getitem__)
        for p in preds:
            groups.join(index[p], v)
    return partition_from_groups(graph, [[nodes[i] for i in members] for members in groups.members()], backend,
                                 source=source)


class _ConvexGroups:
    """Disjoint groups of the nodes ``0 .. n-1`` of a DAG (``successors[i]``, ``predecessors[i]``), joined only
    while each stays convex.

    Two convex groups joined are convex unless a path runs from one to the other through a node of neither (a path
    that leaves the union and comes back has such a stretch: were both its ends in one group, that group would not
    be convex). :meth:`join` looks for that path from the smaller group's members, within the span of positions the
    path can cover when the numbering is topological (as a graph's runtime nodes are). Memory is linear in the graph:
    the ancestor and descendant bitsets of every node this replaced held N^2/8 bytes, 1.2 GB for a chain of 100,000
    nodes (a 3 MB file)."""

    def __init__(self, successors: list[list[int]], predecessors: list[list[int]]) -> None:
        self.successors, self.predecessors = successors, predecessors
        count = len(successors)
        self._parent = list(range(count))
        self._members: list[list[int] | None] = [[i] for i in range(count)]
        self._low, self._high = list(range(count)), list(range(count))
        self._label = list(range(count))   # the group's place among the groups: its first node's, then the kept one's
        self._topological = all(i < j for i, after in enumerate(successors) for j in after)

    def find(self, i: int) -> int:
        parent = self._parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(self, kept: int, joining: int) -> bool:
        """Put ``joining``'s group into ``kept``'s unless the union would not be convex; whether they are one now."""
        g, h = self.find(kept), self.find(joining)
        if g == h:
            return True
        if self._bridged(g, h):
            return False
        small, large = (g, h) if len(self._members[g]) < len(self._members[h]) else (h, g)
        self._parent[small] = large
        self._members[large].extend(self._members[small])
        self._members[small] = None
        self._low[large] = min(self._low[g], self._low[h])
        self._high[large] = max(self._high[g], self._high[h])
        self._label[large] = self._label[g]
        return True

    def _bridged(self, g: int, h: int) -> bool:
        """Whether a path runs between the groups rooted at ``g`` and ``h`` through a node of neither."""
        small, large = (g, h) if len(self._members[g]) <= len(self._members[h]) else (h, g)
        if self._topological:  # a path out of `small` ends in `large` before its last node, and in reverse
            return (self._reaches(small, large, self.successors, lambda i: i < self._high[large])
                    or self._reaches(small, large, self.predecessors, lambda i: i > self._low[large]))
        return (self._reaches(small, large, self.successors, lambda i: True)
                or self._reaches(small, large, self.predecessors, lambda i: True))

    def _reaches(self, start: int, target: int, edges: list[list[int]], within: Callable[[int], bool]) -> bool:
        """Whether ``edges`` lead from group ``start`` to group ``target`` through one or more nodes of neither, each
        ``within``."""
        find, seen, stack = self.find, set(), []
        for i in self._members[start]:
            for j in edges[i]:
                if j not in seen and within(j) and find(j) not in (start, target):
                    seen.add(j)
                    stack.append(j)
        while stack:
            for j in edges[stack.pop()]:
                if j in seen:
                    continue
                root = find(j)
                if root == target:
                    return True
                if root != start and within(j):
                    seen.add(j)
                    stack.append(j)
        return False

    def members(self) -> list[list[int]]:
        """The groups' nodes, in increasing order, the groups in the order of their labels."""
        roots = sorted((i for i, members in enumerate(self._members) if members is not None), key=self._label.__getitem__)
        return [sorted(self._members[root]) for root in roots]

