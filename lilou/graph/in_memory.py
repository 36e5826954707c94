"""A model held in memory (an ``onnx.ModelProto``, or an ONNX file's bytes, as a service receives an upload) read as
the file it would be: written to a private temporary folder (mode 0700), read from there like any path, then removed.

The folder holds nothing else, so the only external data the loader can follow (:mod:`lilou.graph.loading` never
leaves a model's folder) is none. Bytes are size-checked before anything is written: protobuf cannot parse a message
of 2 GiB or more, so such bytes are no ONNX model with its weights inline, and are refused before they reach the disk.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from lilou.errors import LilouInputError

#: The most bytes an in-memory model may have: protobuf's limit on one message (2 GiB - 1).
MAX_MODEL_BYTES = 2**31 - 1
#: What predictions call a model given as bytes (a ModelProto: its graph's name, else this).
IN_MEMORY_NAME = "model"


def in_memory(model: object) -> bool:
    """Whether ``model`` is a model held in memory: ONNX bytes (bytes, bytearray, memoryview) or an onnx.ModelProto."""
    if isinstance(model, bytes | bytearray | memoryview):
        return True
    import onnx

    return isinstance(model, onnx.ModelProto)


def in_memory_name(model: object) -> str:
    """What predictions call ``model``: a ModelProto's graph name, else :data:`IN_MEMORY_NAME`."""
    name = getattr(getattr(model, "graph", None), "name", "")
    return name if isinstance(name, str) and name else IN_MEMORY_NAME


def model_bytes(model: object) -> bytes:
    """``model``'s ONNX bytes, size-checked (:data:`MAX_MODEL_BYTES`) before any copy is made."""
    size = model.ByteSize() if hasattr(model, "ByteSize") else memoryview(model).nbytes
    if size > MAX_MODEL_BYTES:
        raise LilouInputError(f"an in-memory model of {size:,} bytes is past protobuf's limit of {MAX_MODEL_BYTES:,}: "
                              "save it with its weights as external data and pass the file's path")
    if not size:
        raise LilouInputError("the in-memory model is empty (0 bytes): no ONNX model")
    return model.SerializeToString() if hasattr(model, "SerializeToString") else bytes(model)


@contextlib.contextmanager
def model_file(model: object) -> Iterator[Path]:
    """``model`` (:func:`in_memory`) written as ``model.onnx`` in a private temporary folder, removed after the block.
    An input error raised within names the model as predictions do, not the temporary file."""
    data = model_bytes(model)
    folder = Path(tempfile.mkdtemp(prefix="lilou-model-"))  # mode 0700: this user's alone
    path = folder / "model.onnx"
    try:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        except OSError as exc:  # a full or read-only temporary folder
            raise LilouInputError(f"cannot write the in-memory model to {folder} ({exc.strerror or exc}); pass the "
                                  "path of its file instead") from None
        del data
        try:
            yield path
        except LilouInputError as exc:
            message = str(exc).replace(str(path), f"in-memory model {in_memory_name(model)!r}")
            if message == str(exc):
                raise
            raise type(exc)(message) from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
