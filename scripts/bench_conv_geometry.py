"""FP32 convolutions by geometry, leave-one-architecture-out (``make bench-conv-geometry``).

NeuSight measured 3x3, stride-1 convolutions only; DeepBench measured FP32 convolutions of other geometries
(1x1, strided, 5x5, 7x7, wide 5x10 / 5x20 filters; cuDNN 6-7, host-timer loops) on eight GPUs from Maxwell to
Turing. For each architecture with such rows, the kernel model of ``--experiment`` is trained without any GPU
of that architecture (NeuSight's and DeepBench's rows alike) and scored on the held-out convolutions, each row
against the model's time for its own timing method (the eager floor for NeuSight's, the host-loop floor where the
model learned one; a model with one floor uses the eager one for every row, as the kernel folds do).

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

from lilou.hardware.database import architecture_class
from lilou.latency.kernel_model.dataset import KernelDataset, concat_datasets, dataset_from_sample
from lilou.latency.kernel_model.training import fit
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


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="kernel_latency")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the experiment")
    args = parser.parse_args()
    started = time.perf_counter()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        base = compose("train", overrides=[f"experiment={args.experiment}", *args.overrides])
    deepbench, filters = conv_rows(base.data.get("data_dir"))
    gpus = sorted(set(deepbench.gpu) | set(NEUSIGHT_GPUS))
    architectures = sorted({architecture_class(g) for g in deepbench.gpu})
    rows = []
    for architecture in architectures:
        held_out = [g for g in gpus if architecture_class(g) == architecture]
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose("train", overrides=[f"experiment={args.experiment}", *args.overrides,
                                              f"data.held_out_gpus=[{','.join(held_out)}]",
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
    OUT.mkdir(parents=True, exist_ok=True)
    name = "conv_geometry" if args.experiment == "kernel_latency" and not args.overrides else \
        f"conv_geometry_{args.experiment}"
    (OUT / f"{name}.json").write_text(json.dumps({
        "experiment": args.experiment, "overrides": args.overrides, "folds": rows, "summary": summary,
        "deepbench_pooled_mape": pooled, "deepbench_pooled_long_mape": pooled_long,
        "wall_s": time.perf_counter() - started}, indent=2) + "\n")


if __name__ == "__main__":
    main()
