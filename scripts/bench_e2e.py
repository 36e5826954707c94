"""Benchmark end-to-end latency on NeuSight's eager labels, leave-one-GPU-out (``make bench-e2e``).

Runs :func:`lilou.latency.evaluation.e2e_eval.evaluate` (what `lilou eval` runs): for each of the
five labelled GPUs, the per-kernel model, fallback, dispatch gap and overhead scale
fitted without it, the roofline baseline fitted the same way; prints the tables and
writes <--out>/e2e.{json,csv} (default outputs/bench), with the git commit and date of the run. Fold checkpoints
are cached in outputs/logo (``--cache-dir``) and the labelled models exported into datasets/e2e_models
(``--models-dir``); the first run exports 7 models (about 4 min on 2 unloaded cores) and trains five folds (50-76 s
each), 15 min or more on a loaded machine.

    python scripts/bench_e2e.py [--fusion predicted|oracle|none] [--no-logo] [--no-power] [--seed N] [--models a,b]
                                [--gpus a,b] [--experiment kernel_table] [--ensemble N] [--out DIR]
                                [--cache-dir DIR] [--models-dir DIR]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from lilou.commands.eval import print_tables, write_csv
from lilou.errors import exit_on_input_error
from lilou.research.ablation import git_provenance
from lilou.latency.evaluation.e2e_eval import evaluate
from lilou.latency.evaluation.e2e_workloads import FUSION_MODES

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "outputs" / "bench"


def fold_options(seed: int | None, power: bool, experiment: str | None = None, ensemble: int | None = None) -> dict:
    """evaluate() arguments for fold kernel models of another seed, without the power term, of another
    experiment or ensemble size, cached apart from the default ones."""
    overrides, suffix = [], ""
    if experiment:
        overrides.append(f"experiment={experiment}")
        suffix += f"_{experiment}"
    if ensemble is not None:
        overrides.append(f"ensemble={ensemble}")
        suffix += f"_ensemble{ensemble}"
    if seed is not None:
        overrides.append(f"seed={seed}")
        suffix += f"_seed{seed}"
    if not power:
        overrides += ["model.power_limited=false", "model.power_duration=false"]
        suffix += "_nopower"
    return {"kernel_overrides": overrides, "cache_dir": REPO / "outputs" / f"logo{suffix}"} if overrides else {}


@exit_on_input_error("bench_e2e.py")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fusion", choices=FUSION_MODES, default="predicted")
    parser.add_argument("--no-logo", dest="logo", action="store_false", help="shipped checkpoints (in-sample)")
    parser.add_argument("--no-power", dest="power", action="store_false",
                        help="ablation: fold kernel models without the low-power compute term "
                             "(model.power_limited=false model.power_duration=false; cached in outputs/logo_nopower)")
    parser.add_argument("--seed", type=int, default=None,
                        help="train the fold kernel models with this seed (cached in outputs/logo_seed<N>) instead of "
                             "the shipped config's")
    parser.add_argument("--experiment", default=None,
                        help="fold kernel models of another Hydra experiment, e.g. kernel_table (cached in "
                             "outputs/logo_<experiment>)")
    parser.add_argument("--ensemble", type=int, default=None,
                        help="fold kernel models of N nets each (ensemble=N; cached in outputs/logo_ensemble<N>)")
    parser.add_argument("--models", default=None)
    parser.add_argument("--gpus", default=None)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--name", default="e2e", help="output stem under --out (default e2e)")
    parser.add_argument("--out", type=Path, default=OUT, help="output folder (default outputs/bench)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="fold checkpoints (default outputs/logo, or the variant's outputs/logo_<suffix>)")
    parser.add_argument("--models-dir", type=Path, default=None, help="exported models (default datasets/e2e_models)")
    args = parser.parse_args(argv)
    provenance = git_provenance()  # the code at the start of the run
    options = fold_options(args.seed, args.power, args.experiment, args.ensemble)
    if args.cache_dir is not None:
        options["cache_dir"] = args.cache_dir
    if args.models_dir is not None:
        options["models_dir"] = args.models_dir
    result = evaluate(data_dir=args.data_dir, models=args.models.split(",") if args.models else None,
                      gpus=args.gpus.split(",") if args.gpus else None, fusion=args.fusion, logo=args.logo, **options)
    print_tables(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps({**result.to_json(), "provenance": provenance},
                                                           indent=1) + "\n")
    with open(args.out / f"{args.name}.csv", "w", newline="") as handle:
        write_csv(result, handle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
