"""Fit the end-to-end side (fallback + launch/gap overhead) and write ``checkpoints/e2e_overhead``.

    python -m lilou.latency.composition.calibrate        # or: make fit-e2e

Everything is fitted on real measurements of the per-kernel model's training GPUs only:

1. The memory-bound fallback (:mod:`lilou.latency.composition.fallback`) on NeuSight's
   elementwise rows of ``kernels/train``; the dispatch gap (:mod:`lilou.latency.composition.overhead`)
   from the floor-bound ones among them.
2. The overhead ``scale`` on NeuSight's eager end-to-end labels (``e2e/<GPU>/*.json``
   without ``-fusion``). Each labelled model is a zoo entry of the same name (its
   NeuSight config), exported weight-free with a dynamic batch, once per sequence
   length, into ``--models-dir`` (default ``datasets/e2e_models``, git-ignored; about
   3 minutes on 2 cores the first time). Kernel groups come from
   :func:`lilou.fusion.predict.predict_partition` for the eager backend, as at
   inference time; refit when the fusion model or the per-kernel model changes.

``metrics.json`` holds the fit on all labels and a leave-one-GPU-out check (the
scale refitted without each GPU, then scored on it).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

from lilou.checkpoints import KERNEL_LATENCY, checkpoint_path
from lilou.data.neusight import OPS, load_e2e, load_kernels
from lilou.latency.kernel_model.measured import table_costs
from lilou.hardware import resolve_device
from lilou.latency.composition.end_to_end import EndToEndModel, describe_kernels
from lilou.latency.composition.fallback import FIT_MIN_MEMORY_MS, FallbackModel, fallback_mape, fit_fallback
from lilou.latency.kernel_model.inference import KernelModel
from lilou.latency.composition.overhead import E2E_OVERHEAD, OverheadModel, dispatch_gap_ms, fit_overhead, mape
from lilou.runs import data_dir_used, git_commit, weights_fingerprint, writable_folder

REPO = Path(__file__).resolve().parents[3]
COMMAND = "python -m lilou.latency.composition.calibrate"


def fit_floor_side(trained_on: list[str], data_dir=None) -> tuple[FallbackModel, float, dict]:
    """Fallback and dispatch gap from the elementwise rows of the training GPUs."""
    ops = [op for op, (family, _) in OPS.items() if family == "elementwise"]
    table = load_kernels("train", ops=ops, devices=trained_on, data_dir=data_dir)
    bandwidth = np.array([resolve_device(g).memory_bandwidth_gbs for g in table.gpu])
    costs = table_costs(table)
    moved = (costs[:, 1] + costs[:, 2]).astype(np.float64)
    memory_ms = moved / (bandwidth * 1e6)
    fit = memory_ms >= FIT_MIN_MEMORY_MS
    fallback = fit_fallback(moved[fit], bandwidth[fit], table.latency_ms[fit])
    gap = dispatch_gap_ms(table.latency_ms, memory_ms, table.gpu)
    per_gpu = {}
    for gpu in np.unique(table.gpu):
        rows = fit & (table.gpu == gpu)
        per_gpu[str(gpu)] = round(fallback_mape(fallback, moved[rows], bandwidth[rows], table.latency_ms[rows]), 2)
    metrics = {"rows": int(fit.sum()), "of_rows": len(table), "min_memory_ms": FIT_MIN_MEMORY_MS, "ops": ops,
               "gpus": sorted(per_gpu), "mape": round(fallback_mape(fallback, moved[fit], bandwidth[fit],
                                                                       table.latency_ms[fit]), 2),
               "mape_per_gpu": per_gpu}
    return fallback, gap, metrics


def export_models(labels, models_dir: Path) -> dict[tuple[str, int], Path]:
    """One weight-free, dynamic-batch export per (model, seq) of the labels, cached in ``models_dir``."""
    models_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for model, seq in sorted({(label.model, label.seq) for label in labels}):
        path = models_dir / f"{model}-{seq}.onnx"
        if not path.exists():
            print(f"exporting {model} (seq {seq}) to {path}", file=sys.stderr)
            batch = min(label.batch for label in labels if (label.model, label.seq) == (model, seq))
            # A subprocess: a big export's memory goes back to the system when it ends.
            subprocess.run([sys.executable, "-m", "lilou.cli", "zoo", "export", model, "--seq", str(seq),
                            "--batch", str(batch), "--dynamic-batch", "--strip-weights", "-o", str(path)],
                           check=True)
        paths[(model, seq)] = path
    return paths


def label_work(labels, paths, model: EndToEndModel, backend: str = "eager") -> tuple[list[np.ndarray], set[str]]:
    """Per-kernel work of each label's model on its GPU (kernel groups predicted, not from an oracle),
    and where the groups came from (``gnn`` or ``rules``)."""
    from lilou.fusion.predict import predict_partition
    from lilou.graph.dag import load_graph

    work, sources = [], set()
    for label in labels:
        graph = load_graph(paths[(label.model, label.seq)], batch=label.batch)
        partition = predict_partition(graph, backend)
        sources.add(partition.source)
        devices = [resolve_device(label.gpu)]
        work.append(model.kernel_work(describe_kernels(graph, partition), devices, label.batch).work_ms[:, 0])
    return work, sources


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lilou.latency.composition.calibrate", description=__doc__.splitlines()[0])
    parser.add_argument("--models-dir", type=Path, default=REPO / "datasets" / "e2e_models",
                        help="where the exported label models are cached (default: datasets/e2e_models)")
    parser.add_argument("--output", type=Path, default=None,
                        help="checkpoint folder to write (default: checkpoints/e2e_overhead)")
    args = parser.parse_args(argv)
    started = time.time()
    output = writable_folder(args.output or checkpoint_path(E2E_OVERHEAD, required=False), "--output")  # before the fit
    kernel_folder = checkpoint_path(KERNEL_LATENCY)
    kernel_model = KernelModel.load(kernel_folder)
    trained_on = list(kernel_model.config["trained_on"])

    fallback, gap, fallback_metrics = fit_floor_side(trained_on)
    labels = [label for label in load_e2e() if not label.fusion and label.gpu in trained_on]
    paths = export_models(labels, args.models_dir)
    end_to_end = EndToEndModel(kernel_model, fallback, OverheadModel(1.0, gap))
    work, sources = label_work(labels, paths, end_to_end)
    observed = np.array([label.latency_ms for label in labels])
    overhead = fit_overhead(work, observed, gap)
    predicted = np.array([overhead.total_ms(w) for w in work])

    gpus = sorted({label.gpu for label in labels})
    per_gpu, held_out = {}, {}
    all_held_out = np.zeros(len(labels))
    for gpu in gpus:
        rows = np.array([label.gpu == gpu for label in labels])
        per_gpu[gpu] = round(mape(predicted[rows], observed[rows]), 2)
        fold = fit_overhead([w for w, r in zip(work, rows) if not r], observed[~rows], gap)
        all_held_out[rows] = [fold.total_ms(w) for w, r in zip(work, rows) if r]
        held_out[gpu] = {"scale": round(fold.scale, 4), "mape": round(mape(all_held_out[rows], observed[rows]), 2)}

    output.mkdir(parents=True, exist_ok=True)
    params = {"overhead": overhead.to_dict(), "fallback": fallback.to_dict()}
    config = {
        "command": COMMAND, "make_target": "fit-e2e", "backend": "eager",
        # The weights the constants were fitted against: loading them beside another kernel model warns.
        "kernel_checkpoint": KERNEL_LATENCY, "kernel_fingerprint": weights_fingerprint(kernel_folder),
        "kernel_groups": sorted(sources), "trained_on": gpus,
        "labels": "neusight e2e/<GPU>/<model>-inf-<seq>-<batch>.json (eager, not -fusion)",
        "fallback_rows": "neusight kernels/train elementwise ops on the training GPUs, DRAM time >= min_memory_ms",
        "gap_rows": "the same ops, median latency of rows with DRAM time < 1 us, median over GPUs",
        "models": sorted(f"{model}-{seq}" for model, seq in paths),
        "onnx_export": "lilou zoo export NAME --seq SEQ --dynamic-batch --strip-weights",
        "git_commit": git_commit(), "data_dir": data_dir_used(),
    }
    metrics = {
        "date": date.today().isoformat(),
        "labels": len(labels),
        "e2e_mape": round(mape(predicted, observed), 2),
        "e2e_mape_per_gpu": per_gpu,
        "leave_one_gpu_out": {"mape": round(mape(all_held_out, observed), 2), "per_gpu": held_out},
        "sum_of_work_mape": round(mape([w.sum() for w in work], observed), 2),
        "fallback": fallback_metrics,
        "rows": [{"gpu": label.gpu, "model": label.model, "seq": label.seq, "batch": label.batch,
                  "measured_ms": round(label.latency_ms, 2), "predicted_ms": round(float(p), 2),
                  "kernels": int(len(w))}
                 for label, p, w in zip(labels, predicted, work)],
        "seconds": round(time.time() - started, 1),
    }
    (output / "model.json").write_text(json.dumps(params, indent=2) + "\n")
    (output / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (output / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(json.dumps({"output": str(output), **params, "e2e_mape": metrics["e2e_mape"],
                      "leave_one_gpu_out_mape": metrics["leave_one_gpu_out"]["mape"]}, indent=2))
    return 0


if __name__ == "__main__":
    from lilou.errors import exit_on_input_error

    sys.exit(exit_on_input_error("python -m lilou.latency.composition.calibrate")(main)())
