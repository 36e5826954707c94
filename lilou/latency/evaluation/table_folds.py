"""Folds over GPUs and architectures on the whole kernel table, and the errors of a model on them.

Leave-one-GPU-out: for every (source, dtype, family), every GPU with at least
:data:`MIN_GPU_ROWS` rows of it is held out in turn. Leave-one-architecture-out: every
architecture class (:func:`lilou.hardware.database.architecture_class`) in turn. A row is always predicted by a
model that never saw its GPU (LOGO) or any GPU of its architecture (LOAO): the shipped model
where it did not train on them, else a fold model trained without them (``models``).

The table is large (millions of AIConfigurator rows): :func:`lilou.latency.kernel_model.table_sample.sample_table` keeps at most
``per_group`` rows of each (source, GPU, dtype, family), picked by a hash of the row, so the
sample is the same on every run.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from lilou.data.kernel_schema import TIMING_INCLUDES_LAUNCH
from lilou.hardware.database import ARCHITECTURE_CLASSES, architecture_class
from lilou.latency.kernel_model.table_kernels import TableKernels, table_kernels

MIN_GPU_ROWS = 500


def chip_folds(scored_gpus: Sequence[str], present_gpus: Sequence[str]) -> list[tuple[str, ...]]:
    """Leave-one-chip-out folds: for each die with a GPU in ``scored_gpus`` (those with enough rows to score), the
    GPUs of ``present_gpus`` on that die (``lilou/hardware/dies.yaml``), all held out together, so that no fold
    trains on a twin of the GPU it scores (the A100 40GB PCIe beside the 80GB, the B200 beside the GB200)."""
    from lilou.errors import LilouInputError
    from lilou.hardware.dies import chip_groups, die_of

    # a string is one GPU ("t4" made the folds ('4',) and ('t',)); a scored GPU without rows (a misspelt "t5",
    # "T4") made a fold of its own that holds nothing out
    scored_gpus = [scored_gpus] if isinstance(scored_gpus, str) else list(scored_gpus)
    present_gpus = [present_gpus] if isinstance(present_gpus, str) else list(present_gpus)
    absent = sorted(set(scored_gpus) - set(present_gpus))
    if absent:
        raise LilouInputError(f"scored GPU(s) {', '.join(absent)} not among the present GPUs "
                              f"({', '.join(sorted(set(present_gpus)))})")
    scored_dies = {die_of(g) for g in scored_gpus}
    return [group for group in chip_groups([*present_gpus, *scored_gpus]) if die_of(group[0]) in scored_dies]
@dataclass(frozen=True)
class Scored:
    """Held-out predictions of the priced rows of a sample."""

    rows: dict[str, np.ndarray]   # the sample's columns for the priced rows
    predicted_ms: np.ndarray       # by a model that never saw the row's GPU (LOGO) ...
    loao_predicted_ms: np.ndarray  # ... or any GPU of its architecture (LOAO)
    roofline_ms: np.ndarray
    skipped: dict[str, int]
    baselines: dict[str, np.ndarray] = field(default_factory=dict)  # other predictors of the same rows (ms)


class Fold:
    """A kernel model and the roofline baseline fitted on the same rows, both never shown some GPUs."""

    def __init__(self, predictor, baseline) -> None:
        self.predictor, self.baseline = predictor, baseline

    def model_ms(self, priced: TableKernels, index: np.ndarray, rows: dict[str, np.ndarray]) -> np.ndarray:
        """The model's time comparable with each row's timing: launch floor + GPU work where the timing includes
        the launch (eager CUDA events, host loops, do_bench), the GPU work alone where it does not (profiler
        kernel time, CUDA-graph replay), as end-to-end composition uses the work and models launches itself."""
        kernels, devices = _take(priced, index)
        times = self.predictor.predict(kernels, devices)
        return np.where(includes_launch(rows, index), times.latency_ms, times.work_ms)

    def roofline_ms(self, priced: TableKernels, index: np.ndarray, rows: dict[str, np.ndarray]) -> np.ndarray:
        """floor + max(FLOPs / peak of the row's unit, bytes / bandwidth) / efficiency, per family; the floor only
        where the row's timing includes the launch."""
        kernels, devices = _take(priced, index)
        peak = unit_peaks(rows["gpu"][index], rows["unit"][index])
        compute = kernels.flops / (peak * 1e9)
        memory = kernels.bytes / (devices.bandwidth_gbs * 1e6)
        family = kernels.family
        floor = np.where(includes_launch(rows, index), self.baseline.floor_ms[family], 0.0)
        return floor + np.maximum(compute, memory) / self.baseline.efficiency[family]


def includes_launch(rows: dict[str, np.ndarray], index: np.ndarray) -> np.ndarray:
    """Per row: whether its timing method counts the host's launch overhead (rows without a timing column are
    NeuSight's eager CUDA events)."""
    if "timing" not in rows:
        return np.ones(len(index), dtype=bool)
    return np.isin(rows["timing"][index], list(TIMING_INCLUDES_LAUNCH))


def _take(priced: TableKernels, index: np.ndarray):
    from lilou.latency.kernel_model.features import DeviceColumns

    return priced.kernels.take(index), DeviceColumns(**{k: v[index] for k, v in vars(priced.devices).items()})


def unit_peaks(gpus: np.ndarray, units: np.ndarray) -> np.ndarray:
    """TFLOPS of the unit each row names (the GPU's FP32 CUDA-core peak where the unit is unknown or absent)."""
    from lilou.hardware import resolve_device

    out = np.empty(len(gpus), dtype=np.float64)
    for gpu in set(gpus):
        device = resolve_device(gpu)
        for unit in set(units[gpus == gpu]):
            peak = device.peak_tflops.get(unit) if unit else None
            out[(gpus == gpu) & (units == unit)] = peak or device.fp32_tflops
    return out


def score(sample: dict[str, list], logo_folds: Mapping[str, Fold], loao_folds: Mapping[str, Fold],
          shipped: Fold, use_units: bool = False) -> Scored:
    """Predict every priced row of ``sample`` with the fold that never saw its GPU (or architecture).

    ``use_units=False`` gives every row the FP32 CUDA-core peak, as the NeuSight-only model knows it."""
    priced = table_kernels(sample, use_units=use_units)
    rows = {c: np.asarray(sample[c], dtype=object)[priced.index] for c in sample}
    rows["architecture"] = np.array([architecture_class(g) for g in rows["gpu"]], dtype=object)
    return Scored(rows=rows,
                  predicted_ms=_pick(rows["gpu"], logo_folds, shipped, "model_ms", priced, rows),
                  loao_predicted_ms=_pick(rows["architecture"], loao_folds, shipped, "model_ms", priced, rows),
                  roofline_ms=_pick(rows["gpu"], logo_folds, shipped, "roofline_ms", priced, rows),
                  skipped=priced.skipped)


def _pick(keys: np.ndarray, folds: Mapping[str, Fold], default: Fold, method: str, priced: TableKernels,
          rows: dict[str, np.ndarray]) -> np.ndarray:
    """Each row predicted by ``folds[key]`` where its key has a fold, else by ``default``."""
    out = np.empty(len(keys), dtype=np.float64)
    for key in set(keys):
        index = np.flatnonzero(keys == key)
        out[index] = getattr(folds.get(key, default), method)(priced, index, rows)
    return out


def _ape(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    return np.abs(predicted - measured) / measured * 100.0


def logo_table(scored: Scored, min_rows: int = MIN_GPU_ROWS) -> list[dict]:
    """Per (source, dtype, family): the mean over held-out GPUs of each GPU's MAPE, model and roofline."""
    measured = scored.rows["latency_ms"].astype(np.float64)
    model, roof = _ape(scored.predicted_ms, measured), _ape(scored.roofline_ms, measured)
    extra = {name: _ape(values, measured) for name, values in scored.baselines.items()}
    out = []
    for key in sorted({(s, d, f) for s, d, f in zip(scored.rows["source"], scored.rows["dtype"], scored.rows["family"])}):
        group = (scored.rows["source"] == key[0]) & (scored.rows["dtype"] == key[1]) & (scored.rows["family"] == key[2])
        per_gpu = []
        for gpu in sorted(set(scored.rows["gpu"][group])):
            mask = group & (scored.rows["gpu"] == gpu)
            if mask.sum() >= min_rows:
                per_gpu.append((gpu, int(mask.sum()), float(model[mask].mean()), float(roof[mask].mean()),
                                float(np.median(model[mask])), {n: float(a[mask].mean()) for n, a in extra.items()}))
        if per_gpu:
            worst = max(per_gpu, key=lambda item: item[2])
            out.append({"source": key[0], "dtype": key[1], "family": key[2], "gpus": len(per_gpu),
                        "rows": sum(p[1] for p in per_gpu), "model_mape": statistics.fmean(p[2] for p in per_gpu),
                        "roofline_mape": statistics.fmean(p[3] for p in per_gpu),
                        "model_median_ape": statistics.fmean(p[4] for p in per_gpu), "worst_gpu": worst[0],
                        "worst_gpu_mape": worst[2],
                        **{f"{n}_mape": statistics.fmean(p[5][n] for p in per_gpu) for n in extra}})
    return out


def loao_table(scored: Scored, group_by: Sequence[str] = ("dtype", "family")) -> list[dict]:
    """Per architecture and (dtype, family): MAPE of the model that never saw that architecture, and the roofline."""
    measured = scored.rows["latency_ms"].astype(np.float64)
    model, roof = _ape(scored.loao_predicted_ms, measured), _ape(scored.roofline_ms, measured)
    extra = {name: _ape(values, measured) for name, values in scored.baselines.items()}
    keys = sorted({(a, *(scored.rows[g][i] for g in group_by)) for i, a in enumerate(scored.rows["architecture"])},
                  key=lambda k: (ARCHITECTURE_CLASSES.index(k[0]) if k[0] in ARCHITECTURE_CLASSES else 99, *k[1:]))
    out = []
    for key in keys:
        mask = scored.rows["architecture"] == key[0]
        for column, value in zip(group_by, key[1:]):
            mask &= scored.rows[column] == value
        out.append({"architecture": key[0], **dict(zip(group_by, key[1:])), "rows": int(mask.sum()),
                    "gpus": len(set(scored.rows["gpu"][mask])), "model_mape": float(model[mask].mean()),
                    "model_median_ape": float(np.median(model[mask])),
                    "roofline_mape": float(roof[mask].mean()),
                    **{f"{n}_mape": float(a[mask].mean()) for n, a in extra.items()}})
    return out


def per_architecture(scored: Scored) -> list[dict]:
    """One line per architecture fold over all its priced rows."""
    return loao_table(scored, group_by=())
