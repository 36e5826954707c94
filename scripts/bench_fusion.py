"""Benchmark fusion prediction on held-out model families (``make bench-fusion``).

For each backend, on the test families (never seen in training): the shipped GNN
(checkpoints/fusion_gnn), the rule baseline tuned on the training families only
and each backend's replay alone (the prior the GNN reads: eager's view semantics,
TVM's FuseOps). Edge
accuracy, precision/recall/F1 of fused edges, exact-partition rate and
prediction time per graph, overall and for TorchScript exports separately.
Writes outputs/bench/fusion.{json,csv}.

    python scripts/bench_fusion.py [--data datasets/fusion] [--checkpoint checkpoints/fusion_gnn] [--split test]
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lilou.errors import MissingDataError
from lilou.fusion.benchmark import iter_labelled, score, tuned_rule_table
from lilou.fusion.gnn_predictor import FusionPredictor
from lilou.fusion.rules import rule_partition
from lilou.fusion.eager_replay import replay_eager_partition
from lilou.fusion.tvm_replay import replay_partition

REPO = Path(__file__).resolve().parents[1]
METRICS = ("edge_accuracy", "precision", "recall", "f1", "exact_partition")


def run(data: Path, checkpoint: Path, split: str, backends: list[str]) -> list[dict]:
    if not any(data.glob("*/*.onnx")):
        raise MissingDataError(f"no fusion graphs under {data}; build them with `make fusion-data`")
    predictor = FusionPredictor.load(checkpoint)
    rows = []
    for backend in backends:
        graphs = list(iter_labelled(data, split, backend))
        table = tuned_rule_table(data, backend)
        results = {"gnn": score(graphs, lambda g, b=backend: predictor.predict(g, b)),
                   "rules": score(graphs, lambda g, t=table: rule_partition(g, t))}
        results["replay"] = score(graphs, replay_partition if backend == "tvm" else replay_eager_partition)
        for method, by_group in results.items():
            for group, metrics in by_group.items():
                rows.append({"backend": backend, "method": method, "graphs": group, "n": metrics["graphs"],
                             **{m: metrics[m] for m in METRICS}, "ms_per_graph": metrics.get("ms_per_graph")})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO / "datasets" / "fusion")
    parser.add_argument("--checkpoint", type=Path, default=REPO / "checkpoints" / "fusion_gnn")
    parser.add_argument("--split", default="test", choices=("test", "val", "train"))
    parser.add_argument("--backends", default="eager,tvm")
    args = parser.parse_args(argv)
    rows = run(args.data, args.checkpoint, args.split, args.backends.split(","))
    table = Table(title=f"fusion on held-out families ({args.split} split)")
    for column in ("backend", "method", "graphs", "n", "edge acc", "precision", "recall", "F1", "exact", "ms/graph"):
        table.add_column(column, justify="left" if column in ("backend", "method", "graphs") else "right")
    for r in rows:
        ms = f"{r['ms_per_graph']:.1f}" if r["ms_per_graph"] is not None else ""
        table.add_row(r["backend"], r["method"], r["graphs"], str(r["n"]), f"{100 * r['edge_accuracy']:.2f} %",
                      f"{r['precision']:.4f}", f"{r['recall']:.4f}", f"{r['f1']:.4f}",
                      f"{100 * r['exact_partition']:.1f} %", ms)
    Console(width=160).print(table)
    out = REPO / "outputs" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "fusion.json").write_text(json.dumps(rows, indent=1) + "\n")
    with open(out / "fusion.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
