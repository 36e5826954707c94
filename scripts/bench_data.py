"""Benchmark the kernel-measurement table: what it holds, what was left out and why, and what it costs.

1. Builds every source's cached parquet part from the mirror in a fresh cache folder (a cold
   build, as in CI) in a child process, and reads its wall time and peak memory (ru_maxrss).
2. Queries the built table warm in another child process: the whole table to Arrow, and one
   filtered query (BF16 GEMMs), each with its time and the process's peak memory.
3. Rows per source x GPU x dtype x family, and rows dropped per source and reason.

Prints the tables and writes outputs/bench/data.json.

    python scripts/bench_data.py [--data-dir DIR] [--keep-cache]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "outputs" / "bench"

_BUILD = """
import json, resource, sys, time
from lilou.data.kernel_table import build_table
start = time.perf_counter()
builds = build_table(data_dir=sys.argv[1])
wall = time.perf_counter() - start
print(json.dumps({"wall_s": wall, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "sources": [{"name": b.name, "rows": b.rows, "seconds": b.seconds, "dropped": b.dropped}
                              for b in builds]}))
"""

_QUERY = """
import json, resource, sys, time
from lilou.data.kernel_table import kernel_table, load_rows
out = {}
start = time.perf_counter()
table = kernel_table(data_dir=sys.argv[1]).to_arrow_table()
out["full_table_s"] = time.perf_counter() - start
out["full_table_rows"] = table.num_rows
out["full_table_arrow_mb"] = table.nbytes / 2**20
del table
start = time.perf_counter()
bf16 = load_rows("family = 'gemm' AND dtype = 'bf16'", columns=["gpu", "m", "n", "k", "latency_ms"], data_dir=sys.argv[1])
out["bf16_gemm_query_s"] = time.perf_counter() - start
out["bf16_gemm_rows"] = bf16.num_rows
counts = kernel_table(data_dir=sys.argv[1]).aggregate("source, gpu, dtype, family, count(*) AS n").order("1, 2, 3, 4")
out["counts"] = [dict(zip(("source", "gpu", "dtype", "family", "rows"), r)) for r in counts.fetchall()]
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


# Runs a child's code; bad input (a data folder without a source) is its one line and exit status 2, not a traceback.
_CHILD = """
import sys
from lilou.errors import LilouInputError, one_line
try:
    exec(compile(sys.argv.pop(2), "<bench_data child>", "exec"), {"__name__": "__main__"})
except LilouInputError as exc:
    print(one_line(exc), file=sys.stderr)
    sys.exit(2)
"""


def run_child(code: str, data_dir: str, cache: str) -> dict:
    env = {**os.environ, "LILOU_CACHE_DIR": cache}
    done = subprocess.run([sys.executable, "-c", _CHILD, data_dir, textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode == 2:
        print(f"bench_data.py: error: {done.stderr.strip().splitlines()[-1]}", file=sys.stderr)
        sys.exit(2)
    if done.returncode != 0:
        sys.exit(f"bench_data: child failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("LILOU_DATA_DIR", str(REPO.parent / "shared" / "datasets")))
    parser.add_argument("--keep-cache", action="store_true", help="build into ~/.cache/lilou instead of a fresh folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lilou-bench-data-") as fresh:
        cache = os.environ.get("LILOU_CACHE_DIR", str(Path("~/.cache/lilou").expanduser())) if args.keep_cache else fresh
        build = run_child(_BUILD, args.data_dir, cache)
        query = run_child(_QUERY, args.data_dir, cache)
    result = {"build": build, "query": query, "data_dir": args.data_dir}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "data.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    from lilou.research.ablation import write_provenance

    write_provenance(OUT / "data.json")
    report(result)


def report(result: dict) -> None:
    console = Console()
    build, query = result["build"], result["query"]
    cost = Table(title="kernel table: cost on this machine")
    cost.add_column("step")
    cost.add_column("seconds", justify="right")
    cost.add_column("peak RSS MB", justify="right")
    cost.add_row("cold build, every source (parquet cache)", f"{build['wall_s']:.1f}", f"{build['peak_rss_mb']:.0f}")
    for source in build["sources"]:
        cost.add_row(f"  {source['name']}", f"{source['seconds']:.1f}", "")
    cost.add_row(f"whole table to Arrow ({query['full_table_rows']:,} rows, {query['full_table_arrow_mb']:.0f} MB)",
                 f"{query['full_table_s']:.2f}", f"{query['peak_rss_mb']:.0f}")
    cost.add_row(f"BF16 GEMMs, 5 columns ({query['bf16_gemm_rows']:,} rows)", f"{query['bf16_gemm_query_s']:.2f}", "")
    console.print(cost)

    rows = Table(title="rows per source, GPU, dtype and family")
    for column in ("source", "gpu", "dtype", "family", "rows"):
        rows.add_column(column, justify="right" if column == "rows" else "left")
    for row in query["counts"]:
        rows.add_row(row["source"], row["gpu"], row["dtype"], row["family"], f"{row['rows']:,}")
    console.print(rows)

    dropped = Table(title="rows left out of the table, and why")
    for column in ("source", "reason", "rows"):
        dropped.add_column(column, justify="right" if column == "rows" else "left")
    for source in build["sources"]:
        for reason, count in sorted(source["dropped"].items(), key=lambda item: -item[1]):
            dropped.add_row(source["name"], reason, f"{count:,}")
    console.print(dropped)


if __name__ == "__main__":
    main()
