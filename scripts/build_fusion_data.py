"""Build the fusion dataset (``make fusion-data``): export the zoo catalogue and label it with each oracle.

Resumable: rerun after an interruption and finished graphs and labels are kept.
Output goes to ``<data dir>/fusion`` (``datasets/fusion`` by default; never committed).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lilou.fusion.dataset import build_fusion_dataset, catalogue, select


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("datasets/fusion"))
    parser.add_argument("--backends", default="eager,tvm", help="comma-separated oracles to label with")
    parser.add_argument("--limit", type=int, default=None, help="only the first N samples (smoke runs)")
    parser.add_argument("--label-only", action="store_true", help="label graphs already exported, export none")
    parser.add_argument("--retry-failed", action="store_true", help="retry samples that failed before")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="worker processes (default: one per CPU core)")
    parser.add_argument("--families", default=None,
                        help="comma-separated families to build (`corpus`: the decomposition corpus); default all")
    parser.add_argument("--splits", default=None,
                        help="comma-separated splits to build (train, val, test, test-op, test-exporter); default all")
    args = parser.parse_args(argv)
    families = args.families.split(",") if args.families else None
    splits = args.splits.split(",") if args.splits else None
    total = len(select(catalogue(), families, splits)[: args.limit])
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[sample]}"))
    with Progress(*columns) as progress:
        task = progress.add_task("fusion dataset", total=total, sample="")

        def step(sample_id: str) -> None:
            progress.update(task, advance=1, sample=sample_id)

        counts = build_fusion_dataset(args.out, args.backends.split(","), retry_failed=args.retry_failed,
                                      limit=args.limit, progress=step, label_only=args.label_only, jobs=args.jobs,
                                      families=families, splits=splits)
    print(f"{counts['graphs']} graphs ready, {counts['labels']} new labels, {counts['failed']} failed "
          f"(see {args.out}/*/*.failed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
