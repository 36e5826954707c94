"""Lilou: predict how long an ONNX model takes to run inference on an NVIDIA GPU or MIG slice."""

__version__ = "0.1.0"
