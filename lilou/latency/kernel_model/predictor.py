"""A trained kernel model on disk and in use: save, load (no pickle), predict.

A checkpoint is a folder: ``model.safetensors`` (weights and normalisation; an ensemble's members under
``members.<i>.``), ``config.json`` (architecture, feature groups, kernel-type list, ``ensemble`` size) and
``metrics.json`` (what it scored, on which data, made by which command).
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from lilou.latency.kernel_model.checkpoint import read_kernel_checkpoint
from lilou.latency.kernel_model.features import (DeviceColumns, KernelBatch, floor_units_of, kernel_features, roofline_inputs,
                                                 roofline_ms)
from lilou.latency.kernel_model.kernel import FAMILIES
from lilou.latency.kernel_model.kernel_types import KERNEL_TYPES, family_type_mask
from lilou.latency.kernel_model.model import KernelLatencyEnsemble, KernelLatencyNet


@dataclass(frozen=True)
class KernelPrediction:
    latency_ms: np.ndarray    # floor + work
    work_ms: np.ndarray       # GPU time of the kernel alone
    floor_ms: np.ndarray      # per-launch floor of its family
    kernel_type: np.ndarray   # str per kernel
    compute_bound: np.ndarray  # bool: FLOPs / peak above bytes / bandwidth


class KernelLatencyPredictor:
    def __init__(self, net: KernelLatencyNet | KernelLatencyEnsemble, feature_groups: Sequence[str],
                 type_feature_groups: Sequence[str], config: dict[str, Any]) -> None:
        self.net = net.eval()
        self.feature_groups = tuple(feature_groups)
        self.type_feature_groups = tuple(type_feature_groups)
        self.config = config
        self.winograd = bool(config.get("winograd_roofline", False))  # data.winograd_roofline at training

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> KernelLatencyPredictor:
        config, weights = read_kernel_checkpoint(folder)
        state = load_file(weights)
        def member() -> KernelLatencyNet:
            return KernelLatencyNet(config["num_features"], config["num_type_features"], hidden=config["hidden"],
                                    power_limited=config.get("power_limited", False),
                                    power_duration=config.get("power_duration", False),
                                    num_timings=config.get("num_timings", 1), floor_units=config.get("floor_units", 1))

        size = int(config.get("ensemble", 1))
        net = member() if size == 1 else KernelLatencyEnsemble([member() for _ in range(size)])
        net.load_state_dict(state)
        return cls(net, config["feature_groups"], config["type_feature_groups"], config)

    def save(self, folder: str | os.PathLike[str], metrics: dict[str, Any] | None = None) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.net.state_dict().items()}, folder / "model.safetensors")
        config = {**self.config, "feature_groups": list(self.feature_groups),
                  "type_feature_groups": list(self.type_feature_groups), "kernel_types": list(KERNEL_TYPES)}
        (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        if metrics is not None:
            (folder / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        return folder

    @torch.no_grad()
    def predict(self, kernels: KernelBatch, devices: DeviceColumns, timing: np.ndarray | None = None) -> KernelPrediction:
        """Per-kernel times; ``timing`` (indices into ``TIMINGS``) picks the launch floor of a timing method
        where the model learned one per method (default: eager CUDA events)."""
        compute, memory = roofline_ms(kernels, devices, self.winograd)
        features = torch.from_numpy(kernel_features(kernels, devices, self.feature_groups))
        type_features = torch.from_numpy(kernel_features(kernels, devices, self.type_feature_groups))
        family = torch.from_numpy(kernels.family)
        roofline = torch.from_numpy(roofline_inputs(kernels, devices, self.winograd))
        timing_index = None
        if timing is not None and self.net.num_timings > 1:
            timing_index = torch.from_numpy(np.broadcast_to(np.asarray(timing, dtype=np.int64), (len(kernels),)).copy())
        unit = torch.from_numpy(floor_units_of(devices, len(kernels))) if self.net.floor_units > 1 else None
        log_floor, log_work, logits = self.net.parts(features, type_features, family, roofline, timing_index, unit)
        floor, work = log_floor.exp().double().numpy(), log_work.exp().double().numpy()
        allowed = family_type_mask(FAMILIES)[kernels.family]  # the family's types only, as inference.predict_types
        types = np.asarray(KERNEL_TYPES, dtype=object)[np.where(allowed, logits.numpy(), -np.inf).argmax(axis=1)]
        return KernelPrediction(latency_ms=floor + work, work_ms=work, floor_ms=floor, kernel_type=types,
                                compute_bound=compute >= memory)
