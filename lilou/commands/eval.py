"""`lilou eval`: predicted vs measured end-to-end latency on the NeuSight eager labels.

Leave-one-GPU-out by default: for each GPU under test, the per-kernel model, the
fallback, the dispatch gap and the overhead scale are fitted without it (fold
checkpoints cached in ``outputs/logo``; the first run trains five folds, a few
minutes on 2 cores). ``--no-logo`` scores the shipped checkpoints in-sample.
The roofline baseline is scored in the same pipeline (see
:mod:`lilou.latency.evaluation.e2e_eval`).
"""
from __future__ import annotations

import argparse
import csv
import sys

from lilou.commands._common import add_format_option, console, new_table, print_json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval", help="evaluate predicted end-to-end latency against measured labels (leave-one-GPU-out)",
        description="Predict every eager end-to-end label of neusight/e2e (models built from their NeuSight "
                    "configs at the labelled sequence length and batch) and compare with the measurement: APE "
                    "per label, MAPE per GPU, Spearman/Kendall correlation of the GPU ranking per model, beside "
                    "the roofline baseline. Leave-one-GPU-out: the GPU under test contributes to no fitted part.")
    parser.add_argument("--data-dir", default=None, metavar="D",
                        help="data root holding neusight/ (default: $LILOU_DATA_DIR or datasets/)")
    parser.add_argument("--models", default=None, metavar="a,b,...",
                        help="labelled models to evaluate, e.g. bert_large,gpt2_large (default: all)")
    parser.add_argument("--gpus", default=None, metavar="a,b,...",
                        help="GPUs to test (default: every labelled GPU); each is one fold")
    parser.add_argument("--fusion", choices=("predicted", "oracle", "none"), default="predicted",
                        help="kernel groups: predicted by the fusion model (default, as `lilou infer`), the eager "
                             "oracle from the exporter metadata, or none (one kernel per ONNX node)")
    parser.add_argument("--no-logo", dest="logo", action="store_false",
                        help="score the shipped checkpoints instead (in-sample: every GPU was trained on)")
    parser.add_argument("--retrain", action="store_true", help="retrain the fold checkpoints even when cached")
    add_format_option(parser, ("table", "json", "csv"))
    parser.set_defaults(handler=run)


def _names(value: str | None) -> list[str] | None:
    if value is None:
        return None
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        from lilou.errors import LilouInputError

        raise LilouInputError("empty list; name at least one, comma-separated")
    return names


def run(args: argparse.Namespace) -> int:
    from lilou.latency.evaluation.e2e_eval import evaluate

    result = evaluate(data_dir=args.data_dir, models=_names(args.models), gpus=_names(args.gpus),
                      fusion=args.fusion, logo=args.logo, retrain=args.retrain)
    if args.format == "json":
        print_json(result.to_json())
    elif args.format == "csv":
        write_csv(result, sys.stdout)
    else:
        print_tables(result)
    return 0


CSV_COLUMNS = ("gpu", "model", "seq", "batch", "fold", "kernels", "measured_ms", "model_ms", "model_ape",
               "roofline_ms", "roofline_ape")


def write_csv(result, handle) -> None:
    writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(r.to_json() for r in result.rows)


def _fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_tables(result, out=None) -> None:
    out = out or console()
    title = f"{result.mode}, eager FP32, kernel groups: {result.fusion} ({', '.join(result.kernel_groups)})"
    labels = new_table(title=f"end-to-end latency per label: {title}")
    for column in ("gpu", "model", "seq", "batch", "measured ms", "predicted ms", "APE %", "roofline ms",
                   "roofline APE %"):
        labels.add_column(column, justify="left" if column in ("gpu", "model") else "right")
    for r in result.rows:
        labels.add_row(r.gpu, r.model, str(r.seq), str(r.batch), f"{r.measured_ms:.1f}",
                       f"{r.predicted_ms['model']:.1f}", f"{r.ape('model'):.1f}", f"{r.predicted_ms['roofline']:.1f}",
                       f"{r.ape('roofline'):.1f}")
    out.print(labels)

    per_gpu = new_table(title=f"MAPE per GPU ({result.mode})")
    for column in ("gpu", "labels", "MAPE %", "median APE %", "max APE %", "roofline MAPE %", "roofline median %"):
        per_gpu.add_column(column, justify="left" if column == "gpu" else "right")
    for g in result.per_gpu():
        per_gpu.add_row(g["gpu"], str(g["n"]), _fmt(g["model_mape"]), _fmt(g["model_median_ape"]),
                        _fmt(g["model_max_ape"]), _fmt(g["roofline_mape"]), _fmt(g["roofline_median_ape"]))
    total = result.overall()
    per_gpu.add_row("[bold]overall[/bold]", str(total["n"]), f"[bold]{total['model_mape']:.1f}[/bold]",
                    _fmt(total["model_median_ape"]), _fmt(total["model_max_ape"]), _fmt(total["roofline_mape"]),
                    _fmt(total["roofline_median_ape"]))
    per_gpu.add_row("mean of the GPUs' MAPEs", str(total["gpus"]), _fmt(total["model_mean_gpu_mape"]), "", "",
                    _fmt(total["roofline_mean_gpu_mape"]), "")
    out.print(per_gpu)

    ranking = result.ranking()
    if ranking:
        table = new_table(title="GPU ranking per workload (rank correlation of latencies across GPUs)")
        for column in ("workload", "GPUs", "Spearman", "Kendall", "roofline Spearman", "roofline Kendall"):
            table.add_column(column, justify="left" if column == "workload" else "right")
        for w in ranking:
            table.add_row(w["workload"], str(w["n_gpus"]), _fmt(w["model_spearman"], 3), _fmt(w["model_kendall"], 3),
                          _fmt(w["roofline_spearman"], 3), _fmt(w["roofline_kendall"], 3))
        for m in result.ranking_per_model():
            table.add_row(f"[bold]{m['model']}[/bold] (mean of {m['workloads']})", str(m["max_gpus"]),
                          _fmt(m["model_spearman"], 3), _fmt(m["model_kendall"], 3), _fmt(m["roofline_spearman"], 3),
                          _fmt(m["roofline_kendall"], 3))
        out.print(table)
    print_breakdown(result, out)
    out.print(f"{len(result.rows)} labels in {result.seconds:.0f} s; overhead scale / kernel power exponent / "
              "duration exponent beyond tau ms, per fold: "
              + ", ".join(f"{k} {v['model_scale']:.3f} / {v['kernel_power_exponent']:.2f} / "
                          f"{v['kernel_duration_exponent']:.2f} beyond {v['kernel_duration_ms']:.2g}"
                          for k, v in result.folds.items()))


def print_breakdown(result, out) -> None:
    """Where the time goes, measured against predicted, on labels with NeuSight's per-node latencies."""
    from lilou.latency.composition.breakdown import CATEGORIES

    summary = result.breakdown_summary()
    if not summary:
        return
    table = new_table(title="where the time goes: share of the forward pass, measured → predicted % "
                      "(MAPE % of the category's ms)")
    categories = [c for c in CATEGORIES if any(s["category"] == c and (s["measured_share"] or s["model_share"])
                                               for s in summary)]
    table.add_column("gpu")
    table.add_column("labels", justify="right")
    for category in categories:
        table.add_column(category, justify="right")
    for gpu in dict.fromkeys(s["gpu"] for s in summary):
        cells = {s["category"]: s for s in summary if s["gpu"] == gpu}
        table.add_row(gpu, str(cells[CATEGORIES[0]]["labels"]),
                      *[f"{cells[c]['measured_share']:.0f} → {cells[c]['model_share']:.0f} "
                        f"({_fmt(cells[c]['model_mape'], 0)})" for c in categories])
    out.print(table)
    out.print("Measured shares rebuild each forward pass from NeuSight's per-node CSV (first layer x num_layer); "
              "'other' is embeddings, copies and fallback kernels.")
