"""Kernel-latency ablation: feature groups, model size, leave-one-GPU-out per GPU.

Every variant is the shipped config (``experiment=kernel_latency``) with a few Hydra
overrides, trained once per leave-one-GPU-out fold (train on four NeuSight training
GPUs, test on every kernel row of the fifth); the roofline baseline (fitted floor +
efficiency per family) is fitted on the same training rows. Prints the MAPE of each
variant per held-out GPU and writes outputs/results/ablate_kernels.{csv,png,json}.

Every variant, the "shipped config" row included, trains on a random subsample of each fold's training rows
(``--max-rows``, default 80,000 of roughly 190-200k): that row is the shipped recipe re-fitted on fewer rows, not
the shipped model that ``make bench-kernels`` scores. The recorded command spells the subsample out.

    python scripts/ablate_kernels.py [--quick] [--max-rows N] [--seed S] [--folds t4,p100] [--out DIR]
                                     [hydra overrides ...]

``--out`` (default outputs/results) is created and checked before any training.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lilou.errors import LilouInputError, exit_on_input_error  # noqa: E402
from lilou.latency.kernel_model.folds import KERNEL_FOLDS  # noqa: E402
from lilou.research.ablation import (RESULTS, cached_kernel_rows, command_line, compose, pyplot,  # noqa: E402
                                     quiet_lightning, refuse_owned_overrides, save_figure, write_result)
from lilou.runs import writable_folder  # noqa: E402

NAME = "ablate_kernels"
# Leave-one-GPU-out folds, shared with lilou eval and the kernel ablation.
FOLDS = KERNEL_FOLDS
ALL = "family,shape,roofline,waves,cache,gpu"
# (variant, ablation, overrides on top of experiment=kernel_latency)
VARIANTS: list[tuple[str, str, list[str]]] = [
    ("shipped config (family+waves), subsampled", "features", []),
    ("+ roofline", "features", ["data.feature_groups=[family,waves,roofline]"]),
    ("- waves (family only)", "features", ["data.feature_groups=[family]"]),
    ("all groups", "features", [f"data.feature_groups=[{ALL}]"]),
    ("all - gpu specs", "features", ["data.feature_groups=[family,shape,roofline,waves,cache]"]),
    ("all - roofline - waves", "features", ["data.feature_groups=[family,shape,cache,gpu]"]),
    ("small MLP [64,64]", "size", ["model.hidden=[64,64]"]),
    ("large MLP [512,512,256]", "size", ["model.hidden=[512,512,256]"]),
]
SHIPPED = VARIANTS[0][0]
DATA = ("NeuSight kernels/train: real per-kernel latencies, FP32 PyTorch 2.1 eager, five training GPUs "
        "(A100 40/80GB PCIe, P100, P4, T4, V100); each fold tests on every row of the held-out GPU")


def mape(predicted: np.ndarray, measured: np.ndarray) -> tuple[float, float]:
    ape = 100 * np.abs(predicted - measured) / measured
    return float(np.mean(ape)), float(np.median(ape))


def fold_rows(variant: str, ablation: str, fold: str, rows, predicted: np.ndarray) -> list[dict]:
    """Pooled error over the held-out rows, then per kernel family."""
    out = []
    families = np.asarray(rows.family)
    for family in ["all", *sorted({str(f) for f in families})]:
        mask = np.ones(len(families), bool) if family == "all" else families == family
        m, med = mape(predicted[mask], rows.latency_ms[mask])
        out.append({"variant": variant, "ablation": ablation, "fold": fold, "family": family,
                    "n": int(mask.sum()), "mape": m, "median_ape": med})
    return out


def run(overrides: list[str], folds: dict[str, list[str]], variants=VARIANTS, log=print) -> list[dict]:
    from lilou.latency.evaluation.roofline import RooflineBaseline
    from lilou.latency.kernel_model.training import fit

    results: list[dict] = []
    started = time.perf_counter()
    with cached_kernel_rows(), quiet_lightning():
        for variant, ablation, extra in variants:
            for fold, held_out in folds.items():
                cfg = compose(["experiment=kernel_latency", *overrides, *extra, "output_checkpoint=null",
                               f"data.held_out_gpus=[{','.join(held_out)}]", "trainer.enable_progress_bar=false"])
                predictor, datamodule = fit(cfg)
                rows = datamodule.test_rows
                results += fold_rows(variant, ablation, fold, rows,
                                     predictor.predict(rows.kernels, rows.devices).latency_ms)
                if variant == SHIPPED:  # the baseline does not depend on the variant
                    baseline = RooflineBaseline.fit(datamodule.train_rows)
                    results += fold_rows("roofline baseline", "baseline", fold, rows,
                                         baseline.predict(rows.kernels, rows.devices))
                log(f"{variant} / {fold}: {time.perf_counter() - started:.0f} s")
    return results


def summary(results: list[dict], folds: list[str]) -> list[dict]:
    """One row per variant: pooled MAPE on each held-out GPU and their mean."""
    table = []
    for variant in dict.fromkeys(r["variant"] for r in results):
        picked = {r["fold"]: r for r in results if r["variant"] == variant and r["family"] == "all"}
        row = {"variant": variant, "ablation": next(r["ablation"] for r in results if r["variant"] == variant)}
        for fold in folds:
            row[fold] = picked[fold]["mape"] if fold in picked else None
        row["mean MAPE"] = statistics.fmean(picked[f]["mape"] for f in folds if f in picked)
        row["mean median APE"] = statistics.fmean(picked[f]["median_ape"] for f in folds if f in picked)
        table.append(row)
    return table


def plot(table: list[dict], folds: list[str], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(table) + 1.5))
    y = np.arange(len(table))[::-1]
    ax.barh(y, [r["mean MAPE"] for r in table], color="#9ecae1", label="mean over held-out GPUs")
    markers = "os^Dv"
    for i, fold in enumerate(folds):
        ax.scatter([r[fold] for r in table], y, marker=markers[i % len(markers)], s=22, zorder=3,
                   label=f"held out: {fold}")
    ax.set_yticks(y, [r["variant"] for r in table])
    ax.set_xscale("log")
    ax.set_xlabel("MAPE on the held-out GPU's kernels (%, log scale)")
    ax.set_title("Per-kernel latency, leave-one-GPU-out")
    ax.legend(fontsize=7, loc="lower right")
    save_figure(fig, path)


@exit_on_input_error("ablate_kernels.py")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3000 rows, 1 epoch: minutes, not for citing")
    parser.add_argument("--max-rows", type=int, default=None,
                        help="training rows per fold (default 80000; quick 3000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folds", default=",".join(FOLDS), help="comma-separated subset of " + ",".join(FOLDS))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every variant, e.g. trainer.max_epochs=4")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    refuse_owned_overrides(args.overrides, {"seed": "--seed", "data.max_rows": "--max-rows"})
    max_rows = args.max_rows or (3000 if args.quick else 80000)
    overrides = [f"seed={args.seed}", f"data.max_rows={max_rows}",
                 *(["trainer.max_epochs=1"] if args.quick else []), *args.overrides]
    names = [f.strip() for f in args.folds.split(",") if f.strip()]
    unknown = [f for f in names if f not in FOLDS]
    if unknown or not names:
        raise LilouInputError(f"--folds {args.folds}: unknown fold(s) {', '.join(unknown) or '(none given)'}; "
                              f"known: {', '.join(FOLDS)}")
    folds = {f: FOLDS[f] for f in names}
    writable_folder(args.out, "--out")  # a bad --out was found after every variant had trained, as a traceback
    results = run(overrides, folds)
    table = summary(results, list(folds))
    plot(table, list(folds), args.out / f"{NAME}.png")
    write_result(NAME, results, ["variant", "ablation", "fold", "family", "n", "mape", "median_ape"],
                 title="Per-kernel latency: leave-one-GPU-out MAPE (%) per held-out GPU",
                 table_rows=table, table_columns=["variant", "ablation", *folds, "mean MAPE", "mean median APE"],
                 seed=args.seed, quick=args.quick, data=DATA, started=started, out_dir=args.out,
                 command=command_line() + ("" if args.max_rows else f" --max-rows {max_rows}"),
                 extra={"overrides": overrides, "variants": {v: o for v, _, o in VARIANTS},
                        "base_config": "conf/experiment/kernel_latency.yaml"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
