"""Rule-based fusion baseline: greedy producer -> consumer merging by op-type rules.

In the spirit of nn-Meter's fusion rules: a producer/consumer pair is fused when
the rule table says their op types fuse on this backend. A rule is keyed by
``(producer op, consumer op, producer has several readers)`` because runtimes
fuse differently when a tensor has more than one reader.

Each backend has one table. :func:`tune_rules` learns it from labelled training
graphs (majority vote over the training edges with that key; unseen keys fall
back to the backend's hand-written defaults below), so the baseline is tuned on
the training split only. Merging goes through
:func:`~lilou.fusion.partition.partition_from_fused_edges`, which keeps groups convex.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from lilou.errors import LilouInputError
from lilou.fusion.eager_replay import eager_partition_from_fused_edges, recurrent_layer_boundaries
from lilou.fusion.partition import Edge, Partition, partition_from_fused_edges, runtime_edges
from lilou.graph.costs import ELEMENTWISE_FLOPS, VIEW_OPS
from lilou.graph.dag import ModelGraph

RuleKey = tuple[str, str, bool]
_RULE_FIELDS = frozenset({"producer", "consumer", "shared", "fuse"})
_RETUNE = "tune them with `make train-fusion` (scripts/tune_fusion_rules.py)"

_ELEMENTWISE = frozenset(ELEMENTWISE_FLOPS)
_ANCHORS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum"})


def default_fuses(backend: str, producer: str, consumer: str, shared: bool) -> bool:
    """Hand-written defaults, used for op pairs the training data never showed."""
    if backend == "eager":
        # One aten call may become several ONNX nodes: a view feeding a kernel is read in place.
        return producer in VIEW_OPS and not shared
    # TVM FuseOps: injective/elementwise ops fuse into their producer, including after an anchor.
    if shared:
        return False
    return consumer in _ELEMENTWISE | VIEW_OPS and (producer in _ELEMENTWISE | _ANCHORS | VIEW_OPS)


@dataclass
class RuleTable:
    backend: str
    rules: dict[RuleKey, bool] = field(default_factory=dict)

    def fuses(self, producer: str, consumer: str, shared: bool) -> bool:
        key = (producer, consumer, shared)
        if key in self.rules:
            return self.rules[key]
        return default_fuses(self.backend, producer, consumer, shared)

    def save(self, path: str | Path) -> None:
        rows = [{"producer": p, "consumer": c, "shared": s, "fuse": f} for (p, c, s), f in sorted(self.rules.items())]
        Path(path).write_text(json.dumps({"backend": self.backend, "rules": rows}, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path, backend: str | None = None) -> RuleTable:
        """The table in ``path``; a file that is not one (or, with ``backend``, is another backend's) is one line
        naming it, where it was a KeyError."""
        payload = json.loads(Path(path).read_text())
        rows = payload.get("rules") if isinstance(payload, dict) else None
        if not isinstance(rows, list) or not all(isinstance(r, dict) and set(r) >= _RULE_FIELDS for r in rows) \
                or not isinstance(payload.get("backend"), str):
            raise LilouInputError(f"{path} is not a fusion rule table: it needs a backend and rules, each with "
                                  f"{', '.join(sorted(_RULE_FIELDS))}; {_RETUNE}")
        if backend is not None and payload["backend"] != backend:
            raise LilouInputError(f"{path} holds the {payload['backend']!r} rule table, not {backend!r}'s; {_RETUNE}")
        rules = {(r["producer"], r["consumer"], bool(r["shared"])): bool(r["fuse"]) for r in rows}
        return cls(backend=payload["backend"], rules=rules)


def edge_key(graph: ModelGraph, edge: Edge) -> RuleKey:
    producer, consumer = edge
    dag = graph.dag
    return dag.nodes[producer]["op"], dag.nodes[consumer]["op"], dag.out_degree(producer) > 1


def tune_rules(backend: str, labelled: Iterable[tuple[ModelGraph, dict[Edge, bool]]]) -> RuleTable:
    """Majority vote per rule key over labelled training edges."""
    votes: dict[RuleKey, Counter] = {}
    for graph, labels in labelled:
        for edge, fused in labels.items():
            votes.setdefault(edge_key(graph, edge), Counter())[fused] += 1
    return RuleTable(backend, {key: count[True] > count[False] for key, count in votes.items()})


def rule_partition(graph: ModelGraph, table: RuleTable) -> Partition:
    """Edges fused where the table says so; in eager, never across a recurrent layer's kernel or through a view
    into kernels of different groups, and a group of views alone launches nothing."""
    boundaries = recurrent_layer_boundaries(graph) if table.backend == "eager" else set()
    fused = [e for e in runtime_edges(graph) if table.fuses(*edge_key(graph, e)) and e not in boundaries]
    if table.backend == "eager":
        return eager_partition_from_fused_edges(graph, fused, source="rules")
    return partition_from_fused_edges(graph, fused, table.backend, source="rules")
