"""Real architectures (transformers configs, CNN / MLP / NAS-cell / random-DAG generators) exported to ONNX.

>>> from lilou.zoo import list_models, build, export_onnx
>>> export_onnx("resnet50", "resnet50.onnx", batch=8, strip_weights=True)
"""
from lilou.zoo.export import export_onnx, strip_weights
from lilou.zoo.registry import BuiltModel, ZooEntry, build, get_entry, list_models, parameter_count

__all__ = [
    "BuiltModel",
    "ZooEntry",
    "build",
    "export_onnx",
    "get_entry",
    "list_models",
    "parameter_count",
    "strip_weights",
]
