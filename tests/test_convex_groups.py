"""partition_from_fused_edges: convex groups with memory linear in the graph, the same groups as the bitset closure."""
from __future__ import annotations

import random
import tracemalloc
from dataclasses import dataclass

import networkx as nx
import pytest

from lilou.fusion.partition import partition_from_fused_edges


@dataclass
class _Graph:
    """What partition_from_fused_edges reads of a ModelGraph: its DAG (order, constant, op) and name."""

    dag: nx.DiGraph
    name: str = "g"

    def nodes_in_order(self) -> list[str]:
        return sorted(self.dag.nodes, key=lambda n: self.dag.nodes[n]["order"])

    def runtime_nodes(self) -> list[str]:
        return [n for n in self.nodes_in_order() if not self.dag.nodes[n]["constant"]]


def _random_graph(rng: random.Random) -> _Graph:
    dag = nx.DiGraph()
    count = rng.randrange(2, 60)
    for i in range(count):
        dag.add_node(f"n{i}", order=i, constant=False, op=rng.choice(["Relu", "Add", "Reshape"]))
    density = rng.random() * 0.6
    for j in range(count):
        for i in range(max(0, j - 6), j):
            if rng.random() < density:
                dag.add_edge(f"n{i}", f"n{j}")
        if j > 3 and rng.random() < 0.2:  # a long skip, as a residual
            dag.add_edge(f"n{rng.randrange(j)}", f"n{j}")
    return _Graph(dag)


def _bitset_groups(graph: _Graph, fused, scores) -> list[list[str]]:
    """The groups the ancestor/descendant bitsets of every node gave before (the reference: N^2/8 bytes)."""
    dag, nodes = graph.dag, graph.runtime_nodes()
    index = {n: i for i, n in enumerate(nodes)}
    ancestors, descendants = [0] * len(nodes), [0] * len(nodes)
    for n in nodes:
        for p in dag.predecessors(n):
            ancestors[index[n]] |= ancestors[index[p]] | (1 << index[p])
    for n in reversed(nodes):
        for s in dag.successors(n):
            descendants[index[n]] |= descendants[index[s]] | (1 << index[s])
    group_of = list(range(len(nodes)))
    members = {i: 1 << i for i in range(len(nodes))}
    anc, desc = dict(enumerate(ancestors)), dict(enumerate(descendants))
    for n in nodes:
        v = index[n]
        preds = [p for p in dag.predecessors(n) if (p, n) in fused]
        preds.sort(key=(lambda p, n=n: -scores.get((p, n), 0.0)) if scores is not None else index.__getitem__)
        for p in preds:
            g, h = group_of[index[p]], group_of[v]
            if g == h:
                continue
            bits, a, d = members[g] | members[h], anc[g] | anc[h], desc[g] | desc[h]
            if a & d & ~bits:
                continue
            for i in range(len(nodes)):
                if members[h] >> i & 1:
                    group_of[i] = g
            members[g], anc[g], desc[g] = bits, a, d
            del members[h], anc[h], desc[h]
    return [[nodes[i] for i in range(len(nodes)) if bits >> i & 1] for bits in members.values()]


def test_groups_are_those_of_the_bitset_closure_on_random_graphs(monkeypatch):
    import lilou.fusion.partition as partition

    seen = []
    monkeypatch.setattr(partition, "partition_from_groups", lambda graph, groups, *a, **k: seen.append(groups))
    rng = random.Random(7)
    for _ in range(400):
        graph = _random_graph(rng)
        edges = list(graph.dag.edges)
        fused = {e for e in edges if rng.random() < 0.7}
        scores = {e: rng.random() for e in edges} if rng.random() < 0.5 else None
        partition.partition_from_fused_edges(graph, fused, "tvm", scores=scores)
        assert seen.pop() == _bitset_groups(graph, fused, scores)


def _chain(count: int) -> _Graph:
    dag = nx.DiGraph()
    for i in range(count):
        dag.add_node(f"r{i}", order=i, constant=False, op="Relu")
        if i:
            dag.add_edge(f"r{i - 1}", f"r{i}")
    return _Graph(dag)


def _peak(count: int, fused: bool) -> int:
    graph = _chain(count)
    edges = list(graph.dag.edges) if fused else []
    tracemalloc.start()
    try:
        partition = partition_from_fused_edges(graph, edges, "tvm")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(partition.kernels) == (1 if fused else count)
    return peak


@pytest.mark.parametrize("fused", [True, False])
def test_a_chain_twice_as_long_takes_twice_the_memory_to_group(fused):
    """The bitsets of every node's ancestors and descendants held N^2/8 bytes (1.2 GB for a 3 MB file of 100,000
    nodes): doubling the chain took ~2.8 times the memory at 6,000 nodes, and more the longer the chain."""
    assert _peak(12_000, fused) < 2.3 * _peak(6_000, fused)
