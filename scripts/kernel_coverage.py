"""Write ``coverage.json`` of the tensor-core kernel model: rows per dtype x math family x architecture class.

Usage: python scripts/kernel_coverage.py [--out checkpoints/kernel_latency_tensor]
(training the tensor-core model writes it too; this reads the whole kernel table, H100 and L4 rows held back as
always: for a checkpoint folder trained before training wrote it).
"""
from __future__ import annotations

import argparse

from lilou.latency.kernel_model.coverage import table_coverage, write_coverage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="checkpoints/kernel_latency_tensor")
    args = parser.parse_args()
    coverage, groups = table_coverage()
    out = write_coverage(args.out, coverage)
    print(f"wrote {out} ({groups} dtype x family x GPU groups)")


if __name__ == "__main__":
    main()
