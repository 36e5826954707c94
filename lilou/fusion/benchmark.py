"""Score fusion predictors (GNN, rules) against oracle labels on a family split."""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lilou.fusion.dataset import exporter_of, split_of
from lilou.fusion.evaluation import FusionScore
from lilou.fusion.export_names import without_exporter_names
from lilou.fusion.partition import Partition, fused_edge_labels
from lilou.fusion.rules import RuleTable, tune_rules
from lilou.graph.dag import ModelGraph, build_graph
from lilou.graph.loading import load_onnx


@dataclass
class LabelledGraph:
    spec_id: str
    family: str
    exporter: str
    graph: ModelGraph
    truth: Partition


#: What ``iter_labelled(..., hide_names=True)`` puts in front of every node and value name.
HIDDEN_NAME_PREFIX = "x"


def iter_labelled(root: Path, split: str, backend: str, hide_names: bool = False) -> Iterator[LabelledGraph]:
    """Labelled graphs of a split; with ``hide_names`` their node and value names are prefixed so that they no
    longer follow the exporter's patterns (:func:`~lilou.fusion.export_names.without_exporter_names`)."""
    for label in sorted(root.glob(f"*/*.{backend}.json")):
        family = label.parent.name
        model = label.with_name(label.name.removesuffix(f".{backend}.json") + ".onnx")
        spec_id = model.stem
        if split != "all" and split_of(family, exporter_of(model)) != split:
            continue
        proto = load_onnx(model)
        payload = json.loads(label.read_text())
        if hide_names:
            proto = without_exporter_names(proto, HIDDEN_NAME_PREFIX)
            payload = _prefixed(payload, HIDDEN_NAME_PREFIX)
        graph = build_graph(proto, name=spec_id, restore_folded=False)
        yield LabelledGraph(spec_id, family, spec_id.rsplit("-", 1)[1], graph, Partition.from_json(payload))


def _prefixed(payload: dict, prefix: str) -> dict:
    """An oracle partition's JSON with every node name prefixed."""
    return {**payload,
            "kernels": [{**k, "nodes": [prefix + n for n in k["nodes"]]} for k in payload["kernels"]],
            "no_kernel": [{**g, "nodes": [prefix + n for n in g["nodes"]]} for g in payload.get("no_kernel", [])]}


def tuned_rule_table(root: Path, backend: str) -> RuleTable:
    """The rule baseline tuned on the training families only."""
    labelled = ((g.graph, fused_edge_labels(g.graph, g.truth)) for g in iter_labelled(root, "train", backend))
    return tune_rules(backend, labelled)


def score(graphs: list[LabelledGraph], predict: Callable[[ModelGraph], Partition]) -> dict[str, dict]:
    """Metrics overall and by exporter group ("dynamo" = dynamo exports, "torchscript"), plus ms per graph."""
    groups = {"all": FusionScore(), "dynamo": FusionScore(), "torchscript": FusionScore()}
    seconds = 0.0
    for item in graphs:
        start = time.perf_counter()
        predicted = predict(item.graph)
        seconds += time.perf_counter() - start
        for key in ("all", "torchscript" if item.exporter == "ts" else "dynamo"):
            groups[key].add_partitions(item.graph, item.truth, predicted)
    result = {key: s.as_dict() for key, s in groups.items() if s.graphs}
    if graphs:
        result["all"]["ms_per_graph"] = 1000 * seconds / len(graphs)
    return result


def edge_misses(graphs: list[LabelledGraph], predict: Callable[[ModelGraph], Partition]) -> list[dict]:
    """Wrong edges grouped by pattern: (producer op, consumer op, what the oracle says), most frequent first.

    Each pattern lists how many edges and graphs it costs and up to three example graphs, so a
    report can name *what* is left unfused (``Div -> Erf split, oracle fuses``), not only how much.
    """
    patterns: dict[tuple[str, str, bool], dict] = {}
    for item in graphs:
        truth, predicted = fused_edge_labels(item.graph, item.truth), fused_edge_labels(item.graph, predict(item.graph))
        for (u, v), fused in truth.items():
            if predicted[(u, v)] == fused:
                continue
            key = (item.graph.dag.nodes[u]["op"], item.graph.dag.nodes[v]["op"], fused)
            entry = patterns.setdefault(key, {"edges": 0, "graphs": set()})
            entry["edges"] += 1
            entry["graphs"].add(item.spec_id)
    rows = [{"producer": p, "consumer": c, "oracle": "fused" if fused else "split",
             "predicted": "split" if fused else "fused", "edges": e["edges"], "graphs": len(e["graphs"]),
             "examples": sorted(e["graphs"])[:3]}
            for (p, c, fused), e in patterns.items()]
    return sorted(rows, key=lambda r: (-r["edges"], r["producer"], r["consumer"]))


#: The dynamo exports whose eager oracle stands for a TorchScript export of the same module, in order of preference.
_DYNAMO_TWINS = ("d18", "dynamo", "d20", "d23")


@dataclass
class TorchScriptTwin:
    spec: str            # the sample without its exporter suffix
    family: str
    path: Path           # the TorchScript export (no eager label: it carries no aten-call metadata)
    oracle_kernels: int  # kernels the eager oracle counts on the dynamo export of the same module


def torchscript_twins(root: Path) -> Iterator[TorchScriptTwin]:
    """TorchScript exports with a dynamo export of the same module labelled by the eager oracle.

    Eager runs the same kernels whichever exporter wrote the file, so the oracle's kernel count on the dynamo
    twin is the count a prediction on the TorchScript file should reach; node names differ between the two files,
    so groups cannot be compared one by one."""
    for path in sorted(root.glob("*/*-ts.onnx")):
        spec = path.name.removesuffix("-ts.onnx")
        label = next((path.with_name(f"{spec}-{e}.eager.json") for e in _DYNAMO_TWINS
                      if path.with_name(f"{spec}-{e}.eager.json").exists()), None)
        if label is None:
            continue
        truth = Partition.from_json(json.loads(label.read_text()))
        yield TorchScriptTwin(spec, path.parent.name, path, sum(1 for g in truth.groups if g.launches))


def whole_calls_against_oracle(root: Path) -> dict:
    """How often the eager ceiling on the GNN's joins (:func:`lilou.fusion.eager_replay.kept_whole`: aten calls kept
    whole, a Gemm or convolution alone but for the views into it) would split an edge the eager oracle fuses, over
    every labelled graph, names shown and hidden: it caps the GNN's joins, so it must never contradict a label."""
    from collections import Counter

    from lilou.fusion.eager_replay import kept_whole

    result: dict = {}
    for hidden in (False, True):
        graphs = fused = 0
        split: Counter = Counter()
        for labelled in iter_labelled(root, "all", "eager", hide_names=hidden):
            graph = labelled.graph
            edges = [edge for edge, joined in fused_edge_labels(graph, labelled.truth).items() if joined]
            kept = set(kept_whole(graph, edges))
            split.update(f"{graph.dag.nodes[u]['op']} -> {graph.dag.nodes[v]['op']}" for u, v in edges
                         if (u, v) not in kept)
            graphs, fused = graphs + 1, fused + len(edges)
        result["names hidden" if hidden else "names shown"] = {
            "graphs": graphs, "oracle_fused_edges": fused, "split_by_the_rule": sum(split.values()),
            "split_patterns": dict(split.most_common())}
    return result
