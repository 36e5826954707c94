"""Datasets of real GPU measurements: registry, fetch with checksums, local mirror, loaders.

>>> from lilou.data import load_kernels
>>> table = load_kernels("train", ops=["linear"], devices=["t4"])   # doctest: +SKIP
>>> table[0].latency_ms, table[0].flops                              # doctest: +SKIP

The loaders read the data at run time from :func:`data_root` (``--data-dir``,
``LILOU_DATA_DIR``, ``<repo>/datasets``, ``~/.cache/lilou/datasets``); nothing
is shipped in the package but file manifests (paths and sha256 sums).
"""
from lilou.data.paths import data_root, dataset_dir, dataset_file
from lilou.data.sources import DATASETS, Dataset, ManifestFile, get_dataset

__all__ = [
    "DATASETS",
    "Dataset",
    "E2EMeasurement",
    "KernelMeasurement",
    "KernelTable",
    "ManifestFile",
    "data_root",
    "dataset_dir",
    "dataset_file",
    "get_dataset",
    "load_device_configs",
    "load_e2e",
    "load_kernels",
]

_LAZY = {  # loaders import lilou.graph (onnx); keep `import lilou.data` light for the CLI
    "E2EMeasurement": "lilou.data.neusight",
    "KernelMeasurement": "lilou.data.neusight",
    "KernelTable": "lilou.data.neusight",
    "load_device_configs": "lilou.data.neusight",
    "load_e2e": "lilou.data.neusight",
    "load_kernels": "lilou.data.neusight",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lilou.data' has no attribute {name!r}")
