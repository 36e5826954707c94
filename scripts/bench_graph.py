"""Benchmark `lilou graph`: wall time and peak memory in a fresh process, per zoo model.

Exports each model weight-free once (cached under outputs/bench/), then runs
`lilou graph MODEL --format json` REPEATS times, each in a new process, and
prints the median wall time and the median peak RSS with the graph totals.

    python scripts/bench_graph.py [--repeats 5] [--models resnet50,bert-base,gpt3_27]
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from fresh_process import run_lilou
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "outputs" / "bench"
# name -> zoo export options
MODELS: dict[str, dict] = {
    "resnet50": {"batch": 1},
    "bert-base": {"batch": 1, "seq": 128},
    "gpt3_27": {"batch": 1, "seq": 128},
}


def export(name: str, options: dict) -> Path:
    path = CACHE / f"{name}-{'-'.join(f'{k}{v}' for k, v in sorted(options.items()))}.onnx"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        from lilou.zoo.export import export_onnx

        export_onnx(name, path, strip_weights=True, **options)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: give at least 1")
    unknown = [name for name in args.models.split(",") if name not in MODELS]
    if unknown:
        parser.error(f"--models: unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    table = Table(title=f"lilou graph, fresh process, median of {args.repeats}")
    for column in ("model", "ONNX MiB", "nodes", "GFLOPs", "wall s (median)", "peak RSS MiB"):
        table.add_column(column, justify="right" if column != "model" else "left")
    rows = []
    for name in args.models.split(","):
        path = export(name, MODELS[name])
        runs = [run_lilou(["graph", str(path), "--format", "json"]) for _ in range(args.repeats)]
        totals = runs[0][2]["totals"]
        rows.append({"model": name, "onnx_mib": path.stat().st_size / 2**20, "nodes": totals["nodes"],
                     "gflops": totals["flops"] / 1e9, "median_s": statistics.median(r[0] for r in runs),
                     "peak_rss_mib": max(r[1] for r in runs), "repeats": args.repeats})
        table.add_row(name, f"{rows[-1]['onnx_mib']:.2f}", str(totals["nodes"]), f"{rows[-1]['gflops']:.2f}",
                      f"{rows[-1]['median_s']:.2f}", f"{rows[-1]['peak_rss_mib']:.0f}")
    Console().print(table)
    out = REPO / "outputs" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "graph.json").write_text(json.dumps(rows, indent=1) + "\n")
    from lilou.research.ablation import write_provenance

    write_provenance(out / "graph.json")


if __name__ == "__main__":
    main()
