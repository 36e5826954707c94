"""What a training or research run records of how it was made, and the folders it writes to.

Shared by the Hydra tasks (kernel and tensor-core kernel models, fusion GNN, end-to-end constants) and the
ablation scripts, so that each checkpoint names the same things: the command that ran it (the job's own
overrides, not a sweep's line), the code's commit, the data folder and the date. It imports no model code, so
every stage of the pipeline may import it.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lilou.errors import LilouInputError

REPO = Path(__file__).resolve().parents[1]
#: The entry point a Hydra run is recorded as when it cannot tell (a test, a notebook).
TRAIN_ENTRY = "python -m lilou.train"


def repo_relative(path: str | Path, repo: Path | None = None) -> str:
    """``path`` relative to the repository root (``repo``, default :data:`REPO`) when it lies inside it (what a
    checkout elsewhere can rebuild)."""
    path = Path(path).resolve()
    try:
        return path.relative_to((repo or REPO).resolve()).as_posix()
    except ValueError:
        return str(path)


def git_commit() -> str | None:
    """The checkout's commit, with ``-dirty`` when tracked files differ from it; None outside a git checkout."""
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("-dirty" if dirty else "") if commit else None


def entry_point() -> str:
    """``python -m <module>`` for the lilou module this process runs (``lilou.train``, ``lilou.research.e2e_task``),
    else :data:`TRAIN_ENTRY`."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is not None and script.suffix == ".py" and script.is_file():
        try:
            module = script.resolve().relative_to(REPO).with_suffix("")
        except ValueError:
            return TRAIN_ENTRY
        if module.parts and module.parts[0] == "lilou":
            return "python -m " + ".".join(module.parts)
    return TRAIN_ENTRY


def train_command() -> str:
    """The command line that ran this job, as Hydra received its overrides: under a sweep (``-m``), each job's own
    values, not the sweep's line; ``hydra.run.dir`` and other ``hydra.*`` settings are left out."""
    try:
        from hydra.core.hydra_config import HydraConfig

        overrides = list(HydraConfig.get().overrides.task)
    except (ImportError, ValueError):  # not under Hydra's main (a test, a notebook)
        overrides = sys.argv[1:]
    return " ".join([entry_point(), *overrides])


def run_provenance(data_dir: str | Path | None, repo: Path | None = None) -> dict[str, Any]:
    """The fields every checkpoint records of its run: ``command`` (:func:`train_command`), ``git_commit``
    (:func:`git_commit`), ``data_dir`` (resolved, repo-relative when inside the checkout) and ``date`` (UTC)."""
    return {"command": train_command(), "git_commit": git_commit(),
            "data_dir": repo_relative(data_dir, repo) if data_dir else None,
            "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}


def data_dir_used() -> str | None:
    """``LILOU_DATA_DIR`` as this process sees it (resolved), or None when unset."""
    value = os.environ.get("LILOU_DATA_DIR")
    return str(Path(value).resolve()) if value else None


def weights_fingerprint(folder: str | Path) -> str:
    """sha256 (16 hex) of a checkpoint's ``model.safetensors``: what a later fit records of the model it was fitted
    on (the interval calibration, the end-to-end constants). The weights alone: config.json also records where the
    training code lived, which a refactor may move."""
    return hashlib.sha256((Path(folder) / "model.safetensors").read_bytes()).hexdigest()[:16]


def writable_folder(path: str | Path, what: str) -> Path:
    """Create ``path`` (with its parents) and check a file can be written there, before a run spends its time:
    a path under a regular file, or one the user cannot write, was found only after training, as a traceback.
    ``what`` names the setting in the one-line error (``output_checkpoint``, ``--out``)."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".lilou-write-probe-"):
            pass
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        raise LilouInputError(f"{what}={path}: cannot write there ({reason}{f': {exc.filename}' if exc.filename else ''}); "
                              "give a folder you can create and write") from None
    return folder
