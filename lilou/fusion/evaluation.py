"""Fusion metrics: edge accuracy, precision/recall/F1 of fused edges, exact-partition rate, and whether the
groups that launch a kernel are the oracle's (edges say which nodes share a kernel, not whether a group of
views launches one)."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lilou.fusion.partition import Partition, fused_edge_labels
from lilou.graph.dag import ModelGraph


def node_groups(graph: ModelGraph, partition: Partition, launching_only: bool = False) -> frozenset[frozenset[str]]:
    """The partition of runtime nodes (launching or not, or only the launching groups) as a set of node sets."""
    runtime = set(graph.runtime_nodes())
    return frozenset(frozenset(n for n in g.nodes if n in runtime) for g in partition.groups
                     if any(n in runtime for n in g.nodes) and (g.launches or not launching_only))


@dataclass
class FusionScore:
    graphs: int = 0
    exact: int = 0
    edges: int = 0
    correct: int = 0
    true_positive: int = 0
    predicted_positive: int = 0
    actual_positive: int = 0
    #: graphs whose launching groups are exactly the oracle's, and kernels launched by each side
    exact_kernels: int = 0
    true_kernels: int = 0
    predicted_kernels: int = 0

    def add(self, truth: Sequence[bool], predicted: Sequence[bool], exact: bool) -> None:
        self.graphs += 1
        self.exact += int(exact)
        self.edges += len(truth)
        self.correct += sum(t == p for t, p in zip(truth, predicted))
        self.true_positive += sum(t and p for t, p in zip(truth, predicted))
        self.predicted_positive += sum(predicted)
        self.actual_positive += sum(truth)

    def add_partitions(self, graph: ModelGraph, truth: Partition, predicted: Partition) -> None:
        t, p = fused_edge_labels(graph, truth), fused_edge_labels(graph, predicted)
        edges = list(t)
        self.add([t[e] for e in edges], [p[e] for e in edges], node_groups(graph, truth) == node_groups(graph, predicted))
        true_kernels, predicted_kernels = node_groups(graph, truth, True), node_groups(graph, predicted, True)
        self.exact_kernels += int(true_kernels == predicted_kernels)
        self.true_kernels += len(true_kernels)
        self.predicted_kernels += len(predicted_kernels)

    def as_dict(self) -> dict[str, float]:
        precision = self.true_positive / self.predicted_positive if self.predicted_positive else 1.0
        recall = self.true_positive / self.actual_positive if self.actual_positive else 1.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"graphs": self.graphs, "edges": self.edges,
                "edge_accuracy": self.correct / self.edges if self.edges else 1.0,
                "precision": precision, "recall": recall, "f1": f1,
                "exact_partition": self.exact / self.graphs if self.graphs else 1.0,
                "exact_kernels": self.exact_kernels / self.graphs if self.graphs else 1.0,
                "kernel_count_ratio": self.predicted_kernels / self.true_kernels if self.true_kernels else 1.0}


def merge(scores: Iterable[FusionScore]) -> FusionScore:
    total = FusionScore()
    for s in scores:
        for field in total.__dataclass_fields__:
            setattr(total, field, getattr(total, field) + getattr(s, field))
    return total
