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
import subprocess
import sys
import time
from pathlib import Path

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


# The child reports its own peak RSS (VmHWM: ru_maxrss would carry the parent's peak
# across fork and exec), so each run is measured alone.
_CHILD = ("import sys\n"
          "from lilou.cli import main\n"
          "status = main(sys.argv[1:])\n"
          "peak = next(l for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
          "sys.stderr.write('PEAK_RSS_KB=' + peak.split()[1] + '\\n')\n"
          "sys.exit(status)\n")


def run_once(model: Path) -> tuple[float, float, dict]:
    """Wall seconds, peak RSS in MiB and the JSON totals of one fresh `lilou graph` process."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", _CHILD, "graph", str(model), "--format", "json"],
                            capture_output=True, text=True)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"lilou graph failed on {model}: {result.stderr.strip()}")
    peak_kb = int(result.stderr.rsplit("PEAK_RSS_KB=", 1)[1].split()[0])
    return wall, peak_kb / 1024, json.loads(result.stdout)["totals"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    table = Table(title=f"lilou graph, fresh process, median of {args.repeats}")
    for column in ("model", "ONNX MiB", "nodes", "GFLOPs", "wall s (median)", "peak RSS MiB"):
        table.add_column(column, justify="right" if column != "model" else "left")
    for name in args.models.split(","):
        path = export(name, MODELS[name])
        runs = [run_once(path) for _ in range(args.repeats)]
        totals = runs[0][2]
        table.add_row(name, f"{path.stat().st_size / 2**20:.2f}", str(totals["nodes"]),
                      f"{totals['flops'] / 1e9:.2f}", f"{statistics.median(r[0] for r in runs):.2f}",
                      f"{max(r[1] for r in runs):.0f}")
    Console().print(table)


if __name__ == "__main__":
    main()
