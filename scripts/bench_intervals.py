"""Benchmark the 90 % intervals and `lilou plan` (``make bench-intervals``).

1. Coverage, leave-one-GPU-out, nested: for each NeuSight fold, the bands are rebuilt (lilou.plan.fit)
   from every *other* fold's residuals and applied to the held-out fold's kernel rows, exactly as the
   runtime looks them up (family, dtype, tier, extrapolated); the same for the end-to-end labels. Coverage
   per family is the mean over folds of each fold's share of rows inside its interval (every GPU counts
   once), with the pooled share of rows beside it; width is the median of ``e^hi - e^lo`` (relative to the
   estimate). Other dtypes (kernel table) are scored the same way with ``--table``: held-out groups are GPUs,
   and non-FP32 GEMMs/convs come from the tensor-core model's leave-one-architecture-out folds (as in
   ``make calibrate``; about 10 min more).
2. Speed: ``lilou plan`` over every GPU and MIG slice and 8 batch sizes, and without ``--batches`` (the search),
   vs one ``lilou infer``, each in a fresh process (median of ``--repeats``, interleaved, Lilou byte-compiled as
   ``make bench-speed`` does), on ResNet-50 exported with a dynamic batch.

Writes <--out>/intervals.json (default outputs/bench), with the git commit and date of the run.
The fold checkpoints are those of ``make bench-e2e`` (outputs/logo).

    python scripts/bench_intervals.py [--table] [--e2e-json outputs/bench/e2e.json] [--repeats 3] [--no-speed]
    python scripts/bench_intervals.py --speed-only --repeats 5     # the plan speed alone (plan_speed.json)
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from lilou.errors import LilouInputError, exit_on_input_error
from lilou.latency.kernel_model.table_sample import checked_per_group
from lilou.plan.calibration import Calibration
from lilou.research.ablation import git_provenance
from lilou.plan.conformal import COVERAGE
from lilou.checkpoints import KERNEL_LATENCY_TENSOR, checkpoint_path
from lilou.plan.fit import (BAND_METHODS, DEFAULT_BAND_METHOD, E2E_MIN_LABELS, RESIDUALS_FILE, Residuals, band,
                            e2e_residuals, extrapolated_bands, kernel_bands, load_residuals, neusight_residuals,
                            pooled_kernel_residuals, table_residuals, tensor_residuals)

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "outputs" / "bench"
PER_GROUP = 4000  # --per-group: kernel-table rows per source x GPU x dtype x family (with --table --recompute)
MODELS_DIR = REPO / "datasets" / "bench_models"
TARGET = (0.86, 0.94)


def nested_kernel_coverage(residuals: Residuals, coverage: float = COVERAGE,
                           method: str = DEFAULT_BAND_METHOD) -> tuple[list[dict], list[dict]]:
    """(per fold x family rows, per family summary) of leave-one-group-out coverage of held-out residuals."""
    held = residuals.take(residuals.tier != "trained")
    per_fold = []
    for group in sorted(set(held.group)):
        # nothing measured on the held-out GPUs stays, not even the shipped model's rows on them (``trained``)
        gpus = sorted(set(held.gpu[held.group == group]))
        rest = residuals.take((residuals.group != group) & ~np.isin(residuals.gpu, gpus))
        calibration = Calibration({"coverage": coverage, "ranges": {}, "kernel": kernel_bands(rest, coverage, method),
                                   "extrapolated": extrapolated_bands(rest, coverage, method), "e2e": {"lo": 0.0, "hi": 0.0},
                                   "kernel_model": {"fingerprint": "", "trained_on": []}})
        test = held.take(held.group == group)
        for family, dtype in sorted({(f, d) for f, d in zip(test.family, test.dtype)}):
            rows = test.take((test.family == family) & (test.dtype == dtype))
            lo, hi = np.empty(len(rows)), np.empty(len(rows))
            for i, (tier, extrapolated) in enumerate(zip(rows.tier, rows.extrapolated)):
                found = calibration.kernel_band(family, dtype, tier, bool(extrapolated))
                lo[i], hi[i] = found.lo, found.hi
            inside = (rows.residual >= lo) & (rows.residual <= hi)
            per_fold.append({"group": str(group), "family": str(family), "dtype": str(dtype),
                             "tier": ",".join(sorted(set(rows.tier))), "rows": int(len(rows)),
                             "coverage": float(inside.mean()), "median_width": float(np.median(np.exp(hi) - np.exp(lo))),
                             "extrapolated_rows": int(rows.extrapolated.sum()), "_inside": int(inside.sum())})
    summary = []
    for family, dtype in sorted({(r["family"], r["dtype"]) for r in per_fold}):
        rows = [r for r in per_fold if (r["family"], r["dtype"]) == (family, dtype)]
        total = sum(r["rows"] for r in rows)
        summary.append({"family": family, "dtype": dtype, "groups": len(rows), "rows": total,
                        "coverage": statistics.fmean(r["coverage"] for r in rows),
                        "pooled_coverage": sum(r["_inside"] for r in rows) / total,
                        "min_group_coverage": min(r["coverage"] for r in rows),
                        "max_group_coverage": max(r["coverage"] for r in rows),
                        "median_width": statistics.median(r["median_width"] for r in rows)})
    for r in per_fold:
        r.pop("_inside")
    return per_fold, summary


def nested_e2e_coverage(e2e: Residuals, coverage: float = COVERAGE,
                        method: str = DEFAULT_BAND_METHOD) -> tuple[list[dict], dict]:
    per_fold = []
    for group in sorted(set(e2e.group)):
        found = band(e2e.take(e2e.group != group), coverage, min_rows=E2E_MIN_LABELS, method=method)
        test = e2e.take(e2e.group == group)
        if found is None:
            continue
        inside = (test.residual >= found["lo"]) & (test.residual <= found["hi"])
        per_fold.append({"group": str(group), "labels": int(len(test)), "lo": found["lo"], "hi": found["hi"],
                         "coverage": float(inside.mean()), "inside": int(inside.sum()),
                         "width": float(np.exp(found["hi"]) - np.exp(found["lo"]))})
    total = sum(r["labels"] for r in per_fold)
    return per_fold, {"folds": len(per_fold), "labels": total,
                      "coverage": statistics.fmean(r["coverage"] for r in per_fold),
                      "pooled_coverage": sum(r["inside"] for r in per_fold) / total,
                      "median_width": statistics.median(r["width"] for r in per_fold)}


def resnet50_dynamic() -> Path:
    path = MODELS_DIR / "resnet50-dynamic.onnx"
    if not path.exists():
        from lilou.zoo.export import export_onnx

        MODELS_DIR.mkdir(parents=True, exist_ok=True)
        export_onnx("resnet50", path, batch=1, strip_weights=True, dynamic_batch=True)
    return path


def speed(repeats: int) -> dict:
    """Plan and infer in fresh processes, interleaved (one infer after each plan, so that both see the same load
    on a shared machine), with Lilou byte-compiled as an install leaves it."""
    from fresh_process import byte_compiled, run_lilou

    model = str(resnet50_dynamic().relative_to(REPO))
    cases = {"infer": ["infer", model, "--gpu", "a10g", "--batch", "1", "--format", "json"],
             "plan": ["plan", model, "--slo-ms", "20", "--batches", "1,2,4,8,16,32,64,128", "--format", "json"],
             # without --batches: the search (the ladder 1, 2, 4 ... 256, the first rows' max batch exactly)
             "plan_search": ["plan", model, "--slo-ms", "20", "--format", "json"]}
    walls: dict[str, list[float]] = {name: [] for name in cases}
    peaks: dict[str, float] = {}
    outputs: dict[str, object] = {}
    with byte_compiled(REPO / "lilou"):
        for argv in cases.values():
            run_lilou(argv)  # warm the file cache; not counted
        for _ in range(repeats):
            for name, argv in cases.items():
                wall, peaks[name], outputs[name] = run_lilou(argv)
                walls[name].append(wall)
    out = {name: {"command": "lilou " + " ".join(argv), "median_s": statistics.median(walls[name]),
                  "walls_s": walls[name], "peak_rss_mib": peaks[name]} for name, argv in cases.items()}
    for plan in ("plan", "plan_search"):
        out[plan]["devices"] = outputs[plan]["devices"]
        out[plan]["planned"] = len(outputs[plan]["plan"])
    out["ratio"] = out["plan"]["median_s"] / out["infer"]["median_s"]
    out["ratios"] = [p / i for p, i in zip(walls["plan"], walls["infer"])]
    out["search_ratio"] = out["plan_search"]["median_s"] / out["infer"]["median_s"]
    out["search_ratios"] = [p / i for p, i in zip(walls["plan_search"], walls["infer"])]
    return out


def print_rows(title: str, rows: list[dict], columns: list[str]) -> None:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="left" if column in ("family", "dtype", "group", "tier") else "right")
    for row in rows:
        table.add_row(*[f"{100 * row[c]:.1f} %" if "coverage" in c else f"{row[c]:.3f}" if isinstance(row[c], float)
                        else str(row[c]) for c in columns])
    Console(width=200).print(table)


def recompute(args) -> tuple[Residuals, Residuals]:
    """The residual pools, from the fold checkpoints (as ``make calibrate`` builds them)."""
    kernel = neusight_residuals()
    if args.table:  # pooled as make calibrate pools them (before session 33 the NeuSight convolutions stayed too)
        tensor = tensor_residuals() if checkpoint_path(KERNEL_LATENCY_TENSOR, required=False).exists() else None
        kernel = pooled_kernel_residuals(kernel, table_residuals(args.per_group).residuals, tensor)
    return kernel, e2e_residuals(args.e2e_json)


@exit_on_input_error("bench_intervals.py")
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="also score the kernel table's other dtypes")
    parser.add_argument("--recompute", action="store_true",
                        help=f"redo the folds instead of reading {RESIDUALS_FILE.relative_to(REPO)} (make calibrate)")
    parser.add_argument("--per-group", type=int, default=PER_GROUP)
    parser.add_argument("--e2e-json", type=Path, default=None, help="reuse a `make bench-e2e` result")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-speed", dest="speed", action="store_false")
    parser.add_argument("--band-method", choices=BAND_METHODS, default=DEFAULT_BAND_METHOD,
                        help=f"how the nested bands are made (default {DEFAULT_BAND_METHOD}; lilou.plan.fit.band)")
    parser.add_argument("--speed-only", action="store_true",
                        help="only the plan / infer speed, written to <--out>/plan_speed.json")
    parser.add_argument("--out", type=Path, default=OUT, help="output folder (default outputs/bench)")
    args = parser.parse_args(argv)
    checked_per_group(args.per_group, "--per-group")
    if args.repeats < 1:
        raise LilouInputError(f"--repeats {args.repeats}: give at least 1")
    if args.e2e_json is not None and not args.e2e_json.is_file():  # read only after the kernel folds, as a traceback
        raise LilouInputError(f"--e2e-json {args.e2e_json}: no such file (`make bench-e2e` writes "
                              "outputs/bench/e2e.json)")
    started = time.perf_counter()
    provenance = git_provenance()  # the code at the start of the run (a commit during it is not its code)
    if args.speed_only:
        report_speed({"speed": speed(args.repeats), "provenance": provenance}, args.out / "plan_speed.json", started)
        return
    if args.recompute or not RESIDUALS_FILE.exists():
        kernel, e2e = recompute(args)
        source = "recomputed from the fold checkpoints"
    else:  # the residuals `make calibrate` pooled from the same folds, as it saved them
        unread = [f"--e2e-json {args.e2e_json}"] * (args.e2e_json is not None) + \
            [f"--per-group {args.per_group}"] * (args.per_group != PER_GROUP)
        if unread:  # silently scored the saved residuals, not the given bench-e2e result or sample
            print(f"bench_intervals.py: note: {' and '.join(unread)} not used: the residuals are "
                  f"{RESIDUALS_FILE} (make calibrate); --recompute rebuilds them with it",
                  file=sys.stderr, flush=True)
        kernel, e2e, _ = load_residuals(RESIDUALS_FILE)
        source = f"{RESIDUALS_FILE.relative_to(REPO)} (written by make calibrate)"
        if not args.table:
            kernel = kernel.take(kernel.source == "neusight")
    print(f"residuals: {source}")
    per_fold, summary = nested_kernel_coverage(kernel, method=args.band_method)
    e2e_folds, e2e_summary = nested_e2e_coverage(e2e, method=args.band_method)
    print_rows("kernels, leave-one-GPU-out nested coverage of the 90 % interval (mean over held-out groups)", summary,
               ["family", "dtype", "groups", "rows", "coverage", "pooled_coverage", "min_group_coverage",
                "max_group_coverage", "median_width"])
    print_rows("kernels, per held-out fold", [r for r in per_fold if r["dtype"] == "fp32"],
               ["group", "family", "tier", "rows", "coverage", "median_width", "extrapolated_rows"])
    print_rows("end to end, leave-one-GPU-out nested coverage", e2e_folds,
               ["group", "labels", "coverage", "lo", "hi", "width"])
    print(f"end to end: coverage {100 * e2e_summary['coverage']:.1f} % (mean over folds), pooled "
          f"{100 * e2e_summary['pooled_coverage']:.1f} %, median width {100 * e2e_summary['median_width']:.1f} %")
    result = {"residuals": source, "band_method": args.band_method, "coverage_target": list(TARGET), "nominal": COVERAGE,
              "kernel_summary": summary,
              "kernel_per_fold": per_fold, "e2e_per_fold": e2e_folds, "e2e_summary": e2e_summary,
              "provenance": provenance}
    if args.speed:
        result["speed"] = speed(args.repeats)
    report_speed(result, args.out / "intervals.json", started)


def report_speed(result: dict, path: Path, started: float) -> None:
    """Print the speed (when measured) and write ``result`` to ``path``."""
    s = result.get("speed")
    if s:
        print(f"speed: plan {s['plan']['median_s']:.2f} s ({s['plan']['devices']} devices x 8 batches) vs infer "
              f"{s['infer']['median_s']:.2f} s: {s['ratio']:.2f}x (target <= 3x; per pair "
              f"{min(s['ratios']):.2f}-{max(s['ratios']):.2f}x)")
        if "plan_search" in s:
            print(f"speed: plan without --batches (searched) {s['plan_search']['median_s']:.2f} s: "
                  f"{s['search_ratio']:.2f}x (per pair {min(s['search_ratios']):.2f}-{max(s['search_ratios']):.2f}x)")
    result["wall_s"] = time.perf_counter() - started
    result.setdefault("provenance", git_provenance())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
