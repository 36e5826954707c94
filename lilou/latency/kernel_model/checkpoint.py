"""Reading a kernel-latency checkpoint folder, shared by the torch and numpy runtimes."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lilou.errors import LilouInputError
from lilou.latency.kernel_model.kernel_types import KERNEL_TYPES


def read_kernel_checkpoint(folder: str | os.PathLike[str]) -> tuple[dict[str, Any], Path]:
    """The checkpoint's config and its weights file; a clear error when either is missing or stale."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise LilouInputError(f"no kernel-latency checkpoint in {folder}: it is a file, not a checkpoint's folder")
    weights = folder / "model.safetensors"
    try:
        config = json.loads((folder / "config.json").read_text())
        if not weights.exists():
            raise FileNotFoundError(2, "missing", str(weights))
    except FileNotFoundError as exc:
        raise LilouInputError(f"no kernel-latency checkpoint in {folder} ({exc.filename} missing); "
                              "train one with `make train-kernels`") from None
    if tuple(config["kernel_types"]) != KERNEL_TYPES:
        raise LilouInputError(f"checkpoint {folder} was trained with another kernel-type list; retrain it")
    return config, weights
