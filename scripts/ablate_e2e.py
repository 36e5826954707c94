"""End-to-end ablation: oracle fusion vs predicted fusion vs no fusion (one kernel per ONNX node).

Runs the ``lilou eval`` pipeline (:func:`lilou.latency.evaluation.e2e_eval.evaluate`) on NeuSight's
eager end-to-end labels once per kernel-grouping mode; everything else (per-kernel
model, fallback, dispatch gap, overhead scale fitted per fold) is the same, so the
difference between the rows is what fusion prediction is worth end to end.
Leave-one-GPU-out by default (fold checkpoints cached in outputs/logo, shared with
``lilou eval``); ``--quick`` scores the shipped checkpoints in-sample instead.
Writes outputs/results/ablate_e2e.{csv,png,json}.

    python scripts/ablate_e2e.py [--quick] [--models a,b] [--gpus a,b] [--seed S] [--out DIR]

``--out`` (default outputs/results) is created and checked before any fold is fitted.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lilou.errors import LilouInputError, exit_on_input_error  # noqa: E402
from lilou.research.ablation import (RESULTS, data_dir, pyplot, quiet_lightning, save_figure,  # noqa: E402
                                     write_result)
from lilou.runs import writable_folder  # noqa: E402

NAME = "ablate_e2e"
MODES = ("oracle", "predicted", "none")
LABELS = {"oracle": "oracle fusion (eager exporter metadata)", "predicted": "predicted fusion (as lilou infer)",
          "none": "no fusion (one kernel per ONNX node)"}


def run(models, gpus, logo: bool, seed: int, log=print) -> tuple[list[dict], list[dict], dict]:
    import lightning as L

    from lilou.latency.evaluation.e2e_eval import evaluate

    rows, per_gpu, info = [], [], {}
    for mode in MODES:
        L.seed_everything(seed, workers=True, verbose=False)
        with quiet_lightning():
            result = evaluate(data_dir=data_dir(), models=models, gpus=gpus, fusion=mode, logo=logo,
                              log=lambda m: None)
        kernels = {r.workload: r.kernels for r in result.rows}
        overall = result.overall()
        rows.append({"fusion": mode, "kernel groups": "+".join(result.kernel_groups),
                     "labels": overall["n"], "gpus": overall["gpus"],
                     "mean kernels": float(np.mean(list(kernels.values()))),
                     **{k: float(v) for k, v in overall.items() if k.endswith(("mape", "median_ape", "max_ape"))}})
        for entry in result.per_gpu():
            per_gpu.append({"fusion": mode, **entry})
        info[mode] = {"mode": result.mode, "folds": result.folds, "rows": [r.to_json() for r in result.rows]}
        log(f"{mode}: model MAPE {overall['model_mape']:.1f} % ({result.seconds:.0f} s)")
    return rows, per_gpu, info


def plot(per_gpu: list[dict], path: Path, mode: str) -> None:
    plt = pyplot()
    gpus = sorted({r["gpu"] for r in per_gpu})
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(MODES)
    x = np.arange(len(gpus))
    for i, fusion in enumerate(MODES):
        values = [next((r["model_mape"] for r in per_gpu if r["fusion"] == fusion and r["gpu"] == g), 0)
                  for g in gpus]
        ax.bar(x + (i - (len(MODES) - 1) / 2) * width, values, width, label=LABELS[fusion])
    ax.set_xticks(x, gpus, fontsize=8)
    ax.set_ylabel("end-to-end MAPE (%)")
    ax.set_title(f"End-to-end latency by kernel grouping ({mode})")
    ax.legend(fontsize=7)
    save_figure(fig, path)


def _names(value: str | None, option: str) -> list[str] | None:
    if value is None:
        return None
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise LilouInputError(f"{option} {value!r}: empty list; name at least one, comma-separated")
    return names


@exit_on_input_error("ablate_e2e.py")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="shipped checkpoints in-sample (no fold training): not for citing")
    parser.add_argument("--models", default=None, help="labelled models (default all)")
    parser.add_argument("--gpus", default=None, help="GPUs to test (default every labelled GPU)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    # as `lilou eval`: --gpus "" is an error, not every GPU (it ran the whole ablation); "t4," is t4
    models, gpus = _names(args.models, "--models"), _names(args.gpus, "--gpus")
    logo = not args.quick
    writable_folder(args.out, "--out")  # a bad --out was found after every fold had run, as a traceback
    rows, per_gpu, info = run(models, gpus, logo, args.seed)
    mode = "leave-one-GPU-out" if logo else "in-sample, shipped checkpoints"
    plot(per_gpu, args.out / f"{NAME}.png", mode)
    csv_rows = [{"fusion": r["fusion"], "gpu": "all", "n": r["labels"], **r} for r in rows] + per_gpu
    write_result(NAME, csv_rows, ["fusion", "gpu", "n", "kernel groups", "mean kernels", "model_mape",
                                  "model_median_ape", "model_max_ape", "roofline_mape", "roofline_median_ape",
                                  "roofline_max_ape"],
                 title=f"End-to-end APE (%) by kernel grouping, {mode}", table_rows=rows,
                 table_columns=["fusion", "kernel groups", "labels", "gpus", "mean kernels", "model_mape",
                                "model_median_ape", "model_max_ape", "roofline_mape"],
                 seed=args.seed, quick=args.quick, started=started, out_dir=args.out,
                 data=("NeuSight eager end-to-end labels e2e/<GPU>/<model>-inf-<seq>-<batch>.json (FP32 PyTorch eager, "
                       "not the -fusion files) of the five training GPUs; models rebuilt from their NeuSight configs "
                       "with the zoo and exported weight-free into datasets/e2e_models"),
                 extra={"mode": mode, "per_gpu": per_gpu, "details": info})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
