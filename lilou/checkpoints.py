"""Where the shipped trained models live.

Checkpoints are folders under ``checkpoints/`` at the repository root, each with
its weights, ``config.json`` and ``metrics.json``. ``LILOU_CHECKPOINTS`` points
elsewhere (e.g. at a freshly trained set).
"""
from __future__ import annotations

import os
from pathlib import Path

from lilou.errors import MissingDataError

KERNEL_LATENCY = "kernel_latency"
#: GEMMs and convolutions off the FP32 CUDA cores (BF16 tensor cores ...): trained on the whole kernel table.
KERNEL_LATENCY_TENSOR = "kernel_latency_tensor"
FUSION_GNN = "fusion_gnn"
FUSION_RULES = "fusion_rules"


def checkpoints_root() -> Path:
    override = os.environ.get("LILOU_CHECKPOINTS")
    if override:
        return Path(override)
    return Path(__file__).resolve().parent.parent / "checkpoints"


def checkpoint_path(name: str, required: bool = True) -> Path:
    """Folder of a shipped checkpoint; with ``required`` a clear error when it is missing."""
    path = checkpoints_root() / name
    if required and not path.exists():
        raise MissingDataError(f"checkpoint {name!r} not found at {path}; train it with "
                               "`make train-kernels` (or `make train-fusion`) "
                               "or set LILOU_CHECKPOINTS to a folder that has it")
    return path
