"""FP32 convolutions by geometry, leave-one-architecture-out (``make bench-conv-geometry``).

NeuSight measured 3x3, stride-1 convolutions only; DeepBench measured FP32 convolutions of other geometries
(1x1, strided, 5x5, 7x7, wide 5x10 / 5x20 filters; cuDNN 6-7, host-timer loops) on eight GPUs from Maxwell to
Turing. For each architecture with such rows, the kernel model of ``--experiment`` is trained without any GPU
of that architecture (NeuSight's and DeepBench's rows alike) and scored on the held-out convolutions, each row
against the model's time for its own timing method (the eager floor for NeuSight's, the host-loop floor where the
model learned one; a model with one floor uses the eager one for every row, as the kernel folds do).

The same fold models also price DeepBench's FP32 backward-data rows as the ``ConvTranspose`` that runs that kernel
(``nn.ConvTranspose2d``): described as the forward convolution whose input gradient it computes, as Lilou prices
one, alone ("as forward", the ratio 1) and times the backward-data / forward ratio fitted on the measured pairs of
the *other* architectures (``lilou/latency/kernel_model/transposed.py``), beside the plain roofline at the FP32 peak.

Prints a table per architecture and geometry, their means, and writes ``outputs/bench/conv_geometry[_<experiment>].json``.

    python scripts/bench_conv_geometry.py [--experiment kernel_latency] [hydra overrides ...]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

from lilou.errors import exit_on_input_error
from lilou.hardware.database import architecture_class
from lilou.latency.kernel_model.dataset import KernelDataset, concat_datasets, dataset_from_sample
from lilou.latency.kernel_model.features import roofline_ms
from lilou.latency.kernel_model.training import fit
from lilou.latency.kernel_model.transposed import backward_data_rows, fit_ratios, held_out_prices
from lilou.research.fold_tables import print_table

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "outputs" / "bench"
#: NeuSight's training GPUs (FP32 model's rows); DeepBench's FP32 convolution GPUs come from the table.
NEUSIGHT_GPUS = ("a100-pcie-40gb", "a100-pcie-80gb", "p100-pcie-16gb", "p4", "t4", "v100-pcie-32gb")
#: Rows measured at least this long (ms) are scored apart too: there a launch floor is a few per cent at most,
#: so a model with one (eager) floor is not penalised for the host loops' smaller one.
LONG_MS = 0.5


def geometry(data: KernelDataset, index: np.ndarray, kernel_hw: dict[int, str]) -> list[str]:
    """'3x3 s1', '1x1 s2', '5x10 s2' ... per row (NeuSight's rows are 3x3 s1)."""
    return [f"{kernel_hw.get(i, '3x3')} s{int(data.kernels.conv_stride[i])}" for i in index]


def conv_rows(data_dir: str | None) -> tuple[KernelDataset, dict[int, str]]:
    """DeepBench's FP32 forward convolutions, and each row's filter as 'KhxKw' (the window alone loses it)."""
    from lilou.data.kernel_table import kernel_table
    from lilou.latency.kernel_model.table_kernels import table_kernels
    from lilou.latency.kernel_model.table_sample import sample_table

    relation = kernel_table(["deepbench"], data_dir).filter("dtype = 'fp32' AND family = 'conv'")
    sample = sample_table(relation, per_group=2**31 - 1)
    priced = table_kernels(sample, use_units=True)  # the rows dataset_from_sample keeps, in its order
    filters = {i: f"{sample['kernel_h'][j]}x{sample['kernel_w'][j]}" for i, j in enumerate(priced.index)}
    return dataset_from_sample(sample), filters


def _score_transposed(predictor, rows: KernelDataset, labels: list[str], pairs: list[dict], architecture: str) -> list[dict]:
    """Fold rows of the held-out architecture's backward-data convolutions: as forward, x the ratio fitted on the
    other architectures' pairs, and the roofline."""
    fitted = fit_ratios([p for p in pairs if architecture_class(p["gpu"]) != architecture])
    strided = rows.kernels.conv_stride > 1
    factor = np.where(strided, fitted["strided"]["ratio"], fitted["unit_stride"]["ratio"])
    as_forward, with_ratio = held_out_prices(predictor, rows, pairs, architecture)
    compute, memory = roofline_ms(rows.kernels, rows.devices)
    priced = {"as_forward": as_forward, "with_ratio": with_ratio, "roofline": np.maximum(compute, memory)}
    out = []
    for label in sorted(set(labels)) + ["all strided", "all stride 1"]:
        pick = (strided if label == "all strided" else ~strided if label == "all stride 1"
                else np.array([item == label for item in labels]))
        if not pick.any():
            continue
        measured = rows.latency_ms[pick]
        row = {"architecture": architecture, "geometry": label, "gpus": len(set(rows.gpu[pick])), "rows": int(pick.sum()),
               "ratio_fitted": float(np.unique(factor[pick]).max())}
        for name, values in priced.items():
            row[f"{name}_mape"] = float(np.mean(np.abs(values[pick] - measured) / measured) * 100)
        row["with_ratio_median_ape"] = float(np.median(np.abs(priced["with_ratio"][pick] - measured) / measured) * 100)
        # the shipped 90 % band of FP32 convolutions (lilou/plan/calibration.json), which these kernels get where
        # their architecture was measured
        residual = np.abs(np.log(measured / priced["with_ratio"][pick]))
        row["in_conv_band_pct"] = float(np.mean(residual <= _conv_band()) * 100)
        out.append(row)
    return out


def _conv_band() -> float:
    """Half-width (log) of the shipped 90 % band of FP32 convolutions on an architecture the model never saw."""
    from lilou.plan.calibration import Calibration

    return float(Calibration.load().kernel_band("conv", "fp32", "arch_unseen").hi)


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


@exit_on_input_error("bench_conv_geometry.py")
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="kernel_latency")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the experiment")
    args = parser.parse_args()
    started = time.perf_counter()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        base = compose("train", overrides=[f"experiment={args.experiment}", *args.overrides])
    deepbench, filters = conv_rows(base.data.get("data_dir"))
    transposed, transposed_filters, pairs = backward_data_rows(base.data.get("data_dir"))
    transposed_folds = []
    gpus = sorted(set(deepbench.gpu) | set(NEUSIGHT_GPUS))
    architectures = sorted({architecture_class(g) for g in deepbench.gpu})
    rows = []
    # Only GPUs the trained rows have are named: data.held_out_gpus refuses one without rows (it held out nothing).
    # Without DeepBench rows in the experiment's training data, a DeepBench-only GPU is out of training anyway.
    trained = set(NEUSIGHT_GPUS) | (set(deepbench.gpu) if base.data.get("table_rows") else set())
    for architecture in architectures:
        held_out = [g for g in gpus if architecture_class(g) == architecture]
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose("train", overrides=[f"experiment={args.experiment}", *args.overrides,
                                              f"data.held_out_gpus=[{','.join(g for g in held_out if g in trained)}]",
                                              "trainer.enable_progress_bar=false", "output_checkpoint=null"])
        predictor, datamodule = fit(cfg)
        neusight = datamodule.test_rows.take(np.flatnonzero((datamodule.test_rows.family == "conv")
                                                           & (datamodule.test_rows.timing == 0)))
        held = np.flatnonzero(np.isin(deepbench.gpu, held_out))
        scored = concat_datasets([neusight, deepbench.take(held)])
        labels = ["3x3 s1 (NeuSight)"] * len(neusight) + geometry(deepbench, held, filters)
        predicted = predictor.predict(scored.kernels, scored.devices, scored.timing).latency_ms
        ratio = scored.latency_ms / predicted
        ape = np.abs(predicted - scored.latency_ms) / scored.latency_ms * 100
        held_t = np.flatnonzero(np.isin(transposed.gpu, held_out))
        if len(held_t):
            transposed_folds += _score_transposed(predictor, transposed.take(held_t),
                                                  geometry(transposed, held_t, transposed_filters), pairs, architecture)
        for label in sorted(set(labels)):
            pick = np.array([item == label for item in labels])
            long = pick & (scored.latency_ms >= LONG_MS)
            rows.append({"architecture": architecture, "geometry": label, "gpus": len(set(scored.gpu[pick])),
                         "rows": int(pick.sum()), "mape": float(ape[pick].mean()),
                         "long_rows": int(long.sum()), "long_mape": float(ape[long].mean()) if long.any() else None,
                         "median_ape": float(np.median(ape[pick])),
                         "measured_over_predicted_scale": float(np.median(ratio[pick]))})
    summary = []
    for label in sorted({r["geometry"] for r in rows}):
        picked = [r for r in rows if r["geometry"] == label]
        summary.append({"geometry": label, "architectures": len(picked), "rows": sum(r["rows"] for r in picked),
                        "mape": statistics.fmean(r["mape"] for r in picked),
                        "long_rows": sum(r["long_rows"] for r in picked),
                        "long_mape": _mean(r["long_mape"] for r in picked),
                        "measured_over_predicted_scale": statistics.median(
                            r["measured_over_predicted_scale"] for r in picked)})
    deepbench_rows = [r for r in rows if "NeuSight" not in r["geometry"]]
    pooled = (sum(r["mape"] * r["rows"] for r in deepbench_rows) / sum(r["rows"] for r in deepbench_rows))
    long_rows = [r for r in deepbench_rows if r["long_rows"]]
    pooled_long = sum(r["long_mape"] * r["long_rows"] for r in long_rows) / sum(r["long_rows"] for r in long_rows)
    print_table(f"FP32 convolutions by geometry, leave-one-architecture-out ({args.experiment})", rows,
                ["architecture", "geometry", "gpus", "rows", "mape", "median_ape", "long_rows", "long_mape",
                 "measured_over_predicted_scale"])
    print_table("Mean over architectures", summary, ["geometry", "architectures", "rows", "mape", "long_rows",
                                                     "long_mape", "measured_over_predicted_scale"])
    print(f"DeepBench rows, pooled MAPE: {pooled:.1f} %; those of at least {LONG_MS} ms: {pooled_long:.1f} %")
    print_table(f"FP32 transposed convolutions (DeepBench backward-data rows), leave-one-architecture-out "
                f"({args.experiment})", transposed_folds,
                ["architecture", "geometry", "gpus", "rows", "ratio_fitted", "as_forward_mape", "with_ratio_mape",
                 "with_ratio_median_ape", "in_conv_band_pct", "roofline_mape"])
    transposed_summary = {}
    for label in ("all strided", "all stride 1"):
        picked = [r for r in transposed_folds if r["geometry"] == label]
        transposed_summary[label] = {f"{name}_mape": _mean(r[f"{name}_mape"] for r in picked)
                                     for name in ("as_forward", "with_ratio", "roofline")}
        transposed_summary[label]["in_conv_band_pct"] = _mean(r["in_conv_band_pct"] for r in picked)
        print(f"transposed, {label}, mean over architectures: " + ", ".join(
            f"{name} {value:.1f} %" for name, value in transposed_summary[label].items()))
    OUT.mkdir(parents=True, exist_ok=True)
    name = "conv_geometry" if args.experiment == "kernel_latency" and not args.overrides else \
        f"conv_geometry_{args.experiment}"
    (OUT / f"{name}.json").write_text(json.dumps({
        "experiment": args.experiment, "overrides": args.overrides, "folds": rows, "summary": summary,
        "deepbench_pooled_mape": pooled, "deepbench_pooled_long_mape": pooled_long,
        "transposed_folds": transposed_folds, "transposed_summary": transposed_summary,
        "wall_s": time.perf_counter() - started}, indent=2) + "\n")
    from lilou.research.ablation import write_provenance

    write_provenance(OUT / f"{name}.json")


if __name__ == "__main__":
    main()
