"""Real architectures (transformers configs, CNN / MLP / NAS-cell / random-DAG generators) exported to ONNX.

>>> from lilou.zoo import list_models, build, export_onnx
>>> export_onnx("resnet50", "resnet50.onnx", batch=8, strip_weights=True)

The catalogue (``list_models``, ``get_entry``) needs no torch; building and exporting
import it (the ``zoo`` extra) on first use of those names.
"""
from __future__ import annotations

import importlib
from typing import Any

from lilou.zoo.catalogue import ZooEntry, get_entry, list_models

#: name -> the module that holds it; imported when the name is first used (they import torch).
_NEEDS_TORCH = {"BuiltModel": "lilou.zoo.registry", "build": "lilou.zoo.registry",
                "parameter_count": "lilou.zoo.registry", "export_onnx": "lilou.zoo.export",
                "strip_weights": "lilou.zoo.export"}

__all__ = ["ZooEntry", "get_entry", "list_models", *_NEEDS_TORCH]


def __getattr__(name: str) -> Any:
    if name in _NEEDS_TORCH:
        return getattr(importlib.import_module(_NEEDS_TORCH[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
