"""Reading a kernel-latency checkpoint folder, shared by the torch and numpy runtimes."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lilou.checkpoints import make_remedy
from lilou.errors import LilouInputError
from lilou.latency.kernel_model.kernel_types import KERNEL_TYPES


#: What a kernel checkpoint's config.json must hold to be loaded.
REQUIRED_KEYS = ("kernel_types", "num_features", "num_type_features", "hidden", "feature_groups",
                 "type_feature_groups")
#: The two kinds (config.json ``kind``): the FP32 model (checkpoints/kernel_latency) and the unit-aware one that
#: prices every other unit (checkpoints/kernel_latency_tensor).
FP32_KIND = "kernel_latency"
TENSOR_KIND = "kernel_latency_tensor"


def checkpoint_kind(config: dict[str, Any]) -> str:
    """The recorded ``kind``; for checkpoints saved before it was recorded (the shipped ones), the unit-aware model
    is the one that learned precision features (what :attr:`KernelModel.uses_units` reads)."""
    kind = config.get("kind")
    if kind:
        return str(kind)
    return TENSOR_KIND if "precision" in (config.get("feature_groups") or ()) else FP32_KIND


def _looks_like(folder: Path, config: dict[str, Any]) -> str:
    """What a folder that is not a kernel checkpoint seems to be, for the error."""
    if "architecture" in config and "backends" in config:
        return "; it looks like a fusion GNN checkpoint (checkpoints/fusion_gnn)"
    if (folder / "model.json").exists() or "kernel_checkpoint" in config:
        return "; it looks like the end-to-end overhead constants (checkpoints/e2e_overhead)"
    return ""


def read_kernel_checkpoint(folder: str | os.PathLike[str], kind: str | None = None) -> tuple[dict[str, Any], Path]:
    """The checkpoint's config and its weights file; a clear error when either is missing or stale, when the folder
    holds another kind of checkpoint (a fusion GNN's was ``KeyError: 'kernel_types'``), or, with ``kind``, a kernel
    model of the other kind (the FP32 model placed as the tensor-core one priced tensor-core kernels at FP32 rates)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise LilouInputError(f"no kernel-latency checkpoint in {folder}: it is a file, not a checkpoint's folder")
    weights = folder / "model.safetensors"
    try:
        config = json.loads((folder / "config.json").read_text())
    except FileNotFoundError as exc:
        looks = " (it looks like the fusion rule tables, checkpoints/fusion_rules)" \
            if (folder / "eager.json").exists() or (folder / "tvm.json").exists() else ""
        raise LilouInputError(f"no kernel-latency checkpoint in {folder} ({exc.filename} missing){looks}; "
                              f"train one with {make_remedy('`make train-kernels`')}") from None
    if not isinstance(config, dict):
        raise LilouInputError(f"{folder} is not a kernel-latency checkpoint: its config.json is not a JSON object")
    missing = [key for key in REQUIRED_KEYS if key not in config]
    if missing:
        raise LilouInputError(f"{folder} is not a kernel-latency checkpoint: its config.json has no "
                              f"{', '.join(missing)}{_looks_like(folder, config)}")
    if not weights.exists():
        raise LilouInputError(f"no kernel-latency checkpoint in {folder} ({weights} missing); "
                              "train one with `make train-kernels`")
    if tuple(config["kernel_types"]) != KERNEL_TYPES:
        raise LilouInputError(f"checkpoint {folder} was trained with another kernel-type list; retrain it")
    found = checkpoint_kind(config)
    if kind is not None and found != kind:
        what = {FP32_KIND: "the FP32 kernel model (experiment=kernel_latency, no precision features)",
                TENSOR_KIND: "the tensor-core kernel model (experiment=kernel_latency_tensor)"}
        raise LilouInputError(f"{folder} holds {what.get(found, found)}, not {what.get(kind, kind)}: put it in the "
                              f"{found} folder, or train the other one with `make train-kernels`")
    return config, weights
