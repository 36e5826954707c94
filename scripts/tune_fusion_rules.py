"""Tune the rule baseline's tables on the training families and write one JSON per backend.

    python scripts/tune_fusion_rules.py --data datasets/fusion --out checkpoints/fusion_rules
"""
from __future__ import annotations

import argparse
from pathlib import Path

from lilou.fusion.benchmark import tuned_rule_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=Path("datasets/fusion"))
    parser.add_argument("--out", type=Path, default=Path("checkpoints/fusion_rules"))
    parser.add_argument("--backends", default="eager,tvm")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for backend in args.backends.split(","):
        table = tuned_rule_table(args.data, backend)
        table.save(args.out / f"{backend}.json")
        print(f"{backend}: {len(table.rules)} rules -> {args.out / f'{backend}.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
