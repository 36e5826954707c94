"""Where datasets live on disk, and the one-line error that says how to get them.

Resolution order of the data root (the folder holding ``neusight/``, ``wattgpu/``...):

1. an explicit argument (``--data-dir``);
2. the environment variable ``LILOU_DATA_DIR`` (CI points it at ``../shared/datasets``);
3. ``<repo>/datasets`` when running from a source checkout (the folder beside the
   ``lilou`` package that has a ``README.md``);
4. ``~/.cache/lilou/datasets``.
"""
from __future__ import annotations

import os
from pathlib import Path

from lilou.errors import MissingDataError

ENV_VAR = "LILOU_DATA_DIR"
USER_CACHE = Path("~/.cache/lilou/datasets")


def checkout_datasets_dir() -> Path | None:
    """``<repo>/datasets`` of a source checkout, or None for an installed package."""
    candidate = Path(__file__).resolve().parents[2] / "datasets"
    return candidate if (candidate / "README.md").is_file() else None


def data_root(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder that holds (or will hold) one sub-folder per dataset."""
    if data_dir:
        return Path(data_dir).expanduser()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    return checkout_datasets_dir() or USER_CACHE.expanduser()


def fetch_hint(name: str) -> str:
    return f"run `lilou data fetch {name}` or set {ENV_VAR} (or --data-dir) to a mirror such as ../shared/datasets"


def dataset_dir(name: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder of one dataset; :class:`MissingDataError` if it is not there."""
    folder = data_root(data_dir) / name
    if not folder.is_dir():
        raise MissingDataError(f"dataset {name!r} not found in {folder.parent}: {fetch_hint(name)}")
    return folder


def dataset_file(name: str, relative: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """One file of a dataset; :class:`MissingDataError` if it (or the dataset) is missing."""
    path = dataset_dir(name, data_dir) / relative
    if not path.is_file():
        raise MissingDataError(f"{name}/{relative} not found in {path.parents[len(Path(relative).parts)]}: "
                               f"{fetch_hint(name)}")
    return path
