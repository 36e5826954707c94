"""Benchmark fusion prediction on the held-out splits (``make bench-fusion``).

Three splits, none of whose graphs is seen in training (``lilou.fusion.dataset``):

* ``test`` — leave-family-out: the zoo families ConvNeXt, Swin, T5, GPT-Neo, MobileViT, ELECTRA, NAS-Bench-201;
* ``test-op`` — leave-op-out: every decomposition-corpus graph of the held-out ops (``TEST_OPS``);
* ``test-exporter`` — leave-exporter-setting-out: the corpus written with a held-out setting (``TEST_EXPORTERS``).

For each split and backend (eager, tvm): the held-out protocol GNN (``outputs/fusion_heldout``, the shipped recipe
trained on the ``train`` split alone: ``python -m lilou.train experiment=fusion_gnn_heldout``; the shipped
checkpoints/fusion_gnn also learns from these splits, so its scores on them are training scores), the
rule baseline (the shipped tables in checkpoints/fusion_rules, or tuned on the training
split with ``--tune-rules``) and each backend's replay alone (eager's view semantics,
TVM's FuseOps). For eager, the GNN and the replay are scored a second time on the same files with every node and
value name prefixed ("names hidden"), so that the exporter's names (lilou/fusion/export_names.py) say nothing: what
a file from another exporter, or with renamed nodes, gets. Edge accuracy, precision/recall/F1 of fused edges,
exact-partition rate, prediction time per graph, whether the targets (99.5 % edges, 90 % exact) are met, and
the GNN's remaining misses by pattern (producer op -> consumer op). Writes
outputs/bench/fusion.{json,csv} and fusion_misses.json; a split with no labelled graph (not built yet) is
reported as missing, not scored.

    python scripts/bench_fusion.py [--data datasets/fusion] [--checkpoint outputs/fusion_heldout]
                                   [--splits test,test-op,test-exporter] [--backends eager,tvm] [--opset18-zoo]

TorchScript exports (``-ts``, labelled by TVM only: they carry no aten-call metadata) are also scored on eager by
kernel count: the GNN's and the replay's launching groups against the eager oracle's count on the dynamo export of
the same module (eager runs the same kernels whichever exporter wrote the file) -> fusion_torchscript.json.

The eager rule that keeps an aten call whole (a recognised decomposition, RoPE's ``torch.cat``) caps the GNN's joins;
every oracle-fused edge of every labelled graph it would split is counted -> fusion_whole_calls.json (0 expected).

``--opset18-zoo`` also exports four one-layer zoo transformers (BERT-base, BERT-large, GPT-2, ViT-B/16)
the way most users do (dynamo, opset 18, default optimiser: erf GELU as five nodes) and scores the
GNN on eager against the oracle, with and without the replay's gelu rule -> fusion_opset18_zoo.json
(about 2 min of exports).
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lilou.errors import MissingDataError, exit_on_input_error
from lilou.fusion.benchmark import edge_misses, iter_labelled, score, tuned_rule_table, whole_calls_against_oracle
from lilou.fusion.dataset import HELD_OUT_SPLITS, TEST_EXPORTERS, TEST_OPS, split_of
from lilou.fusion.eager_replay import replay_eager_partition
from lilou.fusion.gnn_predictor import FusionPredictor
from lilou.fusion.rules import RuleTable, rule_partition
from lilou.research.ablation import write_provenance
from lilou.fusion.tvm_replay import replay_partition

REPO = Path(__file__).resolve().parents[1]
METRICS = ("edge_accuracy", "precision", "recall", "f1", "exact_partition", "exact_kernels", "kernel_count_ratio")
TARGETS = {"edge_accuracy": 0.995, "exact_partition": 0.90}
SPLIT_NAMES = {"test": "leave-family-out", "test-op": "leave-op-out", "test-exporter": "leave-exporter-setting-out",
               "val": "validation", "train": "training"}


def rule_table(data: Path, backend: str, tune: bool) -> RuleTable:
    shipped = REPO / "checkpoints" / "fusion_rules" / f"{backend}.json"
    return tuned_rule_table(data, backend) if tune or not shipped.exists() else RuleTable.load(shipped)


def run(data: Path, checkpoint: Path, splits: list[str], backends: list[str], tune_rules: bool = False,
        top_misses: int = 12) -> tuple[list[dict], dict]:
    if not any(data.glob("*/*.onnx")):
        raise MissingDataError(f"no fusion graphs under {data}; build them with `make fusion-data`")
    predictor = FusionPredictor.load(checkpoint)
    rows, misses = [], {}
    for backend in backends:
        table = rule_table(data, backend, tune_rules)
        methods = {"gnn": lambda g, b=backend: predictor.predict(g, b),
                   "rules": lambda g, t=table: rule_partition(g, t),
                   "replay": replay_partition if backend == "tvm" else replay_eager_partition}
        for split in splits:
            graphs = list(iter_labelled(data, split, backend))
            if not graphs:
                rows.append({"split": split, "backend": backend, "method": "gnn", "graphs": "missing", "n": 0})
                continue
            scored = [(method, predict, graphs) for method, predict in methods.items()]
            if backend == "eager":  # the same files with names that say nothing about aten calls
                hidden = list(iter_labelled(data, split, backend, hide_names=True))
                scored += [("gnn, names hidden", methods["gnn"], hidden),
                           ("replay, names hidden", methods["replay"], hidden)]
            for method, predict, items in scored:
                for group, metrics in score(items, predict).items():
                    met = all(metrics[m] >= t for m, t in TARGETS.items())
                    rows.append({"split": split, "backend": backend, "method": method, "graphs": group,
                                 "n": metrics["graphs"], **{m: metrics[m] for m in METRICS},
                                 "ms_per_graph": metrics.get("ms_per_graph"), "meets_targets": met})
            misses[f"{split}/{backend}"] = edge_misses(graphs, methods["gnn"])[:top_misses]
    return rows, misses


OPSET18_ZOO = (("bert-base", {"num_hidden_layers": 1}, {"seq": 32}), ("bert-large", {"num_hidden_layers": 1}, {"seq": 32}),
               ("gpt2", {"n_layer": 1}, {"seq": 32}), ("vit-b16", {"num_hidden_layers": 1}, {"image_size": 96}))


def opset18_zoo(checkpoint: Path, folder: Path) -> list[dict]:
    """The GNN (eager) on opset-18 optimised zoo exports, with the replay's gelu rule and without it."""
    import lilou.fusion.eager_replay as eager_replay
    from lilou.fusion.backends.eager import eager_partition
    from lilou.fusion.evaluation import FusionScore
    from lilou.graph.dag import build_graph
    from lilou.graph.loading import load_onnx
    from lilou.zoo.export import export_onnx
    from lilou.zoo.registry import build

    predictor = FusionPredictor.load(checkpoint)
    folder.mkdir(parents=True, exist_ok=True)
    rows, chains = [], eager_replay._GELU_CHAINS
    for name, overrides, shape in OPSET18_ZOO:
        path = folder / f"{name}-1layer-o18.onnx"
        if not path.exists():
            export_onnx(build(name, **shape, **overrides), path, strip_weights=True, optimize=True, opset=18)
        graph = build_graph(load_onnx(path), name=path.stem, restore_folded=False)
        truth = eager_partition(load_onnx(path), graph)
        for rule, value in (("with gelu rule", chains), ("without gelu rule", ())):
            eager_replay._GELU_CHAINS = value  # an ablation of the replay: restored below
            try:
                result = FusionScore()
                result.add_partitions(graph, truth, predictor.predict(graph, "eager"))
            finally:
                eager_replay._GELU_CHAINS = chains
            rows.append({"model": name, "replay": rule, **result.as_dict()})
    return rows


def torchscript_counts(data: Path, checkpoint: Path) -> list[dict]:
    """Eager kernel counts predicted on TorchScript exports (read as ``lilou infer`` reads them: folded batch norms
    put back) against the eager oracle's count on the dynamo export of the same module."""
    from lilou.fusion.benchmark import torchscript_twins
    from lilou.graph.dag import load_graph

    predictor = FusionPredictor.load(checkpoint)
    rows = []
    for twin in torchscript_twins(data):
        graph = load_graph(twin.path)
        predicted = {"gnn": predictor.predict(graph, "eager"), "replay": replay_eager_partition(graph)}
        rows.append({"family": twin.family, "spec": twin.spec, "split": split_of(twin.family, "ts"),
                     "oracle_kernels": twin.oracle_kernels,
                     **{f"{m}_kernels": sum(1 for g in p.groups if g.launches) for m, p in predicted.items()}})
    return rows


def summarise_counts(rows: list[dict], method: str) -> dict:
    """Share of TorchScript exports with the oracle's kernel count, and predicted / oracle kernels in total."""
    equal = sum(r[f"{method}_kernels"] == r["oracle_kernels"] for r in rows)
    return {"graphs": len(rows), "same_count": equal / len(rows) if rows else 0.0,
            "kernel_ratio": sum(r[f"{method}_kernels"] for r in rows) / max(sum(r["oracle_kernels"] for r in rows), 1)}


@exit_on_input_error("bench_fusion.py")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO / "datasets" / "fusion")
    parser.add_argument("--checkpoint", type=Path, default=REPO / "outputs" / "fusion_heldout",
                        help="the GNN to score (default: the held-out protocol model of make bench-fusion)")
    parser.add_argument("--splits", default=",".join(HELD_OUT_SPLITS),
                        help="comma-separated: test (leave-family-out), test-op, test-exporter, val, train")
    parser.add_argument("--backends", default="eager,tvm")
    parser.add_argument("--tune-rules", action="store_true", help="tune the rule tables on the training split")
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "bench")
    parser.add_argument("--opset18-zoo", action="store_true",
                        help="also score opset-18 optimised exports of four zoo transformers (see above)")
    args = parser.parse_args(argv)
    rows, misses = run(args.data, args.checkpoint, args.splits.split(","), args.backends.split(","),
                       args.tune_rules)
    console = Console(width=170)
    table = Table(title=f"fusion on held-out splits (held-out ops: {', '.join(sorted(TEST_OPS))}; "
                        f"held-out exporter settings: {', '.join(sorted(TEST_EXPORTERS))})")
    columns = ("split", "backend", "method", "graphs", "n", "edge acc", "precision", "recall", "F1", "exact",
               "exact kernels", "kernels / oracle's", "ms/graph", "targets")
    for column in columns:
        table.add_column(column, justify="left" if column in ("split", "backend", "method", "graphs") else "right")
    for r in rows:
        if r["graphs"] == "missing":
            table.add_row(SPLIT_NAMES.get(r["split"], r["split"]), r["backend"], "-", "not built", "0",
                          *[""] * 9)
            continue
        ms = f"{r['ms_per_graph']:.1f}" if r["ms_per_graph"] is not None else ""
        table.add_row(SPLIT_NAMES.get(r["split"], r["split"]), r["backend"], r["method"], r["graphs"], str(r["n"]),
                      f"{100 * r['edge_accuracy']:.2f} %", f"{r['precision']:.4f}", f"{r['recall']:.4f}",
                      f"{r['f1']:.4f}", f"{100 * r['exact_partition']:.1f} %", f"{100 * r['exact_kernels']:.1f} %",
                      f"{r['kernel_count_ratio']:.4f}", ms,
                      "met" if r["meets_targets"] else "missed")
    console.print(table)
    for key, patterns in misses.items():
        if patterns:
            console.print(f"[bold]GNN misses, {key}[/bold]: " + "; ".join(
                f"{p['producer']} -> {p['consumer']} ({p['oracle']} by the oracle): {p['edges']} edges in "
                f"{p['graphs']} graphs" for p in patterns[:6]))
    args.out.mkdir(parents=True, exist_ok=True)
    # fusion.json stays a list of scored rows (scripts/bench_summary.py reads it so); the misses and the
    # splits that were not built go beside it.
    scored = [r for r in rows if r["graphs"] != "missing"]
    (args.out / "fusion.json").write_text(json.dumps(scored, indent=1) + "\n")
    write_provenance(args.out / "fusion.json")
    missing = sorted({f"{r['split']}/{r['backend']}" for r in rows if r["graphs"] == "missing"})
    (args.out / "fusion_misses.json").write_text(json.dumps({"misses": misses, "not_built": missing}, indent=1) + "\n")
    if scored:
        with open(args.out / "fusion.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(scored[0]))
            writer.writeheader()
            writer.writerows(scored)
    counts = torchscript_counts(args.data, args.checkpoint)
    summary = {f"{split}/{method}": summarise_counts([r for r in counts if split == "all" or r["split"] == split], method)
               for split in ("all", *sorted({r["split"] for r in counts})) for method in ("gnn", "replay")}
    for key, s in summary.items():
        console.print(f"TorchScript exports, eager kernel count vs the dynamo twin's oracle, {key}: {s['graphs']} graphs, "
                      f"{100 * s['same_count']:.1f} % with the same count, predicted / oracle kernels {s['kernel_ratio']:.4f}")
    (args.out / "fusion_torchscript.json").write_text(json.dumps({"summary": summary, "graphs": counts}, indent=1) + "\n")
    whole = whole_calls_against_oracle(args.data)
    for key, s in whole.items():
        console.print(f"eager ceiling (aten calls kept whole, library calls alone), against the oracle ({key}): "
                      f"{s['split_by_the_rule']} of "
                      f"{s['oracle_fused_edges']} fused edges split, {s['graphs']} graphs")
    (args.out / "fusion_whole_calls.json").write_text(json.dumps(whole, indent=1) + "\n")
    if args.opset18_zoo:
        zoo = opset18_zoo(args.checkpoint, args.out / "fusion_opset18_zoo")
        for r in zoo:
            console.print(f"{r['model']} (1 layer, dynamo opset 18, optimised), eager GNN {r['replay']}: "
                          f"{100 * r['edge_accuracy']:.2f} % edges, exact {'yes' if r['exact_partition'] else 'no'}")
        (args.out / "fusion_opset18_zoo.json").write_text(json.dumps(zoo, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
