"""Benchmark the kernel model trained on the whole kernel table (``experiment=kernel_table``) on its folds.

One sample of the table (at most --per-group rows per source x GPU x dtype x family, picked by a
hash of the row) is split once per fold:
- leave-one-architecture-out: Maxwell, Pascal, Volta, Turing, GA100, GA10x, Ada, Hopper and Blackwell;
- leave-one-GPU-out: every GPU with >= 500 priced rows of some source x dtype x family, held out with its twins
  (the table's GPUs on the same die, lilou/hardware/dies.yaml: A100 PCIe 40/80GB and SXM4, V100 PCIe/SXM2,
  B200/GB200, B300/GB300, A40/RTX 3090, L40S/RTX 4090): one fold per die, each GPU scored by its die's fold.

A fold model is trained on every other row (all sources, every timing method) and predicts the
held-out rows with the launch floor of their own timing method. Two baselines are refitted per fold on
the same rows: the roofline (fitted floor and efficiency per family) and the NeuSight-style tile/wave
predictor (lilou/latency/evaluation/neusight_baseline.py), both at the peak of each row's unit. The tables
have the same layout as part 5 of ``scripts/bench_kernels.py`` (the shipped NeuSight-only model), so the
two read side by side.

Prints the tables and writes outputs/bench/kernel_table.{json,md}.

    python scripts/bench_kernel_table.py [--per-group N] [--only-architectures] [--out DIR] [hydra overrides ...]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

from lilou.data.kernel_table import kernel_table
from lilou.latency.evaluation.neusight_baseline import NeuSightBaseline
from lilou.latency.evaluation.roofline import RooflineBaseline
from lilou.latency.kernel_model.dataset import dataset_from_sample
from lilou.hardware.database import ARCHITECTURE_CLASSES, architecture_class
from lilou.latency.evaluation.table_folds import MIN_GPU_ROWS, Scored, chip_folds, logo_table, loao_table, per_architecture
from lilou.errors import exit_on_input_error
from lilou.latency.kernel_model.table_sample import checked_per_group, sample_table
from lilou.latency.kernel_model.table_kernels import table_kernels
from lilou.latency.kernel_model.training import fit
from lilou.research.fold_tables import markdown_folds, print_table_folds

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "outputs" / "bench"


def config(overrides: list[str]):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("train", overrides=["experiment=kernel_table", "trainer.enable_progress_bar=false", *overrides])


def fold_predictions(dataset, mask: np.ndarray, overrides: list[str], held_out: str) -> np.ndarray:
    """[3, n] predictions (model, roofline, NeuSight-style) of the rows in ``mask`` by folds trained on the others."""
    predictor, datamodule = fit(config([*overrides, held_out]), dataset=dataset)
    rows = datamodule.test_rows
    assert len(rows) == int(mask.sum())
    model = predictor.predict(rows.kernels, rows.devices, rows.timing).latency_ms
    roofline = RooflineBaseline.fit(datamodule.train_rows).predict(rows.kernels, rows.devices)
    neusight = NeuSightBaseline.fit(datamodule.train_rows).predict(rows.kernels, rows.devices)
    return np.stack([model, roofline, neusight])


@exit_on_input_error("bench_kernel_table.py")
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-group", type=int, default=6000)
    parser.add_argument("--only-architectures", action="store_true", help="skip the leave-one-GPU-out folds")
    parser.add_argument("--out", type=Path, default=OUT, help="folder of kernel_table.{json,md} (outputs/bench)")
    parser.add_argument("--save-predictions", action="store_true",
                        help="also write every row's fold predictions to kernel_table_predictions.npz (ensemble studies)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    checked_per_group(args.per_group, "--per-group")
    started = time.perf_counter()
    sample = sample_table(kernel_table(), per_group=args.per_group)
    dataset = dataset_from_sample(sample)
    priced = table_kernels(sample)  # the same priced rows, in the same order, with their table columns
    rows = {c: np.asarray(sample[c], dtype=object)[priced.index] for c in sample}
    rows["architecture"] = np.array([architecture_class(g) for g in rows["gpu"]], dtype=object)
    overrides = [*args.overrides, f"data.per_group={args.per_group}"]

    loao = np.full((3, len(dataset)), np.nan)
    for architecture in ARCHITECTURE_CLASSES:
        mask = rows["architecture"] == architecture
        if mask.any():
            loao[:, mask] = fold_predictions(dataset, mask, overrides, f"data.held_out_architectures=[{architecture}]")
            print(f"fold {architecture} done ({time.perf_counter() - started:.0f} s)", flush=True)

    logo = np.full((3, len(dataset)), np.nan)
    if not args.only_architectures:
        groups: dict[tuple, int] = {}
        for key in zip(rows["source"], rows["dtype"], rows["family"], rows["gpu"]):
            groups[key] = groups.get(key, 0) + 1
        gpus = sorted({key[3] for key, n in groups.items() if n >= MIN_GPU_ROWS})
        for chip in chip_folds(gpus, rows["gpu"]):  # a GPU is held out with its twins (same die)
            mask = np.isin(rows["gpu"], chip)
            logo[:, mask] = fold_predictions(dataset, mask, overrides, f"data.held_out_gpus=[{','.join(chip)}]")
            print(f"fold {'+'.join(chip)} done ({time.perf_counter() - started:.0f} s)", flush=True)

    def scored(predictions: np.ndarray) -> Scored:
        keep = ~np.isnan(predictions[0])
        return Scored(rows={c: v[keep] for c, v in rows.items()}, predicted_ms=predictions[0, keep],
                      loao_predicted_ms=predictions[0, keep], roofline_ms=predictions[1, keep], skipped=priced.skipped,
                      baselines={"neusight": predictions[2, keep]})

    by_architecture = scored(loao)
    result = {"per_group": args.per_group, "sampled_rows": len(sample["gpu"]), "priced_rows": len(dataset),
              "skipped": priced.skipped, "overrides": overrides,
              "leave_one_gpu_out": [] if args.only_architectures else logo_table(scored(logo)),
              "leave_one_architecture_out": loao_table(by_architecture),
              "per_architecture": per_architecture(by_architecture), "wall_s": time.perf_counter() - started}
    print_table_folds(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kernel_table.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "kernel_table.md").write_text(markdown_folds(result))
    if args.save_predictions:
        np.savez_compressed(args.out / "kernel_table_predictions.npz", loao=loao, logo=logo,
                            measured_ms=np.asarray(rows["latency_ms"], dtype=np.float64),
                            **{c: rows[c].astype(str) for c in ("architecture", "gpu", "source", "dtype", "family")})
    print(f"wall {result['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
