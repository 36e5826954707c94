"""Benchmark the per-kernel latency model on real NeuSight measurements.

1. Leave-one-GPU-out over the five training GPUs: train on four (config
   `experiment=kernel_latency`, the same as the shipped checkpoint), test on the
   fifth; the roofline baseline (fitted floor + efficiency) is fitted on the same four.
2. Train on all five, test on `kernels/test` rows of GPUs that are new for that op
   (A100 80GB PCIe for GEMM, elementwise, layer norm, softmax). Not an unseen chip: the A100 80GB PCIe is a
   twin of the trained A100 40GB PCIe (same GA100, SMs and clocks), and conv trains on the 80GB card itself.
3. Speed: predicting 10 000 kernels on one GPU, median of repeats.
4. What limits it (diagnostics, never results): per held-out GPU and family, the MAPE
   left once a launch offset and a speed scale are fitted in hindsight on that GPU's own
   rows; and the fraction of FP32 peak large GEMMs reach against their ideal duration.
5. The folds that matter (lilou.latency.evaluation.table_folds), on the whole kernel table (every
   source, a fixed sample of at most --per-group rows per source x GPU x dtype x family):
   leave-one-GPU-out per source, dtype and family over every GPU with >= 500 rows, and
   leave-one-architecture-out. Each row is predicted by the shipped model where it never
   trained on the row's GPU (architecture), else by the NeuSight fold model trained without
   it (plus a Pascal fold without the P4 and P100). The roofline baseline uses the peak of
   the row's unit (BF16/FP8 tensor cores ...) with the fold's fitted floor and efficiency.

Prints one table per part and writes outputs/bench/kernels.{json,csv}.

    python scripts/bench_kernels.py [--quick] [--per-group N] [hydra overrides ...]
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

from lilou.data.neusight import load_kernels
from lilou.hardware import resolve_device
from lilou.latency.kernel_model.dataset import build_dataset
from lilou.latency.evaluation.diagnostics import gemm_efficiency_by_duration, limits_table
from lilou.latency.kernel_model.metrics import error_table
from lilou.latency.kernel_model.features import DeviceColumns
from lilou.latency.kernel_model.folds import KERNEL_FOLDS
from lilou.latency.kernel_model.predictor import KernelLatencyPredictor
from lilou.latency.evaluation.roofline import RooflineBaseline
from lilou.latency.evaluation.table_folds import Fold, logo_table, loao_table, per_architecture, score
from lilou.errors import exit_on_input_error
from lilou.latency.kernel_model.table_sample import checked_per_group, sample_table
from lilou.latency.kernel_model.training import fit
from lilou.research.ablation import write_provenance
from lilou.research.fold_tables import markdown_folds, print_table, print_table_folds

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "outputs" / "bench"
# Leave-one-GPU-out folds, shared with lilou eval and the kernel ablation.
FOLDS = KERNEL_FOLDS
FAMILY_ORDER = ("gemm", "conv", "elementwise", "softmax", "layernorm")


def config(overrides: list[str]):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("train", overrides=["experiment=kernel_latency", *overrides])


def evaluate_fold(held_out: list[str], overrides: list[str]) -> tuple[list[dict], list[dict], Fold]:
    """(error rows of the model and the roofline, limits rows of the model, the fold) on the held-out GPUs."""
    cfg = config([*overrides, f"data.held_out_gpus=[{','.join(held_out)}]", "trainer.enable_progress_bar=false"])
    predictor, datamodule = fit(cfg)
    # NeuSight's rows (eager CUDA events) only: the figures of this part stay those of NeuSight's five folds when
    # the config trains on kernel-table rows too (bench_conv_geometry.py scores those).
    rows = datamodule.test_rows.take(np.flatnonzero(datamodule.test_rows.timing == 0))
    train = datamodule.train_rows
    baseline = RooflineBaseline.fit(train.take(np.flatnonzero(train.timing == 0)))
    prediction = predictor.predict(rows.kernels, rows.devices)
    results = [{"predictor": "model", **row} for row in error_table(rows, prediction.latency_ms, prediction.kernel_type)]
    results += [{"predictor": "roofline", **row}
                for row in error_table(rows, baseline.predict(rows.kernels, rows.devices))]
    limits = limits_table(rows, prediction.latency_ms)
    return results, limits, Fold(predictor, baseline)


#: Architectures of the shipped model's training GPUs -> the NeuSight fold that holds all of them out.
ARCHITECTURE_FOLDS = {"Volta": "v100", "Turing": "t4", "GA100": "a100"}


def table_folds(folds: dict[str, Fold], overrides: list[str], per_group: int) -> dict:
    """Part 5: the whole kernel table, leave-one-GPU-out and leave-one-architecture-out."""
    from lilou.data.kernel_table import kernel_table

    started = time.perf_counter()
    pascal_cfg = config([*overrides, "data.held_out_gpus=[p4,p100-pcie-16gb]", "trainer.enable_progress_bar=false"])
    pascal_predictor, pascal_data = fit(pascal_cfg)
    pascal = Fold(pascal_predictor, RooflineBaseline.fit(pascal_data.train_rows))
    shipped_cfg = config([*overrides, "trainer.enable_progress_bar=false"])
    shipped_predictor = KernelLatencyPredictor.load(REPO / "checkpoints" / "kernel_latency")
    shipped_baseline = RooflineBaseline.fit(build_dataset(load_kernels("train", data_dir=shipped_cfg.data.get("data_dir"))))
    shipped = Fold(shipped_predictor, shipped_baseline)
    logo_folds = {gpu: folds[name] for name, gpus in FOLDS.items() for gpu in gpus}
    loao_folds = {"Pascal": pascal, **{arch: folds[name] for arch, name in ARCHITECTURE_FOLDS.items()}}
    sample = sample_table(kernel_table(), per_group=per_group)
    scored = score(sample, logo_folds, loao_folds, shipped)
    logo = logo_table(scored)
    neusight_five = [r for r in logo if r["source"] == "neusight"]
    return {"per_group": per_group, "sampled_rows": len(sample["gpu"]), "priced_rows": len(scored.rows["gpu"]),
            "skipped": scored.skipped, "leave_one_gpu_out": logo, "leave_one_architecture_out": loao_table(scored),
            "per_architecture": per_architecture(scored), "neusight_five_folds": neusight_five,
            "wall_s": time.perf_counter() - started}


def summarise_limits(limits: list[dict]) -> list[dict]:
    """Mean over held-out GPUs of each family's MAPE: the model's, then after each hindsight oracle."""
    columns = ("mape", "scale_oracle_mape", "offset_scale_oracle_mape")
    return [{"family": family, **{c: statistics.fmean(r[c] for r in limits if r["family"] == family)
                                  for c in columns}}
            for family in FAMILY_ORDER if any(r["family"] == family for r in limits)]


def summarise(rows: list[dict]) -> list[dict]:
    """Mean over held-out GPUs of each family's MAPE, per predictor."""
    summary = []
    for family in FAMILY_ORDER:
        entry = {"family": family}
        for predictor in ("model", "roofline"):
            picked = [r for r in rows if r["family"] == family and r["predictor"] == predictor]
            if picked:
                entry[f"{predictor}_mape"] = statistics.fmean(r["mape"] for r in picked)
                entry[f"{predictor}_median_ape"] = statistics.fmean(r["median_ape"] for r in picked)
            accuracy = [r["type_accuracy"] for r in picked if "type_accuracy" in r]
            if accuracy:
                entry["type_accuracy"] = statistics.fmean(accuracy)
        summary.append(entry)
    return summary


def speed(predictor, repeats: int = 7) -> float:
    """Median seconds to predict 10 000 real kernel shapes on one GPU (features included)."""
    table = load_kernels("test", ops=["linear", "bmm", "add", "softmax", "ln"])
    data = build_dataset(table)
    index = np.arange(10_000) % len(data)
    kernels = data.kernels.take(index)
    device = DeviceColumns.from_devices([resolve_device("a10g")])
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        predictor.predict(kernels, device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def unseen_gpu_test(overrides: list[str]) -> tuple[list[dict], object]:
    cfg = config([*overrides, "trainer.enable_progress_bar=false"])
    predictor, datamodule = fit(cfg)
    seen = {(str(g), str(f)) for g, f in zip(datamodule.train_rows.gpu,
                                              datamodule.train_rows.family)}
    test = build_dataset(load_kernels("test"))
    new = np.array([(str(g), str(f)) not in seen for g, f in zip(test.gpu, test.family)])
    results = []
    for label, mask in (("unseen GPU for the op", new), ("seen GPU, new shapes", ~new)):
        if mask.any():
            rows = test.take(np.flatnonzero(mask))
            prediction = predictor.predict(rows.kernels, rows.devices)
            results += [{"split": label, **r} for r in error_table(rows, prediction.latency_ms, prediction.kernel_type)]
    return results, predictor


def print_throttle(rows: list[dict]) -> None:
    """GPUs down, half-decades of ideal time across: the median % of FP32 peak large GEMMs reach."""
    bins = sorted({r["log10_ideal_ms"] for r in rows if r["n"] >= 20})
    columns = [f"{10 ** b:.3g} ms" for b in bins]
    pivot = []
    for gpu in sorted({r["gpu"] for r in rows}):
        cells = {f"{10 ** r['log10_ideal_ms']:.3g} ms": r["median_percent_of_peak"]
                 for r in rows if r["gpu"] == gpu and r["n"] >= 20}
        pivot.append({"gpu": gpu, **cells})
    print_table("large GEMMs (every dim >= 512): median % of FP32 peak, by ideal time at peak (bin lower edge, "
                "bins of >= 20 rows)", pivot, ["gpu", *columns])


@exit_on_input_error("bench_kernels.py")
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="subsample rows and epochs (minutes, not for reporting)")
    parser.add_argument("--per-group", type=int, default=2000,
                        help="kernel-table rows sampled per source x GPU x dtype x family for part 5")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. trainer.max_epochs=4")
    args = parser.parse_args()
    checked_per_group(args.per_group, "--per-group")  # before the folds train, not after
    overrides = list(args.overrides) + (["data.max_rows=30000", "trainer.max_epochs=2"] if args.quick else [])
    started = time.perf_counter()
    logo, limits = [], []
    fold_models: dict[str, Fold] = {}
    for fold, gpus in FOLDS.items():
        results, fold_limits, fold_models[fold] = evaluate_fold(gpus, overrides)
        logo += [{"fold": fold, **r} for r in results]
        limits += [{"fold": fold, **r} for r in fold_limits]
        print(f"fold {fold} done ({time.perf_counter() - started:.0f} s)", flush=True)
    summary = summarise(logo)
    test_rows, predictor = unseen_gpu_test(overrides)
    seconds = speed(predictor)
    print_table("leave-one-GPU-out, per held-out GPU", [r for r in logo if r["predictor"] == "model"],
                ["gpu", "family", "n", "mape", "median_ape", "type_accuracy"])
    print_table("leave-one-GPU-out, roofline baseline", [r for r in logo if r["predictor"] == "roofline"],
                ["gpu", "family", "n", "mape", "median_ape"])
    print_table("leave-one-GPU-out, mean over held-out GPUs (MAPE %)", summary,
                ["family", "model_mape", "model_median_ape", "roofline_mape", "roofline_median_ape", "type_accuracy"])
    print_table("train on all five, kernels/test rows", test_rows,
                ["split", "gpu", "family", "n", "mape", "median_ape", "type_accuracy"])
    print(f"prediction speed: 10,000 kernels x 1 GPU in {seconds * 1000:.1f} ms (median of 7)")
    limits_summary = summarise_limits(limits)
    print_table("what limits it (diagnostic: constants fitted in hindsight on the held-out GPU's rows)", limits,
                ["gpu", "family", "mape", "scale_oracle_mape", "offset_scale_oracle_mape", "offset_oracle_us",
                 "offset_scale_oracle_scale"])
    print_table("what limits it, mean over held-out GPUs (MAPE %)", limits_summary,
                ["family", "mape", "scale_oracle_mape", "offset_scale_oracle_mape"])
    throttle = gemm_efficiency_by_duration(build_dataset(load_kernels("train", ops=["linear", "bmm"])))
    print_throttle(throttle)
    folds_result = table_folds(fold_models, overrides, args.per_group)
    print_table_folds(folds_result)
    OUT.mkdir(parents=True, exist_ok=True)
    result = {"overrides": overrides, "leave_one_gpu_out": logo, "summary": summary, "test_split": test_rows,
              "speed_10k_kernels_s": seconds, "limits": limits, "limits_summary": limits_summary,
              "gemm_efficiency_by_duration": throttle, "table_folds": folds_result,
              "wall_s": time.perf_counter() - started}
    (OUT / "kernels.json").write_text(json.dumps(result, indent=2) + "\n")
    write_provenance(OUT / "kernels.json")
    (OUT / "kernel_folds.md").write_text(markdown_folds(folds_result))
    with open(OUT / "kernels.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["fold", "predictor", "gpu", "family", "n", "mape",
                                                    "median_ape", "type_accuracy"])
        writer.writeheader()
        writer.writerows(logo)


if __name__ == "__main__":
    main()
