"""Where the shipped trained models live.

Checkpoints are folders under ``checkpoints/`` at the repository root, each with
its weights, ``config.json`` and ``metrics.json``. ``LILOU_CHECKPOINTS`` points
elsewhere (e.g. at a freshly trained set).
"""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from lilou.errors import LilouInputError, MissingDataError, one_line

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


@contextlib.contextmanager
def reading_checkpoints(*folders: str | os.PathLike[str]) -> Iterator[None]:
    """Loading checkpoints from ``folders``: a file there that cannot be parsed (a truncated copy, a half-written
    volume) is one line naming it and ``LILOU_CHECKPOINTS`` (exit status 2), as a missing checkpoint is, where the
    loader's own error (``SafetensorError``, ``JSONDecodeError``) named no file. Any other error is left alone."""
    try:
        yield
    except LilouInputError:
        raise
    except Exception:
        corrupt = _first_corrupt_file(folders)
        if corrupt is None:
            raise
        path, why = corrupt
        raise LilouInputError(f"checkpoint file {path} cannot be read ({why}): restore it from the repository's "
                              "checkpoints/ or set LILOU_CHECKPOINTS to a folder with intact checkpoints") from None


def _first_corrupt_file(folders) -> tuple[Path, str] | None:
    """The first JSON or safetensors file in ``folders`` (each a checkpoint folder, or one file) that does not parse,
    with why."""
    for folder in map(Path, folders):
        files = sorted(folder.iterdir()) if folder.is_dir() else [folder]
        for path in files:
            if not path.is_file():
                continue
            try:
                if path.suffix == ".json":
                    json.loads(path.read_text(encoding="utf-8"))
                elif path.suffix == ".safetensors":
                    from safetensors import safe_open

                    with safe_open(str(path), framework="numpy") as weights:
                        for key in weights.keys():  # noqa: SIM118 - a safe_open handle is not iterable
                            weights.get_tensor(key)
            except Exception as exc:  # noqa: BLE001 - any failure to parse is the file's
                return path, f"{type(exc).__name__}: {one_line(exc)}"
    return None
