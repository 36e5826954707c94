"""Build the shipped interval calibration (``lilou/plan/calibration.json``): ``make calibrate``.

    python -m lilou.plan.fit [--per-group N] [--e2e-json outputs/bench/e2e.json] [--out FILE]

Every residual is ``log(measured / predicted)`` of a prediction made by a model that never saw the
measured GPU (docs/intervals.md):

* **NeuSight FP32 kernels, leave-one-GPU-out**: the five fold checkpoints of ``lilou eval``
  (``outputs/logo/<fold>``, trained here when not cached) predict their held-out GPU's kernel rows.
  A fold whose held-out architecture still has a training GPU (P100 without P4, P4 without P100) gives
  ``arch_seen`` residuals; the A100, T4 and V100 folds hold out their whole architecture and give
  ``arch_unseen`` ones. Held-out rows outside the range the fold trained on (lilou.plan.extrapolation)
  also form the family's ``extrapolated`` pool.
* **NeuSight FP32 kernels, new shapes on a training GPU**: the shipped model on ``kernels/test`` rows of
  its own GPUs (``trained``).
* **Other dtypes** (the kernel table: AIConfigurator, Vidur, DeepBench, Liger-Kernel): each row predicted
  by the shipped model where it never saw the row's GPU, else by the NeuSight fold without it
  (:func:`lilou.latency.evaluation.table_folds.score`), pooled per family and dtype as ``arch_seen`` or
  ``arch_unseen`` by whether the predicting model saw a GPU of the row's architecture. Pascal rows have
  no leave-one-architecture-out fold here and enter only as ``arch_seen``.
* **Non-FP32 GEMMs and every convolution**, when the tensor-core model (``checkpoints/kernel_latency_tensor``) is
  shipped: it prices them (FP32 convolutions included), so their residuals come from its config's
  leave-one-architecture-out folds (:func:`tensor_residuals`, one fold model per architecture class, about 1 min
  each on 2 cores), and the NeuSight folds' convolution residuals are left out.
* **End to end**: :func:`lilou.latency.evaluation.e2e_eval.evaluate` leave-one-GPU-out (``make bench-e2e``).

Rows on H100 and L4 GPUs never enter (the kernel table holds them back). Training folds needs torch;
reading the result does not.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lilou.hardware.database import architecture_class
from lilou.latency.kernel_model.kernel import FAMILIES
from lilou.plan.calibration import BAND_CLASS, TRANSPOSED_FAMILY
from lilou.plan.conformal import COVERAGE, group_weights, log_residuals, symmetric_bounds, two_level_bounds
from lilou.plan.extrapolation import measured_ranges, range_features, range_key
from lilou.quiet import Log, log_to_stderr

REPO = Path(__file__).resolve().parents[2]
CALIBRATION_FILE = Path(__file__).resolve().parent / "calibration.json"
#: Fewest residuals (and held-out groups) a pool needs to be used on its own.
MIN_ROWS = 50
MIN_GROUPS = 2
#: End-to-end labels are few (37 on 5 GPUs): any count the conformal ranks allow (19 for 90 %) is used.
E2E_MIN_LABELS = 19
TIERS = ("trained", "arch_seen", "arch_unseen")
#: Where ``make calibrate`` leaves the residuals it pooled (git-ignored), for ``--residuals`` and the benchmark.
RESIDUALS_FILE = REPO / "outputs" / "calibration" / "residuals.npz"
#: How a pool's band is made from its residuals (``band``): ``symmetric``, the quantile of ``|r|`` with every
#: held-out GPU weighted once; ``two_level``, the quantile of a GPU's bias plus a row's spread around its own GPU's
#: bias, the two drawn independently (docs/intervals.md, "Two-level bands").
BAND_METHODS = ("symmetric", "two_level")
DEFAULT_BAND_METHOD = "symmetric"

@dataclass
class Residuals:
    """One held-out residual per row, with what it is pooled by."""

    residual: np.ndarray   # log(measured / predicted)
    predicted_ms: np.ndarray
    measured_ms: np.ndarray
    family: np.ndarray     # model family (gemm, conv, elementwise, layernorm, softmax)
    dtype: np.ndarray
    tier: np.ndarray       # trained | arch_seen | arch_unseen
    group: np.ndarray      # the held-out unit: fold name for NeuSight, GPU for the table
    gpu: np.ndarray
    source: np.ndarray
    extrapolated: np.ndarray  # bool: outside the range the predicting model trained on

    @classmethod
    def concat(cls, parts: list[Residuals]) -> Residuals:
        return cls(**{name: np.concatenate([getattr(p, name) for p in parts])
                      for name in cls.__dataclass_fields__})

    def take(self, mask: np.ndarray) -> Residuals:
        return Residuals(**{name: getattr(self, name)[mask] for name in self.__dataclass_fields__})

    def __len__(self) -> int:
        return len(self.residual)

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}.{name}": getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_arrays(cls, arrays, prefix: str) -> Residuals:
        return cls(**{name: arrays[f"{prefix}.{name}"] for name in cls.__dataclass_fields__})


def save_residuals(path: Path, pools: dict[str, Residuals], ranges: dict[str, Any]) -> None:
    """The residual pools (``kernel``, ``e2e``) and the measured ranges, for a rerun without the folds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    for prefix, pool in pools.items():
        arrays.update({k: (v.astype(str) if v.dtype == object else v) for k, v in pool.arrays(prefix).items()})
    np.savez_compressed(path, ranges=np.array(json.dumps(ranges)), **arrays)


def load_residuals(path: Path) -> tuple[Residuals, Residuals, dict[str, Any]]:
    """(kernel pool, end-to-end pool, ranges) as :func:`save_residuals` wrote them."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: (data[k].astype(object) if data[k].dtype.kind == "U" else data[k]) for k in data.files}
    return (Residuals.from_arrays(arrays, "kernel"), Residuals.from_arrays(arrays, "e2e"),
            json.loads(str(arrays.pop("ranges"))))


def _residuals(predicted, measured, family, dtype, tier, group, gpu, source, extrapolated) -> Residuals:
    n = len(measured)

    def col(value, kind=object):
        return np.asarray(value, dtype=kind) if np.ndim(value) else np.full(n, value, dtype=kind)

    predicted = np.asarray(predicted, dtype=np.float64)
    measured = np.asarray(measured, dtype=np.float64)
    return Residuals(residual=log_residuals(predicted, measured), predicted_ms=predicted, measured_ms=measured,
                     family=col(family), dtype=col(dtype), tier=col(tier), group=col(group), gpu=col(gpu),
                     source=col(source), extrapolated=col(extrapolated, bool))


# ------------------------------------------------------------------ NeuSight folds


def neusight_residuals(data_dir=None, log: Log = log_to_stderr) -> Residuals:
    """Leave-one-GPU-out residuals of the five NeuSight folds, and in-sample residuals on new shapes."""
    from lilou.checkpoints import KERNEL_LATENCY, checkpoint_path
    from lilou.data.neusight import load_kernels
    from lilou.latency.kernel_model.dataset import build_dataset
    from lilou.latency.evaluation.fold_parts import FOLDS, logo_parts
    from lilou.latency.kernel_model.inference import KernelModel

    parts = []
    every = build_dataset(load_kernels("train", data_dir=data_dir))  # read once, split per fold
    log(f"NeuSight kernels: {len(every):,} rows")
    for gpu, (fold, held_out) in FOLDS.items():
        started = time.perf_counter()
        fold_parts = logo_parts(gpu, data_dir=data_dir, log=log)
        seen = {architecture_class(g) for g in fold_parts.trained_on}
        train = every.take(np.flatnonzero(np.isin(every.gpu, fold_parts.trained_on)))
        test = every.take(np.flatnonzero(np.isin(every.gpu, list(held_out))))
        predicted = fold_parts.kernel_model.predict(test.kernels, test.devices).latency_ms
        extrapolated = _outside_training(train, test)
        tier = np.array(["arch_seen" if architecture_class(g) in seen else "arch_unseen" for g in test.gpu], dtype=object)
        parts.append(_residuals(predicted, test.latency_ms, test.family, "fp32", tier, fold, test.gpu, "neusight",
                                extrapolated))
        log(f"fold {fold}: {len(test):,} held-out kernel rows ({time.perf_counter() - started:.0f} s)")
    shipped = KernelModel.load(checkpoint_path(KERNEL_LATENCY))
    test = build_dataset(load_kernels("test", devices=shipped.config["trained_on"], data_dir=data_dir))
    predicted = shipped.predict(test.kernels, test.devices).latency_ms
    parts.append(_residuals(predicted, test.latency_ms, test.family, "fp32", "trained", test.gpu, test.gpu,
                            "neusight", False))
    log(f"in-sample new shapes: {len(test):,} kernel rows of the training GPUs")
    return Residuals.concat(parts)


def _outside_training(train, test) -> np.ndarray:
    """bool per test row: outside the per-family range of the training rows' range features."""
    train_features = range_features(train.kernels, train.devices.sms)
    test_features = range_features(test.kernels, test.devices.sms)
    out = np.ones(len(test), dtype=bool)
    for family in set(test.family):
        rows, reference = test.family == family, train_features[train.family == family]
        if len(reference) == 0:
            continue
        low, high = reference.min(axis=0), reference.max(axis=0)
        values = test_features[rows]
        out[rows] = ~((values >= low) & (values <= high)).all(axis=1)
    return out


# ------------------------------------------------------------------ the kernel table


@dataclass
class TableScan:
    residuals: Residuals
    ranges: dict[str, Any]
    sampled_rows: int
    skipped: dict[str, int]


def table_residuals(per_group: int, data_dir=None, log: Log = log_to_stderr) -> TableScan:
    """Held-out residuals of the kernel table's non-NeuSight rows, and every architecture x dtype x family's
    measured range (all sources)."""
    from lilou.checkpoints import KERNEL_LATENCY, checkpoint_path
    from lilou.data.kernel_table import kernel_table
    from lilou.latency.evaluation.fold_parts import FOLDS, logo_parts
    from lilou.latency.kernel_model.inference import KernelModel
    from lilou.latency.evaluation.table_folds import Fold, score
    from lilou.latency.kernel_model.table_sample import sample_table
    from lilou.latency.kernel_model.table_kernels import PRICED_FAMILIES, table_kernels

    started = time.perf_counter()
    sample = sample_table(kernel_table(data_dir=data_dir), per_group=per_group)
    log(f"kernel table: {len(sample['gpu']):,} rows sampled ({time.perf_counter() - started:.0f} s)")
    priced = table_kernels(sample, use_units=False)
    families = np.array([PRICED_FAMILIES[f] for f in np.asarray(sample["family"], dtype=object)[priced.index]],
                        dtype=object)
    gpus = np.asarray(sample["gpu"], dtype=object)[priced.index]
    dtypes = np.asarray(sample["dtype"], dtype=object)[priced.index]
    archs = np.array([architecture_class(g) for g in gpus], dtype=object)
    features = range_features(priced.kernels, priced.devices.sms)
    ranges = measured_ranges(features, [range_key(a, d, f) for a, d, f in zip(archs, dtypes, families)])

    shipped_model = KernelModel.load(checkpoint_path(KERNEL_LATENCY))
    fold_models = {fold: logo_parts(gpu, data_dir=data_dir, log=log) for gpu, (fold, _) in FOLDS.items()}
    logo = {g: Fold(fold_models[fold].kernel_model, fold_models[fold].roofline)
            for _, (fold, held) in FOLDS.items() for g in held}
    loao = {"Volta": "v100", "Turing": "t4", "GA100": "a100"}
    loao_folds = {arch: Fold(fold_models[f].kernel_model, fold_models[f].roofline) for arch, f in loao.items()}
    shipped = Fold(shipped_model, fold_models["a100"].roofline)  # the roofline is not used here
    keep = np.asarray(sample["source"], dtype=object) != "neusight"  # NeuSight rows: neusight_residuals
    sub = {c: [v for v, k in zip(values, keep) if k] for c, values in sample.items()}
    scored = score(sub, logo, loao_folds, shipped, use_units=False)
    rows = scored.rows
    family = np.array([PRICED_FAMILIES[f] for f in rows["family"]], dtype=object)
    shipped_archs = {architecture_class(g) for g in shipped_model.config["trained_on"]}
    fold_archs = {g: {architecture_class(t) for t in fold_models[fold].trained_on}
                  for _, (fold, held) in FOLDS.items() for g in held}
    measured = rows["latency_ms"].astype(np.float64)
    logo_tier = np.array(["arch_seen" if a in fold_archs.get(g, shipped_archs) else "arch_unseen"
                          for g, a in zip(rows["gpu"], rows["architecture"])], dtype=object)
    parts = [_residuals(scored.predicted_ms, measured, family, rows["dtype"], logo_tier, rows["gpu"], rows["gpu"],
                        rows["source"], False)]
    # Rows of an architecture with its own fold whose LOGO model still saw that architecture (A100 SXM rows:
    # the shipped model saw the A100 PCIe) also give a leave-one-architecture-out residual.
    extra = np.array([a in loao and t == "arch_seen" for a, t in zip(rows["architecture"], logo_tier)])
    if extra.any():
        parts.append(_residuals(scored.loao_predicted_ms[extra], measured[extra], family[extra], rows["dtype"][extra],
                                "arch_unseen", rows["gpu"][extra], rows["gpu"][extra], rows["source"][extra], False))
    residuals = Residuals.concat(parts)
    positive = (residuals.predicted_ms > 0) & (residuals.measured_ms > 0)
    log(f"kernel table: {len(residuals):,} held-out residuals ({time.perf_counter() - started:.0f} s)")
    return TableScan(residuals.take(positive), ranges, len(sample["gpu"]), dict(scored.skipped))


# ------------------------------------------------------------------ the tensor-core model


#: Families the tensor-core model prices: GEMMs and convolutions off the FP32 CUDA cores, and FP32 convolutions.
TENSOR_FAMILIES = ("gemm", "conv")


def tensor_residuals(per_group: int | None = None, data_dir=None, log: Log = log_to_stderr) -> Residuals:
    """Leave-one-architecture-out residuals of the tensor-core model's config (``experiment=kernel_latency_tensor``)
    on the rows of the kernel table it prices (non-FP32 GEMMs, every convolution): one fold model per
    architecture class that has such rows, trained on every other row of the same sample (all of them
    ``arch_unseen``)."""
    from hydra import compose, initialize_config_dir

    from lilou.data.kernel_table import kernel_table
    from lilou.latency.kernel_model.dataset import dataset_from_sample
    from lilou.latency.kernel_model.table_sample import sample_table
    from lilou.latency.kernel_model.table_kernels import PRICED_FAMILIES, table_kernels
    from lilou.latency.kernel_model.training import fit
    from lilou.latency.kernel_model.transposed import backward_data_rows, held_out_prices
    from lilou.quiet import quiet_lightning

    def config(*overrides: str):
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            return compose("train", overrides=["experiment=kernel_latency_tensor", "trainer.enable_progress_bar=false",
                                               "output_checkpoint=null", *overrides])

    started = time.perf_counter()
    per_group = per_group or int(config().data.per_group)
    sample = sample_table(kernel_table(data_dir=data_dir), per_group=per_group)
    dataset = dataset_from_sample(sample)
    priced = table_kernels(sample)
    rows = {c: np.asarray(sample[c], dtype=object)[priced.index] for c in ("source", "gpu", "dtype", "family")}
    family = np.array([PRICED_FAMILIES[f] for f in rows["family"]], dtype=object)
    arch = np.array([architecture_class(g) for g in rows["gpu"]], dtype=object)
    # FP32 convolutions too: the tensor-core model prices them (EndToEndModel.prices_fp32_convolutions); NeuSight's
    # eager 3x3 rows and DeepBench's host-loop rows of every geometry, each against its own timing's floor.
    wanted = ((rows["dtype"] != "fp32") & np.isin(family, TENSOR_FAMILIES)) | (family == "conv")
    # FP32 transposed convolutions: DeepBench's backward-data rows, as the ConvTranspose that runs them, priced by
    # the same folds times the backward-data / forward ratio refitted without the architecture
    transposed, _, pairs = backward_data_rows(data_dir)
    transposed_arch = np.array([architecture_class(g) for g in transposed.gpu], dtype=object)
    parts = []
    for architecture in sorted(set(arch[wanted])):
        mask = arch == architecture
        with quiet_lightning():
            predictor, datamodule = fit(config(f"data.per_group={per_group}",
                                               f"data.held_out_architectures=[{architecture}]"), dataset=dataset)
        test = datamodule.test_rows
        if len(test) != int(mask.sum()):
            raise RuntimeError(f"fold {architecture}: {len(test)} held-out rows, expected {int(mask.sum())}")
        predicted = predictor.predict(test.kernels, test.devices, test.timing).latency_ms
        keep = wanted[mask] & (predicted > 0) & (test.latency_ms > 0)
        index = np.flatnonzero(mask)[keep]
        parts.append(_residuals(predicted[keep], test.latency_ms[keep], family[index], rows["dtype"][index],
                                "arch_unseen", rows["gpu"][index], rows["gpu"][index],
                                np.array([f"tensor:{x}" for x in rows["source"][index]], dtype=object), False))
        held = np.flatnonzero(transposed_arch == architecture)
        if len(held):
            rows_t = transposed.take(held)
            predicted_t = held_out_prices(predictor, rows_t, pairs, architecture)[1]
            parts.append(_residuals(predicted_t, rows_t.latency_ms, TRANSPOSED_FAMILY, "fp32", "arch_unseen",
                                    rows_t.gpu, rows_t.gpu, "tensor:deepbench-backward-data", False))
        log(f"tensor fold {architecture}: {int(keep.sum()):,} GEMM/conv rows it prices, {len(held)} transposed "
            f"convolutions ({time.perf_counter() - started:.0f} s)")
    return Residuals.concat(parts)


# ------------------------------------------------------------------ end to end


def pooled_kernel_residuals(neusight: Residuals, table: Residuals, tensor: Residuals | None) -> Residuals:
    """The kernel residuals the bands are built from (``make calibrate``; ``make bench-intervals`` scores the same).

    FP32 pools are NeuSight's alone: the runtime Lilou predicts (PyTorch eager, CUDA events); the table's FP32 rows
    (DeepBench host-timer loops, Liger-Kernel do_bench) time something else. Non-FP32 GEMMs and every convolution
    are priced by the tensor-core model when it is shipped (``tensor``: its folds' residuals), so the table's
    rows of those families and the NeuSight-only model's convolution residuals are left out."""
    other = table.take(table.dtype != "fp32")
    if tensor is None:
        return Residuals.concat([neusight, other])
    return Residuals.concat([neusight.take(neusight.family != "conv"), tensor,
                             other.take(~np.isin(other.family, TENSOR_FAMILIES))])


def e2e_residuals(e2e_json: Path | None = None, data_dir=None, log: Log = log_to_stderr) -> Residuals:
    """Leave-one-GPU-out end-to-end residuals: from a ``make bench-e2e`` JSON, or by running the evaluation."""
    if e2e_json is not None:
        result = json.loads(Path(e2e_json).read_text())
    else:
        from lilou.latency.evaluation.e2e_eval import evaluate

        result = evaluate(data_dir=data_dir, log=log).to_json()
    if result.get("mode") != "leave-one-GPU-out":
        raise ValueError(f"{e2e_json}: not a leave-one-GPU-out evaluation ({result.get('mode')})")
    rows = result["rows"]
    return _residuals([r["model_ms"] for r in rows], [r["measured_ms"] for r in rows], "e2e", "fp32", "any",
                      [r["fold"] for r in rows], [r["gpu"] for r in rows], "neusight-e2e", False)


# ------------------------------------------------------------------ bands


def band(residuals: Residuals, coverage: float = COVERAGE, min_rows: int = MIN_ROWS,
         min_groups: int = MIN_GROUPS, method: str = DEFAULT_BAND_METHOD) -> dict[str, Any] | None:
    """The conformal band of a pool, every held-out group weighted equally; None when the pool is too small.

    Symmetric (:func:`lilou.plan.conformal.symmetric_bounds`): held-out GPUs are biased both ways, and two
    one-sided bounds fitted on the other GPUs missed a GPU biased the other way. Nested leave-one-GPU-out
    (``make bench-intervals``), one-sided -> symmetric: end to end 79 % -> 93 % coverage (median width
    32 -> 38 %); FP32 elementwise 85.3 -> 90.0 %, GEMM 92.7 -> 91.0 % (width 175 -> 140 %), conv 90.8 -> 91.5 %
    (187 -> 159 %), softmax 89.2 -> 90.2 %, layer norm 93.5 -> 97.2 % (85 -> 80 %).

    ``method="two_level"``: :func:`lilou.plan.conformal.two_level_bounds`, a held-out GPU's bias and its rows' spread
    around it convolved (docs/intervals.md, "Two-level bands")."""
    if method not in BAND_METHODS:
        raise ValueError(f"band method {method!r} is not one of {', '.join(BAND_METHODS)}")
    groups = sorted(set(residuals.group))
    if len(residuals) < min_rows or len(groups) < min_groups:
        return None
    try:
        if method == "two_level":
            lo, hi = two_level_bounds(residuals.residual, residuals.group, coverage)
        else:
            lo, hi = symmetric_bounds(residuals.residual, coverage, group_weights(residuals.group))
    except ValueError:
        return None
    return {"lo": round(lo, 5), "hi": round(hi, 5), "n": int(len(residuals)), "groups": [str(g) for g in groups]}


def kernel_bands(residuals: Residuals, coverage: float = COVERAGE,
                 method: str = DEFAULT_BAND_METHOD) -> dict[str, dict[str, Any]]:
    """``{"family|dtype|tier": band}``, plus ``"family|dtype|any"`` over every tier of a family and dtype.

    Two pools stand in where a family and dtype has too few held-out GPUs for ``any`` (BF16/FP16 norms and
    elementwise kernels: one or two GPUs each in the kernel table): ``"family|dtype|one_gpu"``, the band of its
    single GPU's residuals, and ``"memory-bound|dtype|any"``, every memory-bound family of the dtype pooled
    (:data:`lilou.plan.calibration.BAND_CLASS`). The lookup takes their hull (Calibration.kernel_band)."""
    out: dict[str, dict[str, Any]] = {}
    for family, dtype in sorted({(f, d) for f, d in zip(residuals.family, residuals.dtype)}):
        pool = residuals.take((residuals.family == family) & (residuals.dtype == dtype))
        for tier in TIERS:
            found = band(pool.take(pool.tier == tier), coverage, method=method)
            if found:
                out[f"{family}|{dtype}|{tier}"] = found
        unseen = pool.take(pool.tier != "trained")
        found = band(unseen, coverage, method=method)
        if found:
            out[f"{family}|{dtype}|any"] = found
        else:
            found = band(unseen, coverage, min_groups=1, method=method)
            if found:
                out[f"{family}|{dtype}|one_gpu"] = found
    classes = np.array([BAND_CLASS.get(f, "") for f in residuals.family], dtype=object)
    for kind, dtype in sorted({(c, d) for c, d in zip(classes, residuals.dtype) if c}):
        found = band(residuals.take((classes == kind) & (residuals.dtype == dtype) & (residuals.tier != "trained")),
                     coverage, method=method)
        if found:
            out[f"{kind}|{dtype}|any"] = found
    return out


def extrapolated_bands(residuals: Residuals, coverage: float = COVERAGE,
                       method: str = DEFAULT_BAND_METHOD) -> dict[str, dict[str, Any]]:
    """``{family: band}`` of held-out rows outside the range their model trained on (NeuSight folds)."""
    out = {}
    for family in sorted(set(residuals.family)):
        found = band(residuals.take((residuals.family == family) & residuals.extrapolated
                                    & (residuals.tier != "trained")), coverage, method=method)
        if found:
            out[str(family)] = found
    return out


def kernel_model_fingerprint(folder: Path | None = None) -> str:
    """sha256 (16 hex digits) of the kernel checkpoint's config and weights: which model the bands are for."""
    from lilou.checkpoints import KERNEL_LATENCY, checkpoint_path
    from lilou.plan.calibration import checkpoint_fingerprint

    return checkpoint_fingerprint(str(folder or checkpoint_path(KERNEL_LATENCY)))


def build_calibration(kernel: Residuals, e2e: Residuals, ranges: dict[str, Any], coverage: float = COVERAGE,
                      provenance: dict[str, Any] | None = None, method: str = DEFAULT_BAND_METHOD) -> dict[str, Any]:
    from lilou.checkpoints import KERNEL_LATENCY, checkpoint_path
    from lilou.latency.kernel_model.inference import KernelModel

    end_to_end = band(e2e, coverage, min_rows=E2E_MIN_LABELS, method=method)
    if end_to_end is None:
        raise ValueError(f"{len(e2e)} end-to-end residuals are too few for a {100 * coverage:g} % band")
    model = KernelModel.load(checkpoint_path(KERNEL_LATENCY))
    return {"version": 1, "coverage": coverage, "command": "make calibrate  (python -m lilou.plan.fit)",
            "residual": "log(measured_ms / predicted_ms), predicted by a model that never saw the measured GPU",
            "kernel_model": {"checkpoint": f"checkpoints/{KERNEL_LATENCY}", "fingerprint": kernel_model_fingerprint(),
                             "trained_on": sorted(model.config["trained_on"])},
            "band_method": method, "families": list(FAMILIES), "kernel": kernel_bands(kernel, coverage, method),
            "extrapolated": extrapolated_bands(kernel, coverage, method), "e2e": end_to_end, "ranges": ranges,
            **({"provenance": provenance} if provenance else {})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-group", type=int, default=4000,
                        help="kernel-table rows sampled per source x GPU x dtype x family (default 4000)")
    parser.add_argument("--e2e-json", type=Path, default=None,
                        help="reuse a `make bench-e2e` result (outputs/bench/e2e.json) instead of re-running it")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", type=Path, default=CALIBRATION_FILE)
    parser.add_argument("--residuals", type=Path, default=None,
                        help=f"rebuild the bands from the residuals a previous run saved ({RESIDUALS_FILE.relative_to(REPO)})")
    parser.add_argument("--no-tensor", action="store_true",
                        help="skip the tensor-core model's folds (its GEMM/conv bands then come from the FP32 model)")
    parser.add_argument("--band-method", choices=BAND_METHODS, default=DEFAULT_BAND_METHOD,
                        help=f"how a pool's band is made (default {DEFAULT_BAND_METHOD}; docs/intervals.md)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.residuals is not None:
        kernel, e2e, ranges = load_residuals(args.residuals)
        # the counts of the run that pooled the residuals stay; the rebuild is recorded beside them
        previous = json.loads(args.out.read_text()).get("provenance", {}) if args.out.exists() else {}
        provenance = {**previous, "bands_rebuilt_from": str(args.residuals)}
        calibration = build_calibration(kernel, e2e, ranges, provenance=provenance, method=args.band_method)
        _add_tensor_fingerprint(calibration, kernel)
        return _write(calibration, args.out, started)
    neusight = neusight_residuals(args.data_dir)
    table = table_residuals(args.per_group, args.data_dir)
    e2e = e2e_residuals(args.e2e_json, args.data_dir)
    from lilou.checkpoints import KERNEL_LATENCY_TENSOR, checkpoint_path

    tensor = (tensor_residuals(None, args.data_dir) if checkpoint_path(KERNEL_LATENCY_TENSOR, required=False).exists()
              and not args.no_tensor else None)
    provenance = {"neusight_rows": len(neusight), "table_rows": int((table.residuals.dtype != "fp32").sum()),
                  "e2e_labels": len(e2e),
                  "table_sampled_rows": table.sampled_rows, "per_group": args.per_group,
                  "seconds": round(time.perf_counter() - started, 1)}
    kernel = pooled_kernel_residuals(neusight, table.residuals, tensor)
    save_residuals(RESIDUALS_FILE, {"kernel": kernel, "e2e": e2e}, table.ranges)
    calibration = build_calibration(kernel, e2e, table.ranges, provenance=provenance, method=args.band_method)
    _add_tensor_fingerprint(calibration, kernel)
    return _write(calibration, args.out, started)


def _add_tensor_fingerprint(calibration: dict[str, Any], kernel: Residuals) -> None:
    """Record which tensor-core checkpoint the non-FP32 GEMM/conv bands are for (when they come from its folds)."""
    from lilou.checkpoints import KERNEL_LATENCY_TENSOR, checkpoint_path

    rows = sum(1 for source in kernel.source if str(source).startswith("tensor:"))  # from tensor_residuals
    folder = checkpoint_path(KERNEL_LATENCY_TENSOR, required=False)
    if folder.exists() and rows:
        calibration["tensor_model"] = {"checkpoint": f"checkpoints/{KERNEL_LATENCY_TENSOR}",
                                       "fingerprint": kernel_model_fingerprint(folder),
                                       "families": [*TENSOR_FAMILIES, TRANSPOSED_FAMILY], "residual_rows": rows}


def _write(calibration: dict[str, Any], out: Path, started: float) -> int:
    out.write_text(json.dumps(calibration, indent=1) + "\n")
    print(f"wrote {out} ({len(calibration['kernel'])} kernel bands, {len(calibration['ranges'])} ranges, "
          f"{time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
