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
"""
from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lilou.errors import LilouInputError, MissingDataError
from lilou.hardware import resolve_device
from lilou.latency.evaluation.folds import KERNEL_FOLDS
from lilou.quiet import quiet_lightning

REPO = Path(__file__).resolve().parents[3]
#: Fold checkpoints (git-ignored).
LOGO_DIR = REPO / "outputs" / "logo"
#: Weight-free exports of the labelled models (shared with ``make fit-e2e``).
MODELS_DIR = REPO / "datasets" / "e2e_models"
FUSION_MODES = ("predicted", "oracle", "none")
#: Held-out GPU of the end-to-end labels -> (fold name, kernel-row GPUs held out with it).
FOLDS: dict[str, tuple[str, tuple[str, ...]]] = {gpus[0]: (fold, gpus) for fold, gpus in KERNEL_FOLDS.items()}
PREDICTORS = ("model", "roofline")

Log = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ metrics


def ape(predicted: float, measured: float) -> float:
    """Absolute percentage error (%)."""
    return 100.0 * abs(predicted - measured) / measured


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks, ties sharing the mean of their positions."""
    x = np.asarray(values, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson correlation of the average ranks (nan when undefined)."""
    if len(x) != len(y):
        raise ValueError("spearman: x and y differ in length")
    if len(x) < 2:
        return math.nan
    rx, ry = average_ranks(x), average_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / denominator) if denominator else math.nan


def kendall(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b (ties corrected; nan when undefined)."""
    if len(x) != len(y):
        raise ValueError("kendall: x and y differ in length")
    n = len(x)
    concordant = discordant = ties_x = ties_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif dx == dy:
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denominator if denominator else math.nan


# ------------------------------------------------------------------ results


@dataclass
class EvalRow:
    gpu: str
    model: str
    seq: int
    batch: int
    measured_ms: float
    fold: str
    kernels: int
    predicted_ms: dict[str, float] = field(default_factory=dict)  # predictor -> ms
    # category -> (measured ms rebuilt from NeuSight's per-node CSV, the model's predicted ms); see breakdown.py
    breakdown: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def workload(self) -> str:
        return f"{self.model}-{self.seq}-{self.batch}"

    def ape(self, predictor: str) -> float:
        return ape(self.predicted_ms[predictor], self.measured_ms)

    def to_json(self) -> dict[str, Any]:
        out = {"gpu": self.gpu, "model": self.model, "seq": self.seq, "batch": self.batch, "fold": self.fold,
               "kernels": self.kernels, "measured_ms": round(self.measured_ms, 3)}
        for predictor, value in self.predicted_ms.items():
            out[f"{predictor}_ms"] = round(value, 3)
            out[f"{predictor}_ape"] = round(self.ape(predictor), 2)
        if self.breakdown:
            out["breakdown_ms"] = {category: {"measured": round(measured, 3), "model": round(predicted, 3)}
                                   for category, (measured, predicted) in self.breakdown.items()}
        return out


@dataclass
class EvalResult:
    mode: str                 # "leave-one-GPU-out" or "in-sample"
    fusion: str
    rows: list[EvalRow]
    folds: dict[str, dict[str, Any]]  # held-out GPU -> fitted parameters and provenance
    kernel_groups: list[str] = field(default_factory=list)  # partition sources (gnn, rules, oracle, none)
    seconds: float = 0.0

    def per_gpu(self) -> list[dict[str, Any]]:
        out = []
        for gpu in sorted({r.gpu for r in self.rows}):
            rows = [r for r in self.rows if r.gpu == gpu]
            out.append({"gpu": gpu, "n": len(rows), **self._errors(rows)})
        return out

    def overall(self) -> dict[str, Any]:
        return {"n": len(self.rows), "gpus": len({r.gpu for r in self.rows}), **self._errors(self.rows)}

    def ranking(self) -> list[dict[str, Any]]:
        """Per workload (model, seq, batch) measured on >= 2 GPUs: rank correlation of GPU latencies."""
        out = []
        for key in sorted({(r.model, r.seq, r.batch) for r in self.rows}):
            rows = sorted((r for r in self.rows if (r.model, r.seq, r.batch) == key), key=lambda r: r.gpu)
            workload = rows[0].workload
            if len(rows) < 2:
                continue
            measured = [r.measured_ms for r in rows]
            entry: dict[str, Any] = {"model": rows[0].model, "workload": workload, "n_gpus": len(rows),
                                     "measured_order": [r.gpu for r in sorted(rows, key=lambda r: r.measured_ms)]}
            for predictor in PREDICTORS:
                predicted = [r.predicted_ms[predictor] for r in rows]
                entry[f"{predictor}_spearman"] = _round(spearman(measured, predicted), 4)
                entry[f"{predictor}_kendall"] = _round(kendall(measured, predicted), 4)
            out.append(entry)
        return out

    def ranking_per_model(self) -> list[dict[str, Any]]:
        """Mean of each model's workload correlations (workloads on >= 2 GPUs)."""
        workloads = self.ranking()
        out = []
        for model in sorted({w["model"] for w in workloads}):
            picked = [w for w in workloads if w["model"] == model]
            entry: dict[str, Any] = {"model": model, "workloads": len(picked),
                                     "max_gpus": max(w["n_gpus"] for w in picked)}
            for predictor in PREDICTORS:
                for stat in ("spearman", "kendall"):
                    values = [w[f"{predictor}_{stat}"] for w in picked if w[f"{predictor}_{stat}"] is not None]
                    entry[f"{predictor}_{stat}"] = _round(float(np.mean(values)), 4) if values else None
            out.append(entry)
        return out

    def breakdown_summary(self) -> list[dict[str, Any]]:
        """Per GPU (and "all") and category, over labels with per-node measurements: the mean share of the
        forward pass measured and predicted (%), and the MAPE of the category's ms."""
        from lilou.latency.composition.breakdown import CATEGORIES

        rows = [r for r in self.rows if r.breakdown]
        if not rows:
            return []
        out = []
        for gpu in ["all", *sorted({r.gpu for r in rows})]:
            picked = [r for r in rows if gpu in ("all", r.gpu)]
            for category in CATEGORIES:
                measured = np.array([r.breakdown[category][0] for r in picked])
                predicted = np.array([r.breakdown[category][1] for r in picked])
                measured_total = np.array([sum(m for m, _ in r.breakdown.values()) for r in picked])
                predicted_total = np.array([sum(p for _, p in r.breakdown.values()) for r in picked])
                used = measured > 0
                out.append({"gpu": gpu, "category": category, "labels": len(picked),
                            "measured_share": round(float(np.mean(100 * measured / measured_total)), 2),
                            "model_share": round(float(np.mean(100 * predicted / predicted_total)), 2),
                            "model_mape": _round(float(np.mean(100 * np.abs(predicted[used] - measured[used])
                                                               / measured[used])) if used.any() else math.nan, 2)})
        return out

    @staticmethod
    def _errors(rows: Sequence[EvalRow]) -> dict[str, float]:
        out = {}
        for predictor in PREDICTORS:
            errors = [r.ape(predictor) for r in rows]
            out[f"{predictor}_mape"] = round(float(np.mean(errors)), 2)
            out[f"{predictor}_median_ape"] = round(float(np.median(errors)), 2)
            out[f"{predictor}_max_ape"] = round(float(np.max(errors)), 2)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "fusion": self.fusion, "backend": "eager",
                "labels": "neusight e2e/<GPU>/<model>-inf-<seq>-<batch>.json (eager FP32, not -fusion)",
                "overall": self.overall(), "per_gpu": self.per_gpu(), "ranking_per_model": self.ranking_per_model(),
                "ranking": self.ranking(), "rows": [r.to_json() for r in self.rows], "folds": self.folds,
                "kernel_groups": self.kernel_groups, "breakdown": self.breakdown_summary(),
                "seconds": round(self.seconds, 1)}


def _round(value: float, digits: int) -> float | None:
    return None if value is None or math.isnan(value) else round(value, digits)


# ------------------------------------------------------------------ workloads


@dataclass
class Workload:
    """One labelled (model, seq, batch): its kernels, described once for every fold."""

    model: str
    seq: int
    batch: int
    kernels: Any              # GraphKernels
    source: str               # where the groups came from (gnn, rules, oracle, none)


def select_labels(data_dir=None, models: Sequence[str] | None = None, gpus: Sequence[str] | None = None):
    """(labels to report, labels of the evaluated models on every GPU); bad names are input errors."""
    from lilou.data.neusight import load_e2e

    labels = [label for label in load_e2e(data_dir) if not label.fusion]
    if not labels:
        raise LilouInputError("no eager end-to-end labels found under neusight/e2e")
    known_models = sorted({label.model for label in labels})
    if models:
        unknown = sorted(set(models) - set(known_models))
        if unknown:
            raise LilouInputError(f"no end-to-end labels for model(s) {', '.join(unknown)}; "
                                  f"labelled models: {', '.join(known_models)}")
        labels = [label for label in labels if label.model in set(models)]
    tested = labels
    if gpus:
        names = []
        for raw in gpus:
            name = resolve_device(raw.strip()).gpu
            if not any(label.gpu == name for label in labels):
                raise LilouInputError(f"no end-to-end labels for GPU {raw!r} (of the chosen models); labelled GPUs: "
                                      f"{', '.join(sorted({label.gpu for label in labels}))}")
            names.append(name)
        tested = [label for label in labels if label.gpu in names]
    return tested, labels


def partition_for(graph, path: Path, fusion: str):
    from lilou.fusion.partition import partition_from_groups

    if fusion == "predicted":
        from lilou.fusion.predict import predict_partition

        return predict_partition(graph, "eager")
    if fusion == "oracle":
        from lilou.fusion.backends.eager import eager_partition
        from lilou.graph.loading import load_onnx

        return eager_partition(load_onnx(path), graph)
    if fusion == "none":
        return partition_from_groups(graph, [[n] for n in graph.runtime_nodes()], "eager", source="none")
    raise LilouInputError(f"unknown fusion mode {fusion!r}; choose one of: {', '.join(FUSION_MODES)}")


def build_workloads(labels, fusion: str, models_dir: Path = MODELS_DIR, log: Log = _stderr) -> dict:
    """(model, seq, batch) -> :class:`Workload`, exporting the models first where not cached."""
    from lilou.graph.dag import load_graph
    from lilou.latency.composition.calibrate import export_models
    from lilou.latency.composition.end_to_end import describe_kernels

    paths = export_models(labels, Path(models_dir))
    workloads = {}
    for model, seq, batch in sorted({(label.model, label.seq, label.batch) for label in labels}):
        started = time.perf_counter()
        graph = load_graph(paths[(model, seq)], batch=batch)
        partition = partition_for(graph, paths[(model, seq)], fusion)
        kernels = describe_kernels(graph, partition)
        workloads[(model, seq, batch)] = Workload(model, seq, batch, kernels, partition.source)
        log(f"  {model} seq {seq} batch {batch}: {len(kernels)} kernels ({partition.source}, "
            f"{time.perf_counter() - started:.1f} s)")
    return workloads


# ------------------------------------------------------------------ fitted parts of one fold


@dataclass
class FoldParts:
    """What one fold fits without its held-out GPU (or the shipped parts, in-sample)."""

    name: str
    kernel_model: Any          # lilou.latency.kernel_model.inference.KernelModel
    fallback: Any              # FallbackModel
    gap_ms: float
    roofline: Any              # RooflineBaseline
    trained_on: list[str]
    provenance: dict[str, Any]
    shipped_overhead: Any = None  # in-sample: the shipped OverheadModel


def kernel_config(held_out: Sequence[str], overrides: Sequence[str] = (), data_dir=None):
    from hydra import compose, initialize_config_dir

    extra = [f"data.held_out_gpus=[{','.join(held_out)}]", "trainer.enable_progress_bar=false",
             "output_checkpoint=null"]
    if data_dir is not None:
        extra.append(f"data.data_dir={Path(data_dir).resolve()}")
    # An ``experiment=...`` among the overrides replaces the shipped one (e.g. experiment=kernel_table).
    experiment = next((o for o in overrides if o.startswith("experiment=")), "experiment=kernel_latency")
    rest = [o for o in overrides if not o.startswith("experiment=")]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("train", overrides=[experiment, *rest, *extra])


def fold_key(cfg, data_dir=None) -> str:
    """Hash of what a fold checkpoint depends on: config, feature/kernel-type lists, the data files."""
    from omegaconf import OmegaConf

    from lilou.data.neusight import kernel_files
    from lilou.latency.kernel_model.features import feature_names
    from lilou.latency.kernel_model.kernel_types import KERNEL_TYPES

    config = OmegaConf.to_container(cfg, resolve=False)
    config.pop("hydra", None)
    config.get("data", {}).pop("data_dir", None)  # where the data lives does not matter; the files do
    files = sorted((p.name, p.parent.name, p.stat().st_size) for p in kernel_files("train", data_dir=data_dir))
    payload = {"config": config, "kernel_types": list(KERNEL_TYPES),
               "features": feature_names(tuple(cfg.data.feature_groups)),
               "type_features": feature_names(tuple(cfg.data.type_feature_groups)), "files": files}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def logo_parts(held_out_gpu: str, overrides: Sequence[str] = (), data_dir=None, cache_dir: Path = LOGO_DIR,
               retrain: bool = False, log: Log = _stderr) -> FoldParts:
    """The fold without ``held_out_gpu``: trained (or read from the cache) and fitted."""
    from lilou.latency.composition.calibrate import fit_floor_side
    from lilou.latency.kernel_model.inference import KernelModel
    from lilou.latency.evaluation.roofline import RooflineBaseline

    if held_out_gpu not in FOLDS:
        raise LilouInputError(f"no leave-one-GPU-out fold for {held_out_gpu}; folds: {', '.join(FOLDS)}")
    fold, held_out = FOLDS[held_out_gpu]
    cfg = kernel_config(held_out, overrides, data_dir)
    key = fold_key(cfg, data_dir)
    folder = Path(cache_dir) / fold / "kernel_latency"
    key_file = folder / "key.json"
    cached = (not retrain and key_file.exists() and json.loads(key_file.read_text()).get("key") == key
              and (folder / "model.safetensors").exists() and (folder / "roofline.json").exists())
    if not cached:
        from lilou.latency.kernel_model.training import fit

        started = time.perf_counter()
        log(f"fold {fold}: training the per-kernel model without {', '.join(held_out)} (cache {folder})")
        with quiet_lightning():
            predictor, datamodule = fit(cfg)
        if set(predictor.config["trained_on"]) & set(held_out):
            raise RuntimeError(f"fold {fold}: held-out GPU rows leaked into training")
        roofline = RooflineBaseline.fit(datamodule.train_rows)
        predictor.save(folder, {"held_out": list(held_out), "train_rows": len(datamodule.train_rows),
                                "seconds": round(time.perf_counter() - started, 1)})
        (folder / "roofline.json").write_text(json.dumps(
            {"floor_ms": roofline.floor_ms.tolist(), "efficiency": roofline.efficiency.tolist()}, indent=2) + "\n")
        key_file.write_text(json.dumps({"key": key, "held_out": list(held_out), "overrides": list(overrides)},
                                       indent=2) + "\n")
        log(f"fold {fold}: trained in {time.perf_counter() - started:.0f} s")
    kernel_model = KernelModel.load(folder)
    trained_on = sorted(kernel_model.config["trained_on"])
    if set(trained_on) & set(held_out):
        raise RuntimeError(f"fold checkpoint {folder} was trained on a held-out GPU")
    raw = json.loads((folder / "roofline.json").read_text())
    roofline = RooflineBaseline(np.asarray(raw["floor_ms"]), np.asarray(raw["efficiency"]))
    fallback, gap, _ = fit_floor_side(trained_on, data_dir)
    return FoldParts(name=fold, kernel_model=kernel_model, fallback=fallback, gap_ms=gap, roofline=roofline,
                     trained_on=trained_on,
                     provenance={"kernel_checkpoint": str(folder.relative_to(REPO) if folder.is_relative_to(REPO)
                                                          else folder),
                                 "key": key, "cached": cached, "held_out_kernel_rows": list(held_out)})


def shipped_parts(data_dir=None, log: Log = _stderr) -> FoldParts:
    """In-sample: the shipped kernel checkpoint and overhead; the roofline fitted on all training rows."""
    from lilou.checkpoints import KERNEL_LATENCY, checkpoint_path
    from lilou.latency.composition.fallback import FallbackModel
    from lilou.latency.kernel_model.inference import KernelModel
    from lilou.latency.composition.overhead import E2E_OVERHEAD, OverheadModel, load_overhead

    kernel_model = KernelModel.load(checkpoint_path(KERNEL_LATENCY))
    params = load_overhead(checkpoint_path(E2E_OVERHEAD))
    trained_on = sorted(kernel_model.config["trained_on"])
    roofline = _cached_roofline(trained_on, data_dir, log)
    return FoldParts(name="shipped", kernel_model=kernel_model, fallback=FallbackModel(**params["fallback"]),
                     gap_ms=float(params["overhead"]["gap_ms"]), roofline=roofline, trained_on=trained_on,
                     provenance={"kernel_checkpoint": f"checkpoints/{KERNEL_LATENCY}",
                                 "overhead_checkpoint": f"checkpoints/{E2E_OVERHEAD}"},
                     shipped_overhead=OverheadModel(**params["overhead"]))


def _cached_roofline(trained_on: Sequence[str], data_dir, log: Log):
    from lilou.data.neusight import kernel_files, load_kernels
    from lilou.latency.kernel_model.dataset import build_dataset
    from lilou.latency.evaluation.roofline import RooflineBaseline

    files = sorted((p.name, p.parent.name, p.stat().st_size) for p in kernel_files("train", data_dir=data_dir))
    key = hashlib.sha256(json.dumps({"gpus": list(trained_on), "files": files}).encode()).hexdigest()[:16]
    path = LOGO_DIR / "all" / "roofline.json"
    if path.exists():
        raw = json.loads(path.read_text())
        if raw.get("key") == key:
            return RooflineBaseline(np.asarray(raw["floor_ms"]), np.asarray(raw["efficiency"]))
    log("fitting the roofline baseline on every training GPU's kernel rows")
    roofline = RooflineBaseline.fit(build_dataset(load_kernels("train", devices=trained_on, data_dir=data_dir)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "floor_ms": roofline.floor_ms.tolist(),
                                "efficiency": roofline.efficiency.tolist()}, indent=2) + "\n")
    return roofline


# ------------------------------------------------------------------ prediction


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
             log: Log = _stderr) -> EvalResult:
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


__all__ = ["EvalResult", "EvalRow", "FOLDS", "FUSION_MODES", "ape", "average_ranks", "evaluate", "kendall",
           "spearman"]
