"""Write ``coverage.json`` of the tensor-core kernel model: rows per dtype x math family x architecture class.

Usage: python scripts/kernel_coverage.py [--out checkpoints/kernel_latency_tensor]
(run by ``make train-kernels``; reads the kernel table, H100 and L4 rows held back as always).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from lilou.data.kernel_table import kernel_table
from lilou.hardware.database import architecture_class
from lilou.latency.kernel_model.coverage import COVERAGE_FILE, coverage_entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="checkpoints/kernel_latency_tensor")
    args = parser.parse_args()
    counts = kernel_table().query(
        "t", "SELECT dtype, family, gpu, count(*) FROM t WHERE family IN ('gemm', 'bmm', 'conv') "
             "AND mode = 'forward' GROUP BY ALL ORDER BY ALL").fetchall()
    rows = [(dtype, family, architecture_class(gpu), gpu, n) for dtype, family, gpu, n in counts]
    out = Path(args.out) / COVERAGE_FILE
    out.write_text(json.dumps(coverage_entries(rows), indent=1) + "\n")
    print(f"wrote {out} ({len(rows)} dtype x family x GPU groups)")


if __name__ == "__main__":
    main()
