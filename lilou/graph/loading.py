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

import errno
import math
import os
import re
import stat
from pathlib import Path

import onnx
import onnx.inliner
from google.protobuf.message import DecodeError
from onnx import TensorProto

from lilou.errors import LilouInputError

# Shape constants are tiny; anything larger is a weight we never read.
_MAX_EXTERNAL_SHAPE_CONSTANT_ELEMENTS = 64
_INTEGER_TYPES = {TensorProto.INT64, TensorProto.INT32}


#: The most nodes a model may have, its subgraphs' and its local functions' (inlined) counted: far above real models
#: (BERT-large 1,602, GPT-2 large 3,844, a Switch Transformer of 4 layers of 128 experts 8,764; the loops Lilou writes
#: out add at most 20,000, lilou.graph.loops.MAX_UNROLLED_NODES), and low enough to bound the memory and time one
#: file of a few MB costs: reading and grouping a node take ~10 kB at their peak and ~0.5 ms (a 3 MB file of 100,000
#: Relu nodes took 3 GB before this limit).
MAX_NODES = 50_000

# Linux limits (NAME_MAX, PATH_MAX): checked before the file system is asked.
_MAX_NAME_BYTES = 255
_MAX_PATH_BYTES = 4096


def point_at_external_data(tensor: onnx.TensorProto, location: str, nbytes: int) -> None:
    """Drop the data ``tensor`` holds and point it at ``location`` (offset 0, ``nbytes`` long), a file that is never
    written: a weight-free tensor that keeps its name, dims and type (``lilou.zoo.export.strip_weights``, and the
    shaping child's copy, :func:`lilou.graph.guarded_inference.without_weight_bytes`)."""
    for data_field in ("raw_data", "float_data", "double_data", "int32_data", "int64_data", "uint64_data"):
        tensor.ClearField(data_field)
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(nbytes))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def load_onnx(path: str | os.PathLike[str], notes: list[str] | None = None) -> onnx.ModelProto:
    """Parse an ONNX file without its weight bytes; raise a one-line error on bad input. ``notes`` gets what the
    reading left out that the prediction's warnings should say (external data refused or missing)."""
    path = Path(path)
    _check_regular_file(path)
    try:
        # the binary format whatever the name: onnx picks JSON for a name ending .json (an LLM's config.json handed
        # in by mistake was an internal ParseError) and text for .textproto
        model = onnx.load(str(path), format="protobuf", load_external_data=False)
    except (DecodeError, RuntimeWarning, ValueError, UnicodeDecodeError) as exc:
        kind = _known_other_format(path)
        if kind:
            raise LilouInputError(f"{path} is not ONNX but {kind}") from None
        raise LilouInputError(f"{path} is not a readable ONNX model (truncated or not ONNX: {_first_line(exc)})") from None
    except OSError as exc:
        raise LilouInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    _check_is_model(model, path)
    if model.functions:
        _check_functions_not_recursive(model, path)
    check_node_count(model, path)
    unread = _load_small_external_integers(model, path.parent)
    if notes is not None:
        notes += unread
    if model.functions:
        model = _inline_functions(model, path)
    return model


def check_node_count(model: onnx.ModelProto, path: str | os.PathLike[str]) -> None:
    """Refuse a model of more than :data:`MAX_NODES` nodes, counted as they will be once its local functions are
    inlined (a call counts its function's nodes, each function counted once), subgraphs included: before anything is
    built from them."""
    functions = {(f.domain, f.name): f for f in model.functions}
    sizes: dict[tuple[str, str], int] = {}

    def count(nodes) -> int:
        total = 0
        for node in nodes:
            key = (node.domain, node.op_type)
            if key in functions:
                if key not in sizes:  # not recursive (checked first): each function counted once
                    sizes[key] = count(functions[key].node)
                total += sizes[key]
            else:
                total += 1 + sum(count(graph.node) for attr in node.attribute
                                 for graph in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs))
        return total

    nodes = count(model.graph.node)
    if nodes > MAX_NODES:
        raise LilouInputError(f"{path}: {nodes:,} nodes, over the {MAX_NODES:,} Lilou reads in one model (real models "
                              "have a few thousand); split the model, or price a shorter version of it")


def _known_other_format(path: Path) -> str:
    """What a file that is not ONNX is, where its first bytes say so (the files users hand in by mistake), with
    what to pass instead; "" otherwise."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
    except OSError:
        return ""
    if head[4:8] == b"ORTM":  # the FlatBuffer identifier of onnxruntime's ORT format
        return "an onnxruntime ORT-format model (a FlatBuffer): pass the .onnx file it was converted from"
    if head[:4] == b"PK\x03\x04":  # torch.save's format since PyTorch 1.6, and TorchScript's
        return ("a zip archive (a PyTorch .pt/.pth checkpoint or TorchScript file?): export the model with "
                "torch.onnx.export and pass the .onnx file")
    if len(head) >= 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") < 1 << 27:
        return "a safetensors weight file: export the model with torch.onnx.export and pass the .onnx file"
    if re.match(rb"\s*(\{|\[\s*[\[{\"\d\-\]tfn])", head):  # an object, or an array (not TOML's [table])
        return "JSON (a Hugging Face config.json is priced by `lilou llm`; an ONNX model is the binary .onnx file)"
    return ""


def _check_regular_file(path: Path) -> None:
    """Say what the path is when it is not a readable regular file; never open a FIFO or device."""
    raw = os.fsencode(path)
    if b"\0" in raw:  # os.stat's ValueError ("embedded null byte") was an internal error of every API call
        raise LilouInputError(f"a path cannot hold a NUL byte: {_short(path)!r}")
    if len(raw) > _MAX_PATH_BYTES:
        raise LilouInputError(f"path too long ({len(raw)} bytes; the limit is {_MAX_PATH_BYTES}): {_short(path)}")
    for part in path.parts:
        if len(os.fsencode(part)) > _MAX_NAME_BYTES:
            raise LilouInputError(f"file name too long ({len(os.fsencode(part))} bytes; the limit is "
                                  f"{_MAX_NAME_BYTES}): {_short(path)}")
    try:
        info = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LilouInputError(f"{path} is a symbolic link loop (the links never reach a file)") from None
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            if os.path.islink(path):
                raise LilouInputError(f"{path} is a broken symbolic link (its target does not exist)") from None
            raise LilouInputError(f"no such file: {path}") from None
        if exc.errno == errno.ENAMETOOLONG:
            raise LilouInputError(f"file name too long: {_short(path)}") from None
        raise LilouInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    mode = info.st_mode
    if stat.S_ISDIR(mode):
        raise LilouInputError(f"{path} is a directory, not an ONNX file")
    if stat.S_ISFIFO(mode):
        raise LilouInputError(f"{path} is a FIFO (named pipe), not an ONNX file; save the model to a regular file")
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise LilouInputError(f"{path} is a device file, not an ONNX file")
    if stat.S_ISSOCK(mode):
        raise LilouInputError(f"{path} is a socket, not an ONNX file")
    if not stat.S_ISREG(mode):
        raise LilouInputError(f"{path} is not a regular file")
    if info.st_size == 0:
        raise LilouInputError(f"{path} is empty, not an ONNX model")


def _short(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 80 else text[:40] + "..." + text[-37:]


def _inline_functions(model: onnx.ModelProto, path: Path) -> onnx.ModelProto:
    """Inline the model's local functions; a recursive or malformed function is bad input."""
    _check_functions_not_recursive(model, path)
    try:
        return onnx.inliner.inline_local_functions(model)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, RuntimeError, ValueError,
            RecursionError) as exc:
        raise LilouInputError(f"{path}: its local functions cannot be inlined ({_first_line(exc)[:200]})") from None


def _check_functions_not_recursive(model: onnx.ModelProto, path: Path) -> None:
    calls: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for function in model.functions:
        calls[(function.domain, function.name)] = {(n.domain, n.op_type) for n in function.node}
    state: dict[tuple[str, str], int] = {}

    def visit(key: tuple[str, str], trail: list[str]) -> None:
        state[key] = 1
        for callee in calls[key]:
            if callee not in calls:
                continue
            if state.get(callee) == 1:
                chain = " -> ".join([*trail, key[1], callee[1]])
                raise LilouInputError(f"{path}: local function {callee[1]!r} calls itself ({chain}); "
                                      "recursive functions cannot be inlined")
            if callee not in state:
                visit(callee, [*trail, key[1]])
        state[key] = 2

    for key in calls:
        if key not in state:
            visit(key, [])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _check_is_model(model: onnx.ModelProto, path: Path) -> None:
    """protobuf happily parses many byte strings as an (empty) ModelProto."""
    if not model.HasField("graph") or not model.opset_import:
        raise LilouInputError(f"{path} is not an ONNX model (no graph or opset found; truncated or another format)")
    if len(model.graph.node) == 0:
        raise LilouInputError(f"{path} holds an empty graph (no nodes)")


def _load_small_external_integers(model: onnx.ModelProto, model_dir: Path) -> list[str]:
    """Inline tiny int tensors kept as external data; never follow paths out of ``model_dir``. Returns a note for
    each such tensor left unread because its file is outside the folder or missing (the shapes it sets stay unknown,
    and the warnings said only that).

    Offsets and lengths come from the file: they are checked against the data file's size,
    and only the bytes the tensor needs are read."""
    root = model_dir.resolve()
    notes = []
    for tensor in model.graph.initializer:
        if tensor.data_location != TensorProto.EXTERNAL or tensor.data_type not in _INTEGER_TYPES:
            continue
        if any(d < 0 for d in tensor.dims) or math.prod(tensor.dims) > _MAX_EXTERNAL_SHAPE_CONSTANT_ELEMENTS:
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        if not location:
            continue  # stripped: no data anywhere
        try:
            target = (root / location).resolve()
        except (OSError, RuntimeError, ValueError):
            target = None
        if target is not None and not target.is_relative_to(root):
            notes.append(f"initializer {tensor.name[:80]!r} (a shape constant) is not read: its external data "
                         f"{location[:100]!r} lies outside the model's folder, where Lilou never reads; shapes that "
                         "depend on it are unknown (put the data file beside the model)")
            continue
        if target is None or not target.is_file():
            notes.append(f"initializer {tensor.name[:80]!r} (a shape constant) is not read: its external data file "
                         f"{location[:100]!r} is missing or not a regular file; shapes that depend on it are unknown")
            continue
        expected = math.prod(tensor.dims) * (8 if tensor.data_type == TensorProto.INT64 else 4)
        offset = _external_number(tensor.name, "offset", info.get("offset", "0"))
        length = _external_number(tensor.name, "length", info.get("length", str(expected)))
        size = target.stat().st_size
        if offset + length > size:
            raise LilouInputError(
                f"initializer {tensor.name!r}: external data offset {offset} + length {length} lies beyond the end "
                f"of {location!r} ({size} bytes); the model and its data file do not match")
        if length != expected:
            raise LilouInputError(
                f"initializer {tensor.name!r}: external data length {length} does not match its dims "
                f"{list(tensor.dims)} ({expected} bytes)")
        with open(target, "rb") as handle:
            handle.seek(offset)
            raw = handle.read(expected)
        if len(raw) != expected:
            continue
        tensor.raw_data = raw
        del tensor.external_data[:]
        tensor.data_location = TensorProto.DEFAULT
    return notes


def _external_number(tensor: str, key: str, text: str) -> int:
    value = text.strip()
    if not value.isdigit() or len(value) > 19:
        raise LilouInputError(f"initializer {tensor!r}: external data {key} {text[:40]!r} is not a non-negative "
                              "integer; the file is corrupt")
    return int(value)
