"""Train the kernel model from a Hydra config; shared by `lilou.train` and the benchmark."""
from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_only
import numpy as np
import torch
from hydra.utils import instantiate, to_absolute_path
from omegaconf import DictConfig, OmegaConf

from lilou.errors import LilouInputError
from lilou.latency.kernel_model.checkpoint import FP32_KIND, TENSOR_KIND
from lilou.latency.kernel_model.datamodule import KernelDataModule
from lilou.latency.kernel_model.metrics import error_table
from lilou.latency.kernel_model.model import KernelLatencyEnsemble
from lilou.latency.kernel_model.predictor import KernelLatencyPredictor
from lilou.runs import run_provenance, writable_folder


def fit(cfg: DictConfig, logger: Any = False, dataset: Any = None) -> tuple[KernelLatencyPredictor, KernelDataModule]:
    """Seed, build data and model from ``cfg``, train; returns the predictor and its data.

    ``cfg.ensemble`` > 1 trains that many nets on the same rows, seeded ``seed``, ``seed + 1`` ..., and the predictor
    averages them (:class:`~lilou.latency.kernel_model.model.KernelLatencyEnsemble`).

    ``dataset``: rows already loaded (a :class:`~lilou.latency.kernel_model.dataset.KernelDataset`), so that folds of a
    benchmark split one sample instead of reading it again."""
    try:
        int(cfg.seed)
    except (TypeError, ValueError):
        raise LilouInputError(f"seed={cfg.seed}: give an integer") from None
    for key in ("max_epochs", "max_steps"):  # 0 saved an untrained checkpoint and reported its val_mape, exit 0
        value = cfg.trainer.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise LilouInputError(f"trainer.{key}={value}: give an integer number of {key[4:]} (-1: no limit)")
        if value is not None and (value == 0 or value < -1):
            raise LilouInputError(f"trainer.{key}={value}: that trains nothing and would save an untrained "
                                  "checkpoint; give at least 1 (-1: no limit)")
    # int("abc"): a ValueError traceback, exit status 1
    for key, least, hint in (("ensemble", 1, ""), ("torch_threads", 0, " (0 or null: torch's default)")):
        value = cfg.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise LilouInputError(f"{key}={value}: give a positive integer{hint}")
    L.seed_everything(cfg.seed, workers=True)
    if cfg.get("torch_threads"):
        torch.set_num_threads(int(cfg.torch_threads))
    datamodule: KernelDataModule = instantiate(cfg.data)
    if dataset is not None:
        datamodule.preloaded = dataset
    datamodule.setup()
    val_rows, fraction = getattr(datamodule, "val_rows", None), float(getattr(datamodule, "val_fraction", 0) or 0)
    if fraction > 0 and val_rows is not None and len(val_rows) == 0:  # shipped a checkpoint with no val_mape, silently
        raise LilouInputError(f"data.val_fraction={fraction:g} of {len(datamodule.train.log_latency)} training rows is no "
                              "validation row, so the checkpoint would have no val_mape: give more rows "
                              "(data.max_rows), or data.val_fraction=0 to train without validation on purpose")
    nets = []
    for member in range(int(cfg.get("ensemble", 1))):
        if member:  # the first member continues the seeded stream, as a single model always did
            L.seed_everything(cfg.seed + member, workers=True)
        module = instantiate(cfg.model, num_features=datamodule.train.features.shape[1],
                             num_type_features=datamodule.train.type_features.shape[1])
        trainer: L.Trainer = instantiate(cfg.trainer, logger=logger if member == 0 else False)
        trainer.fit(module, datamodule=datamodule)
        nets.append(module.net)
    net = nets[0] if len(nets) == 1 else KernelLatencyEnsemble(nets)
    config = {"num_features": int(datamodule.train.features.shape[1]),
              "num_type_features": int(datamodule.train.type_features.shape[1]), "hidden": list(cfg.model.hidden),
              "power_limited": bool(cfg.model.get("power_limited", False)),
              "power_duration": bool(cfg.model.get("power_duration", False)),
              "num_timings": int(cfg.model.get("num_timings", 1)),
              "floor_units": net.floor_units,
              "ensemble": len(nets),
              "winograd_roofline": datamodule.winograd_roofline,
              "trained_on": sorted({str(g) for g in datamodule.train_gpus}),
              # which slot it fills: the unit-aware model (precision features) prices every unit but FP32
              "kind": TENSOR_KIND if "precision" in datamodule.feature_groups else FP32_KIND,
              "config": OmegaConf.to_container(cfg, resolve=False)}
    predictor = KernelLatencyPredictor(net, datamodule.feature_groups, datamodule.type_feature_groups, config)
    return predictor, datamodule


def held_out_metrics(predictor: KernelLatencyPredictor, datamodule: KernelDataModule) -> list[dict[str, Any]]:
    rows = datamodule.test_rows
    if rows is None or len(rows) == 0:
        return []
    prediction = predictor.predict(rows.kernels, rows.devices, rows.timing)  # each row with its own floor
    return error_table(rows, prediction.latency_ms, prediction.kernel_type)


def describe_data(datamodule: KernelDataModule) -> str:
    """The rows a run read, as metrics.json records them (it said "every source" for data.sources=[vidur])."""
    from lilou.latency.kernel_model.table_datamodule import KernelTableDataModule

    if isinstance(datamodule, KernelTableDataModule):
        sources = ", ".join(datamodule.sources) if datamodule.sources else "every source"
        return f"kernel-measurement table, {sources} (lilou.data.kernel_table), at most {datamodule.per_group} rows " \
               "per source, GPU, dtype and family"
    what = "NeuSight kernels/train (real measurements, FP32 PyTorch 2.1 eager)"
    if datamodule.ops:
        what += f", ops {', '.join(datamodule.ops)}"
    if datamodule.table_rows:
        what += ", with kernel-table rows " + "; ".join(f"{k} {', '.join(v)}" for k, v in datamodule.table_rows.items())
    return what


def train_kernel_model(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    output_dir = Path(HydraConfig.get().runtime.output_dir)
    if cfg.get("output_checkpoint"):  # a bad path was found only after training, as a traceback
        writable_folder(to_absolute_path(cfg.output_checkpoint), "output_checkpoint")
    logger = instantiate(cfg.logger) if cfg.get("logger") else False
    predictor, datamodule = fit(cfg, logger=logger)
    if rank_zero_only.rank != 0:  # under DDP only the first process evaluates and writes
        return None
    # The job's own command (a sweep's job: its values, not the sweep's line), the commit, the data folder
    # (resolved: config.json keeps ${oc.env:LILOU_DATA_DIR,null}) and, in metrics.json only, the date (two runs
    # of one seed still write the same config.json).
    run = run_provenance(cfg.data.get("data_dir"))
    predictor.config.update({k: run[k] for k in ("command", "git_commit", "data_dir")})
    metrics: dict[str, Any] = {
        **run,
        "seed": cfg.seed,
        "data": describe_data(datamodule),
        "train_rows": int(len(datamodule.train.log_latency)),
        "trained_on": predictor.config["trained_on"],
        "held_out": held_out_metrics(predictor, datamodule),
        "benchmark": "leave-one-GPU-out figures: make bench-kernels (see docs/kernel_model.md)",
        "python": platform.python_version(),
    }
    val = datamodule.val_rows
    if val is not None and len(val):
        predicted = predictor.predict(val.kernels, val.devices, val.timing).latency_ms  # each row with its own floor
        metrics["val_mape"] = float(100 * np.mean(np.abs(predicted - val.latency_ms) / val.latency_ms))
    predictor.save(output_dir / "checkpoint", metrics)
    if cfg.get("output_checkpoint"):
        predictor.save(to_absolute_path(cfg.output_checkpoint), metrics)
    write_table_coverage(cfg, predictor, datamodule, output_dir / "checkpoint")
    print(json.dumps({k: v for k, v in metrics.items() if k != "held_out"}, indent=2))
    return metrics.get("val_mape")


def write_table_coverage(cfg: DictConfig, predictor: KernelLatencyPredictor, datamodule: KernelDataModule,
                         run_checkpoint: Path) -> None:
    """``coverage.json`` beside a tensor-core model's weights (run folder and ``output_checkpoint``), as
    ``scripts/kernel_coverage.py`` writes it but counting only the GPUs it trained on: inference needs it, and a
    freshly trained checkpoint stopped `lilou infer` with "input/output failed" for want of it."""
    from lilou.latency.kernel_model.coverage import table_coverage, write_coverage
    from lilou.latency.kernel_model.table_datamodule import KernelTableDataModule

    if predictor.config.get("kind") != TENSOR_KIND or not isinstance(datamodule, KernelTableDataModule):
        return
    coverage, _ = table_coverage(datamodule.sources, datamodule.data_dir, gpus=predictor.config["trained_on"])
    for folder in (run_checkpoint, *([to_absolute_path(cfg.output_checkpoint)] if cfg.get("output_checkpoint") else [])):
        write_coverage(folder, coverage)
