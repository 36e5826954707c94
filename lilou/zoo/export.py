"""Export zoo models to ONNX, optionally without their weights.

Why these defaults:

- ``optimize=False``: the dynamo exporter's optimiser folds BatchNormalization and Pad
  into Conv and drops ``x+0`` / ``x*1``, which eager PyTorch never does. Zoo graphs
  labelled with the eager backend must look like what eager runs (see DESIGN.md);
  ``optimize=True`` gives the default-optimised variant.
- Node ``metadata_props`` written by the dynamo exporter (``pkg.torch.onnx.fx_node``,
  ``namespace``, ...) are kept: the eager oracle groups nodes by the aten call they came from.
- ``strip_weights``: latency does not depend on weight values, and weight-free files are
  small. Every initializer keeps its name, dims and data type; only its bytes go.
"""
from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import sys
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

import onnx
import torch

from lilou.errors import LilouInputError
from lilou.graph.loading import point_at_external_data
from lilou.graph.shape_completion import complete_shapes
from lilou.zoo.registry import BuiltModel, build, get_entry, parameter_count

#: Initializers up to this many bytes keep their data when weights are stripped: they are
#: mostly shape constants (int64 vectors) that ONNX shape inference needs to read.
SMALL_INITIALIZER_BYTES = 1024

#: Above this many parameters a weight-free export never materialises the weights (they
#: would need 4 bytes each of RAM); the module is built with FakeTensor parameters instead.
LARGE_MODEL_PARAMETERS = 100_000_000


# --- weight stripping ----------------------------------------------------------------------


def _tensor_nbytes(tensor: onnx.TensorProto) -> int:
    itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    return math.prod(tensor.dims) * itemsize


def strip_weights(model_proto: onnx.ModelProto, location: str = "model.weights") -> onnx.ModelProto:
    """Remove the bytes of every initializer larger than :data:`SMALL_INITIALIZER_BYTES`.

    Each such initializer keeps name, dims and data_type and becomes external data at
    ``location`` (offset 0, length = its byte size). That file is never written: the
    model describes its weights without carrying them. Small initializers stay inline
    so shape inference can still read them; so do initializers that are already
    external but small (they can only come from a weight-free build, whose values do
    not exist). ``model_proto`` is changed in place (a copy would double the memory of
    a large model) and returned.
    """
    for tensor in model_proto.graph.initializer:
        if tensor.data_type == onnx.TensorProto.STRING:
            continue
        nbytes = _tensor_nbytes(tensor)
        external = tensor.data_location == onnx.TensorProto.EXTERNAL
        if nbytes > SMALL_INITIALIZER_BYTES or external:
            point_at_external_data(tensor, location, nbytes)
    return model_proto


# ``export_onnx`` has a parameter named ``strip_weights``; this alias keeps the function reachable there.
_strip_proto = strip_weights


def is_stripped(tensor: onnx.TensorProto) -> bool:
    """True when the initializer carries no data of its own (external, no inline bytes)."""
    has_data = bool(tensor.raw_data) or any(
        len(getattr(tensor, f)) for f in ("float_data", "double_data", "int32_data", "int64_data", "uint64_data")
    )
    return tensor.data_location == onnx.TensorProto.EXTERNAL and not has_data


def _mark_fake_initializers_external(program: torch.onnx.ONNXProgram, location: str) -> None:
    """FakeTensor initializers have no bytes to serialise: make them external references."""
    import onnx_ir as ir
    from torch._subclasses.fake_tensor import FakeTensor

    for value in program.model.graph.initializers.values():
        tensor = value.const_value
        if tensor is None or not isinstance(getattr(tensor, "raw", None), FakeTensor):
            continue
        nbytes = math.prod(tensor.shape.numpy()) * tensor.dtype.itemsize
        value.const_value = ir.ExternalTensor(
            location, 0, nbytes, tensor.dtype, shape=tensor.shape, name=value.name or tensor.name
        )


# --- exporting -------------------------------------------------------------------------------


@contextlib.contextmanager
def _output_to_devnull() -> Iterator[None]:
    """Silence file descriptors 1 and 2: the exporters also print from C++, past ``sys.stdout``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


@contextlib.contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """Silence the exporters' progress prints, warnings and log lines unless ``verbose``."""
    if verbose:
        yield
        return
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._export")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), _output_to_devnull():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _export_dynamo(built: BuiltModel, optimize: bool, verbose: bool, dynamic_batch: bool = False,
                   opset: int | None = None) -> torch.onnx.ONNXProgram:
    dynamic_shapes = None
    if dynamic_batch:  # one symbolic leading dim shared by every input
        batch = torch.export.Dim("batch", min=1, max=1 << 16)
        dynamic_shapes = tuple({0: batch} for _ in built.args)
    program = torch.onnx.export(
        built.module,
        built.args,
        dynamo=True,
        optimize=optimize,
        input_names=list(built.input_names),
        output_names=[built.output_name],
        dynamic_shapes=dynamic_shapes,
        verbose=verbose,
        **({"opset_version": opset} if opset is not None else {}),
    )
    assert program is not None
    return program


def _export_torchscript(built: BuiltModel, verbose: bool, opset: int | None = None) -> onnx.ModelProto:
    """The legacy exporter (it folds BatchNorm into Conv on its own and keeps no node metadata)."""
    buffer = io.BytesIO()
    try:
        torch.onnx.export(
            built.module,
            built.args,
            buffer,
            dynamo=False,
            input_names=list(built.input_names),
            output_names=[built.output_name],
            opset_version=opset or 18,
            verbose=verbose,
        )
    except torch.onnx.errors.UnsupportedOperatorError as exc:
        reason = str(exc).splitlines()[0]
        raise LilouInputError(f"the TorchScript exporter cannot export {built.name} ({reason}); "
                              "use the default dynamo exporter") from None
    return onnx.load_model_from_string(buffer.getvalue())


def _provenance(built: BuiltModel, exporter: str, optimize: bool, stripped: bool,
                opset_imports: Iterable[onnx.OperatorSetIdProto] = ()) -> dict[str, str]:
    """Model-level metadata saying how the file was made (node metadata is the exporter's)."""
    shapes = {name: "x".join(map(str, arg.shape)) for name, arg in zip(built.input_names, built.args)}
    return {
        "lilou.zoo.model": built.name,
        "lilou.zoo.inputs": ",".join(f"{name}={shape}" for name, shape in shapes.items()),
        "lilou.zoo.exporter": exporter,
        "lilou.zoo.optimize": str(optimize).lower(),
        "lilou.zoo.opset": str(next((o.version for o in opset_imports if o.domain in ("", "ai.onnx")), "")),
        "lilou.zoo.weights": "stripped" if stripped else "inline",
    }


def _resolve(name_or_built: str | BuiltModel, batch: int | None, seq: int | None, image_size: int | None,
             strip: bool, dynamo: bool, fake: bool | None) -> BuiltModel:
    if isinstance(name_or_built, BuiltModel):
        if batch is not None or seq is not None or image_size is not None:
            raise LilouInputError("batch/seq/image_size apply when exporting by name, not a BuiltModel")
        return name_or_built
    if fake is None:  # weight-free exports of big models never materialise the weights
        fake = strip and dynamo and parameter_count(name_or_built) > LARGE_MODEL_PARAMETERS
    return build(name_or_built, batch=batch, seq=seq, image_size=image_size, fake=fake)


def export_onnx(
    name_or_built: str | BuiltModel,
    path: str | Path,
    batch: int | None = None,
    seq: int | None = None,
    image_size: int | None = None,
    *,
    strip_weights: bool = False,
    optimize: bool = False,
    dynamo: bool = True,
    fake_weights: bool | None = None,
    dynamic_batch: bool = False,
    opset: int | None = None,
    verbose: bool = False,
) -> Path:
    """Export a zoo model (by name, or an already built one) to ONNX at ``path``.

    ``dynamo=True`` uses ``torch.onnx.export(..., dynamo=True, optimize=optimize)`` and
    keeps the exporter's node metadata; ``dynamo=False`` uses the TorchScript exporter.
    ``strip_weights`` writes a weight-free file (see :func:`strip_weights`) whose
    external data is ``<stem>.weights``, a file that is not written. ``fake_weights``
    builds with FakeTensor parameters (no weight memory at all); by default it is used
    for weight-free dynamo exports of models above :data:`LARGE_MODEL_PARAMETERS`.
    ``dynamic_batch`` exports the leading dim of every input as a symbol ``batch``, so
    ``lilou graph --batch N`` can set it later (dynamo exporter only); it traces at batch 2 where the batch would
    be 1, because torch.export specialises a size-1 dimension and bakes it into the model's reshapes (GPT-2 and
    Swin exported at batch 1 took no other batch). ``opset`` picks the ONNX opset
    (default: the exporter's own, 18 for both). The dynamo exporter writes below 18 through ONNX's version
    converter, which drops the node metadata the eager oracle reads.
    """
    path = Path(path)
    check_destination(path)
    if dynamic_batch and not dynamo:
        raise LilouInputError("dynamic_batch needs the dynamo exporter")
    if optimize and not dynamo:
        raise LilouInputError("optimize applies to the dynamo exporter only (the TorchScript one always folds constants)")
    if dynamic_batch and isinstance(name_or_built, str) and (batch or get_entry(name_or_built).batch) == 1:
        batch = 2  # traced at 2, exported as the symbol: a traced 1 is specialised (docstring)
    built = _resolve(name_or_built, batch, seq, image_size, strip_weights, dynamo, fake_weights)
    if built.fake and not (strip_weights and dynamo):
        raise LilouInputError("a weight-free (fake) build can only be exported by the dynamo exporter "
                              "with strip_weights=True")
    if opset is not None and not 7 <= opset <= 23:
        raise LilouInputError(f"opset must be between 7 and 23, got {opset}")
    location = f"{path.stem}.weights"
    exporter = "dynamo" if dynamo else "torchscript"
    with _quiet(verbose):
        if dynamo:
            program = _export_dynamo(built, optimize, verbose, dynamic_batch, opset)
            if built.fake:
                _mark_fake_initializers_external(program, location)
            proto = program.model_proto
        else:
            proto = _export_torchscript(built, verbose, opset)
    onnx.helper.set_model_props(proto, _provenance(built, exporter, optimize, strip_weights, proto.opset_import))
    if strip_weights:
        _strip_proto(proto, location)
        complete_shapes(proto)
    else:  # infer on a weight-free copy: shape inference serialises the model (2 GB protobuf limit)
        skeleton = onnx.ModelProto()
        skeleton.CopyFrom(proto)
        complete_shapes(_strip_proto(skeleton))
        proto.graph.ClearField("value_info")
        proto.graph.value_info.extend(skeleton.graph.value_info)
    _save(proto, path)
    return path


def check_destination(path: Path) -> None:
    """Refuse, before any export work, a destination that cannot be written."""
    try:
        parent_is_dir = path.parent.is_dir()
        exists = path.exists() or path.is_symlink()
    except OSError as exc:
        raise LilouInputError(f"cannot use output path {str(path)!r}: {exc.strerror or exc}") from None
    if not parent_is_dir:
        raise LilouInputError(f"output folder {str(path.parent)!r} does not exist")
    if path.is_dir():
        raise LilouInputError(f"output {str(path)!r} is a directory; give a file name such as {str(path / 'model.onnx')!r}")
    if exists and not path.is_file():
        raise LilouInputError(f"output {str(path)!r} exists and is not a regular file")
    if len(os.fsencode(path.name)) > 255:
        raise LilouInputError("output file name is longer than 255 bytes")
    import tempfile

    try:  # access() says yes to root even on a read-only file system: try for real
        if exists:
            with open(path, "ab"):
                pass
        else:
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".lilou-probe-"):
                pass
    except OSError as exc:
        raise LilouInputError(f"cannot write {str(path)!r} ({exc.strerror or exc}); choose another -o") from None


def _save(proto: onnx.ModelProto, path: Path) -> None:
    """Save; a model over protobuf's 2 GB limit gets its weights in ``<name>.data`` beside it."""
    if sum(len(t.raw_data) for t in proto.graph.initializer) < 2**31 - 2**26:
        onnx.save(proto, path)
    else:
        onnx.save(proto, path, save_as_external_data=True, all_tensors_to_one_file=True, location=f"{path.name}.data")
