"""Read an ONNX file safely and cheaply.

Weights are never needed to count FLOPs and bytes: only their shapes and types
are. The file is therefore parsed with ``load_external_data=False``; the one
exception is a *small integer* tensor stored as external data (a shape or axes
constant that shape inference needs), which is read only when its file lies
inside the model's own folder. Weight-stripped files (initializers with dims
and type but no bytes, as ``lilou zoo export --strip-weights`` writes) load the
same way.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto

from lilou.errors import LilouInputError

# Shape constants are tiny; anything larger is a weight we never read.
_MAX_EXTERNAL_SHAPE_CONSTANT_ELEMENTS = 64
_INTEGER_TYPES = {TensorProto.INT64, TensorProto.INT32}


def load_onnx(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """Parse an ONNX file without its weight bytes; raise a one-line error on bad input."""
    path = Path(path)
    if not path.exists():
        raise LilouInputError(f"no such file: {path}")
    if path.is_dir():
        raise LilouInputError(f"{path} is a directory, not an ONNX file")
    if path.stat().st_size == 0:
        raise LilouInputError(f"{path} is empty, not an ONNX model")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, RuntimeWarning, ValueError, UnicodeDecodeError) as exc:
        raise LilouInputError(f"{path} is not a readable ONNX model (truncated or not ONNX: {_first_line(exc)})") from None
    except OSError as exc:
        raise LilouInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    _check_is_model(model, path)
    _load_small_external_integers(model, path.parent)
    if model.functions:
        model = onnx.inliner.inline_local_functions(model)
    return model


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _check_is_model(model: onnx.ModelProto, path: Path) -> None:
    """protobuf happily parses many byte strings as an (empty) ModelProto."""
    if not model.HasField("graph") or not model.opset_import:
        raise LilouInputError(f"{path} is not an ONNX model (no graph or opset found; truncated or another format)")
    if len(model.graph.node) == 0:
        raise LilouInputError(f"{path} holds an empty graph (no nodes)")


def _load_small_external_integers(model: onnx.ModelProto, model_dir: Path) -> None:
    """Inline tiny int tensors kept as external data; never follow paths out of ``model_dir``."""
    root = model_dir.resolve()
    for tensor in model.graph.initializer:
        if tensor.data_location != TensorProto.EXTERNAL or tensor.data_type not in _INTEGER_TYPES:
            continue
        if int(np.prod(tensor.dims, dtype=np.int64)) > _MAX_EXTERNAL_SHAPE_CONSTANT_ELEMENTS:
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        target = (root / location).resolve()
        if not location or not target.is_relative_to(root) or not target.is_file():
            continue  # absent (stripped) or outside the model's folder: leave it unread
        offset = int(info.get("offset", 0))
        length = int(info.get("length", 0))
        with open(target, "rb") as handle:
            handle.seek(offset)
            raw = handle.read(length) if length else handle.read()
        expected = int(np.prod(tensor.dims, dtype=np.int64)) * (8 if tensor.data_type == TensorProto.INT64 else 4)
        if len(raw) != expected:
            continue
        tensor.raw_data = raw
        del tensor.external_data[:]
        tensor.data_location = TensorProto.DEFAULT
