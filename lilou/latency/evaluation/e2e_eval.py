"""End-to-end evaluation against NeuSight's eager labels, leave-one-GPU-out (``lilou eval``).

For every labelled workload (``e2e/<GPU>/<model>-inf-<seq>-<batch>.json``, eager, not
``-fusion``) the model is built from its NeuSight config with the zoo, exported once
weight-free into ``datasets/e2e_models`` (the cache of :mod:`lilou.latency.composition.calibrate`),
loaded at the labelled batch and grouped into kernels. Then, for each GPU under test
(one *fold*), everything fitted is fitted without it:

* the per-kernel model: the shipped config (``experiment=kernel_latency``) trained on the
  NeuSight kernel rows of the other GPUs (``data.held_out_gpus``); the A100 fold also
  holds out the A100 80GB, whose conv rows stand in for the 40GB's. Fold checkpoints are
  cached in ``outputs/logo/<fold>/kernel_latency`` under a hash of the composed config,
  the code's feature and kernel-type lists and the kernel data files, so a second run
  trains nothing and a changed config retrains;
* the memory-bound fallback and the dispatch gap: from the other GPUs' elementwise rows;
* the overhead ``scale``: fitted on the other GPUs' end-to-end labels (of the evaluated
  models) by minimising MAPE, exactly as ``make fit-e2e`` does.

The roofline baseline goes through the same pipeline: per kernel group,
``max(FLOPs / peak, bytes / bandwidth) / efficiency[family]`` with the efficiencies of
:class:`~lilou.latency.evaluation.roofline.RooflineBaseline` fitted on the same training rows
(kernels of unmeasured kinds use the same memory-bound fallback), summed with the same
``max(scale * work, gap)`` overhead whose scale is fitted the same way.

``fusion``: ``predicted`` (the fusion model, as ``lilou infer``), ``oracle`` (eager
groups from the exporter metadata) or ``none`` (one kernel per ONNX node; view-only
nodes still launch nothing). ``logo=False`` uses the shipped checkpoints and the
shipped overhead instead: in-sample figures, labelled as such.

The parts live beside it: the labelled workloads (:mod:`.e2e_workloads`), what a fold fits (:mod:`.fold_parts`),
the rows and summaries (:mod:`.e2e_results`) and the scores (:mod:`.scores`).
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lilou.errors import LilouInputError, MissingDataError
from lilou.hardware import resolve_device
from lilou.latency.evaluation.e2e_results import PREDICTORS, EvalResult, EvalRow
from lilou.latency.evaluation.e2e_workloads import FUSION_MODES, MODELS_DIR, Workload, build_workloads, select_labels
from lilou.latency.evaluation.fold_parts import LOGO_DIR, FoldParts, logo_parts, shipped_parts
from lilou.quiet import Log, log_to_stderr


def workload_work(parts: FoldParts, workload: Workload, gpus: Sequence[str]) -> dict[str, np.ndarray]:
    """Per-kernel work [kernels, len(gpus)] of the model and of the roofline baseline."""
    from lilou.latency.composition.end_to_end import EndToEndModel
    from lilou.latency.kernel_model.features import DeviceColumns, KernelBatch
    from lilou.latency.composition.overhead import OverheadModel

    devices = [resolve_device(g) for g in gpus]
    kernels = workload.kernels
    end_to_end = EndToEndModel(parts.kernel_model, parts.fallback, OverheadModel(1.0, parts.gap_ms))
    model = end_to_end.kernel_work(kernels, devices, workload.batch).work_ms
    # Roofline: efficiency-scaled roofline of every distinct kernel, the fallback where the model uses it.
    unique = KernelBatch.from_specs(kernels.unique)
    n = len(kernels.unique)
    columns = vars(DeviceColumns.from_devices(devices))
    repeated = unique.take(np.tile(np.arange(n), len(devices)))
    device_rows = DeviceColumns(**{k: np.repeat(v, n) for k, v in columns.items()})
    floor = parts.roofline.floor_ms[repeated.family]
    roof = (parts.roofline.predict(repeated, device_rows) - floor).reshape(len(devices), n).T
    fallback = parts.fallback.work_ms(repeated, device_rows).reshape(len(devices), n).T
    roof = np.where(kernels.unique_fallback[:, None], fallback, roof)
    return {"model": model, "roofline": roof[kernels.index]}


def compare_breakdown(label, kernels, kernel_ms: np.ndarray) -> dict[str, tuple[float, float]]:
    """category -> (measured ms from the label's per-node CSV, predicted ms from the kernels' shares)."""
    from lilou.latency.composition.breakdown import CATEGORIES, measured_breakdown, predicted_breakdown

    measured = measured_breakdown(label.node_csv, label.layers)
    predicted = predicted_breakdown(kernels.specs, kernels.fallback, kernel_ms)
    return {category: (measured[category], predicted[category]) for category in CATEGORIES}


def evaluate(data_dir=None, models: Sequence[str] | None = None, gpus: Sequence[str] | None = None,
             fusion: str = "predicted", logo: bool = True, kernel_overrides: Sequence[str] = (),
             models_dir: Path = MODELS_DIR, cache_dir: Path = LOGO_DIR, retrain: bool = False,
             log: Log = log_to_stderr) -> EvalResult:
    """Predict every selected label, leave-one-GPU-out (or in-sample with ``logo=False``)."""
    from lilou.latency.composition.overhead import fit_overhead

    if fusion not in FUSION_MODES:
        raise LilouInputError(f"unknown fusion mode {fusion!r}; choose one of: {', '.join(FUSION_MODES)}")
    if data_dir is not None and not Path(data_dir).is_dir():
        raise MissingDataError(f"data folder {data_dir} does not exist (see datasets/README.md, or `lilou data fetch`)")
    started = time.perf_counter()
    tested, labels = select_labels(data_dir, models, gpus)
    log(f"{len(tested)} labels to test, {len(labels)} in the calibration pool; kernel groups ({fusion}):")
    workloads = build_workloads(labels, fusion, models_dir, log)
    all_gpus = sorted({label.gpu for label in labels})
    rows: list[EvalRow] = []
    folds: dict[str, dict[str, Any]] = {}
    test_gpus = sorted({label.gpu for label in tested})
    fold_plan = [(gpu, [gpu]) for gpu in test_gpus] if logo else [(None, test_gpus)]
    for held_out, test_on in fold_plan:
        parts = (logo_parts(held_out, kernel_overrides, data_dir, cache_dir, retrain, log) if logo
                 else shipped_parts(data_dir, log))
        work = {key: workload_work(parts, w, all_gpus) for key, w in workloads.items()}
        column = {g: j for j, g in enumerate(all_gpus)}
        calibration = [label for label in labels if label.gpu not in test_on or not logo]
        fold_info: dict[str, Any] = {"trained_on_kernel_rows": parts.trained_on, "gap_ms": round(parts.gap_ms, 5),
                                     "kernel_power_exponent": round(parts.kernel_model.power_exponent, 4),
                                     "kernel_duration_exponent": round(parts.kernel_model.duration_exponent, 4),
                                     "kernel_duration_ms": round(math.exp(parts.kernel_model.log_duration_ms), 4),
                                     "fallback": parts.fallback.to_dict(), **parts.provenance,
                                     "calibration_labels": len(calibration),
                                     "calibration_gpus": sorted({label.gpu for label in calibration})}
        overheads = {}
        for predictor in PREDICTORS:
            if predictor == "model" and parts.shipped_overhead is not None:
                overhead = parts.shipped_overhead  # as `lilou infer` uses it
            else:
                if not calibration:
                    raise LilouInputError("no end-to-end labels left to fit the overhead on; evaluate more GPUs "
                                          "or models")
                overhead = fit_overhead([work[(lb.model, lb.seq, lb.batch)][predictor][:, column[lb.gpu]]
                                         for lb in calibration], [lb.latency_ms for lb in calibration], parts.gap_ms)
            overheads[predictor] = overhead
            fold_info[f"{predictor}_scale"] = round(overhead.scale, 5)
        for label in tested:
            if label.gpu not in test_on:
                continue
            key = (label.model, label.seq, label.batch)
            row = EvalRow(gpu=label.gpu, model=label.model, seq=label.seq, batch=label.batch,
                          measured_ms=label.latency_ms, fold=parts.name, kernels=len(workloads[key].kernels))
            for predictor in PREDICTORS:
                row.predicted_ms[predictor] = overheads[predictor].total_ms(work[key][predictor][:, column[label.gpu]])
            if label.node_csv is not None and label.layers:
                shares = overheads["model"].kernel_ms(work[key]["model"][:, column[label.gpu]])
                row.breakdown = compare_breakdown(label, workloads[key].kernels, shares)
            rows.append(row)
        folds[held_out or "in-sample"] = fold_info
        log(f"fold {parts.name}: done ({time.perf_counter() - started:.0f} s)")
    rows.sort(key=lambda r: (r.gpu, r.model, r.seq, r.batch))
    sources = sorted({w.source for w in workloads.values()})
    return EvalResult(mode="leave-one-GPU-out" if logo else "in-sample", fusion=fusion, rows=rows, folds=folds,
                      kernel_groups=sources, seconds=time.perf_counter() - started)
