"""Where a request's model comes from: a multipart upload streamed to a temporary folder, or a file
named under ``--models-root``.

The size limit is enforced while the body is read, chunk by chunk: a client that sends more than
``--max-upload-mb`` is answered 413 without the rest being read or written anywhere. A body that has not
arrived whole within ``--upload-timeout-s`` is answered 408 (:func:`within`): a stalled or very slow client
would otherwise hold its connection and its temporary folder for as long as it liked. Each upload gets
its own temporary folder, so the only external data the loader can follow (lilou.graph.loading never
leaves a model's folder) is the upload's own; the folder is removed when the prediction is done.
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import stat
import tempfile
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from python_multipart.multipart import MultipartParser, MultipartState, parse_options_header

from lilou.errors import LilouInputError
from lilou.serve.errors import InvalidField, ModelNotFound, RequestTimeout, UnsupportedMediaType, UploadTooLarge

FILE_FIELD = "file"
_MAX_FIELDS = 64
_MAX_FIELD_BYTES = 64 * 1024
#: What a shown name keeps of the client's file name: letters and digits of any script (a name in Japanese was shown
#: as "onnx", "modèle.onnx" as "mod_le.onnx"), "_", ".", "+" and "-"; spaces, punctuation, control and format
#: characters (bidirectional overrides ...) are each run replaced by "_".
_SAFE_NAME = re.compile(r"[^\w.+-]+")


@dataclass
class ModelSource:
    """A model file ready to load: its path, the sha256 of its bytes and the name responses show."""

    path: Path
    sha256: str
    name: str
    temp_dir: Path | None = None   # the upload's own folder, removed by release()

    def release(self) -> None:
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None


@dataclass
class ParsedBody:
    """The request's fields (form fields over query parameters) and its uploaded file, if any."""

    fields: dict[str, Any] = field(default_factory=dict)
    upload: ModelSource | None = None


def _too_large(limit: int) -> UploadTooLarge:
    return UploadTooLarge(f"request body larger than the server's limit of {limit / 2**20:g} MiB "
                          "(--max-upload-mb); weight-stripped ONNX files are enough for Lilou "
                          "(lilou zoo export --strip-weights)")


def json_too_large(limit: int) -> UploadTooLarge:
    return UploadTooLarge(f"JSON request body larger than {limit / 2**10:g} KiB: a JSON request names its model "
                          f"(under --models-root) and carries options only; upload an ONNX file as multipart part "
                          f"{FILE_FIELD!r}")


def check_content_length(headers: Any, limit: int, too_large: Callable[[int], UploadTooLarge] = _too_large) -> None:
    """Refuse at once a body whose declared length is over the limit."""
    declared = headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise too_large(limit)


async def within(stream: AsyncIterator[bytes], seconds: float) -> AsyncIterator[bytes]:
    """The chunks of ``stream``; :class:`RequestTimeout` once ``seconds`` have passed before its end."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    chunks = stream.__aiter__()
    while True:
        try:
            chunk = await asyncio.wait_for(chunks.__anext__(), max(deadline - loop.time(), 0.0))
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise RequestTimeout(f"the request body did not arrive within the server's upload time limit of "
                                 f"{seconds:g} s (--upload-timeout-s); a weight-stripped ONNX file is enough for "
                                 "Lilou (lilou zoo export --strip-weights)") from None
        yield chunk


async def read_limited(stream: AsyncIterator[bytes], limit: int,
                       too_large: Callable[[int], UploadTooLarge] = _too_large) -> bytes:
    """The whole body of a small (JSON) request, refusing it as soon as it passes ``limit`` bytes."""
    chunks, size = [], 0
    async for chunk in stream:
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


class _MultipartSink:
    """python-multipart callbacks: the ``file`` part to a temporary file (hashed as it is written), other
    parts to small in-memory fields."""

    def __init__(self, temp_root: str | None) -> None:
        self.temp_root = temp_root
        self.fields: dict[str, Any] = {}
        self.upload: ModelSource | None = None
        self._header_name = bytearray()
        self._header_value = bytearray()
        self._headers: dict[str, bytes] = {}
        self._name: str | None = None
        self._sent_as_file = False
        self._value = bytearray()
        self._file = None
        self._hash = None
        self._parts = 0

    # callbacks ----------------------------------------------------------
    def on_part_begin(self) -> None:
        self._parts += 1
        if self._parts > _MAX_FIELDS:
            raise InvalidField(f"too many multipart parts (the limit is {_MAX_FIELDS})")
        self._headers, self._name, self._value = {}, None, bytearray()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def on_header_end(self) -> None:
        self._headers[bytes(self._header_name).decode("latin-1").lower()] = bytes(self._header_value)
        self._header_name, self._header_value = bytearray(), bytearray()

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get("content-disposition", b""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        if not name:
            raise InvalidField("a multipart part has no name (Content-Disposition: form-data; name=...)")
        self._name = name
        self._sent_as_file = b"filename" in options  # a price CSV may come so (-F prices=@prices.csv)
        if name == FILE_FIELD:
            if self.upload is not None:
                raise InvalidField(f"more than one {FILE_FIELD!r} part; upload one ONNX file per request")
            filename = options.get(b"filename", b"").decode("utf-8", "replace")
            folder = Path(tempfile.mkdtemp(prefix="lilou-upload-", dir=self.temp_root))
            if filename.lower().endswith(".json"):  # an LLM's config.json, saved where lilou llm names it as the
                path = folder / config_name(filename) / "config.json"  # CLI names the client's file (config_name)
                path.parent.mkdir()
            else:
                path = folder / "model.onnx"
            self.upload = ModelSource(path=path, sha256="", name=display_name(filename), temp_dir=folder)
            self._file = open(self.upload.path, "wb")  # noqa: SIM115 - closed in on_part_end / close()
            self._hash = hashlib.sha256()

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        chunk = data[start:end]
        if self._file is not None:
            self._file.write(chunk)
            self._hash.update(chunk)
            return
        self._value += chunk
        if len(self._value) > _MAX_FIELD_BYTES:
            if self._sent_as_file:  # a model sent under another name (curl -F upload=@model.onnx)
                raise InvalidField(f"part {self._name[:80]!r} holds a file of more than {_MAX_FIELD_BYTES} bytes; the "
                                   f"ONNX file (or config.json) goes in multipart part {FILE_FIELD!r}")
            raise InvalidField(f"form field {self._name!r} is longer than {_MAX_FIELD_BYTES} bytes")

    def on_part_end(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            self.upload.sha256 = self._hash.hexdigest()
        elif self._name is not None:
            try:
                self.fields[self._name] = bytes(self._value).decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidField(f"form field {self._name!r} is not UTF-8 text") from None

    # --------------------------------------------------------------------
    def callbacks(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in (
            "on_part_begin", "on_header_field", "on_header_value", "on_header_end", "on_headers_finished",
            "on_part_data", "on_part_end")}

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


async def read_multipart(stream: AsyncIterator[bytes], content_type: str, limit: int,
                         temp_root: str | None = None) -> ParsedBody:
    """Stream a ``multipart/form-data`` body: the ``file`` part to its own temporary folder, at most
    ``limit`` bytes in all (UploadTooLarge as soon as the count passes it)."""
    _, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if not boundary:
        raise InvalidField("multipart/form-data without a boundary parameter")
    sink = _MultipartSink(temp_root)
    parser = MultipartParser(boundary, sink.callbacks())
    size = 0
    try:
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            parser.write(chunk)
        parser.finalize()
        if parser.state not in (MultipartState.START, MultipartState.END):  # START: an empty body, fields in the URL
            unfinished = f"the {FILE_FIELD!r} part" if sink.upload is not None and not sink.upload.sha256 else "it"
            raise InvalidField(f"malformed multipart body: {unfinished} ends before the closing boundary "
                               f"'--{boundary.decode('latin-1')[:70]}--' (a truncated request)")
    except BaseException as exc:  # the part written so far is removed, whatever stopped the reading
        sink.close()
        if sink.upload is not None:
            sink.upload.release()
        if isinstance(exc, LilouInputError) or not isinstance(exc, Exception):  # a cancelled request: as it is
            raise
        raise InvalidField(_malformed(str(exc), boundary)) from None  # python-multipart's: a malformed body
    sink.close()
    return ParsedBody(fields=sink.fields, upload=sink.upload)


def _malformed(error: str, boundary: bytes) -> str:
    """python-multipart's parse error in the client's terms (it names byte values and offsets)."""
    if "boundary" in error.lower():
        return (f"malformed multipart body: its parts are not separated by the boundary its Content-Type names "
                f"('--{boundary.decode('latin-1')[:70]}')")
    if "header" in error.lower():
        return "malformed multipart body: a part's headers are not 'Name: value' lines"
    return f"malformed multipart body ({error[:120]})"


def display_name(filename: str) -> str:
    """The name a response shows for an upload: the client's file name without folders."""
    base = os.path.basename(filename.replace("\\", "/")).strip()
    return _safe(base) or "upload.onnx"


def config_name(filename: str) -> str:
    """The name ``lilou llm`` gives an uploaded config.json, by the CLI's rule for a path: the file's stem
    (``mamba-2.8b-config.json`` -> ``mamba-2.8b-config``), and for a file called ``config.json`` the folder the client's
    file name gives (``Mixtral-8x7B-v0.1/config.json`` -> ``Mixtral-8x7B-v0.1``; browsers and curl send the base name
    only, so a bare ``config.json`` is ``config``). Made safe as a single folder name."""
    parts = [part for part in filename.replace("\\", "/").split("/") if part.strip()]
    base = parts[-1].strip() if parts else ""
    if base.lower() == "config.json":
        stem = parts[-2].strip() if len(parts) > 1 else "config"
    else:
        stem = base[:-5] if base.lower().endswith(".json") else base
    return _safe(stem) or "config"


def _safe(name: str, max_bytes: int = 200) -> str:
    """``name`` with the runs of characters :data:`_SAFE_NAME` refuses replaced by "_", cut to ``max_bytes`` of UTF-8 (a
    config's name is a folder's on disk, where 255 bytes is the most: 200 characters of Japanese are 600), without
    leading or trailing dots and underscores."""
    safe = _SAFE_NAME.sub("_", unicodedata.normalize("NFC", name))
    return safe.encode("utf-8")[:max_bytes].decode("utf-8", "ignore").strip("._")


def media_type(content_type: str | None) -> str:
    if not content_type:
        return ""
    return parse_options_header(content_type)[0].decode("latin-1").lower()


def unsupported(content_type: str) -> UnsupportedMediaType:
    if not content_type.strip():
        return UnsupportedMediaType("the body has no Content-Type: send a JSON body with the header 'Content-Type: "
                                    "application/json' (curl -H 'content-type: application/json' -d ...), or "
                                    f"multipart/form-data with the ONNX file as part {FILE_FIELD!r}")
    return UnsupportedMediaType(f"unsupported Content-Type {content_type[:60]!r}: send application/json naming a "
                                f"file under --models-root, or multipart/form-data with the ONNX file as part "
                                f"{FILE_FIELD!r}")


class ModelsRoot:
    """Files named in JSON requests: only regular files inside ``root`` (symbolic links resolved first)."""

    def __init__(self, root: str | os.PathLike[str] | None, digest_cache: int = 1024) -> None:
        self.root = None if root is None else Path(root).resolve()
        self._digests: OrderedDict[tuple, str] = OrderedDict()
        self._capacity = digest_cache
        self._lock = threading.Lock()

    def resolve(self, name: str) -> ModelSource:
        """The source for ``name``; 404 when there is no such file, 400 when it leads outside the root."""
        if self.root is None:
            raise LilouInputError(f"model {name[:100]!r}: this server was started without --models-root, so it "
                                  f"serves no files by name; upload the file as multipart part {FILE_FIELD!r}")
        if "\x00" in name or not name.strip():
            raise LilouInputError("model: give a file name relative to --models-root")
        relative = Path(name)
        if relative.is_absolute():
            raise LilouInputError(f"model {name[:100]!r}: an absolute path; name a file relative to --models-root")
        try:
            target = (self.root / relative).resolve()
        except (OSError, RuntimeError):  # a symbolic link loop
            raise LilouInputError(f"model {name[:100]!r}: cannot be resolved (symbolic link loop?)") from None
        if not target.is_relative_to(self.root):
            raise LilouInputError(f"model {name[:100]!r}: refused, it leads outside --models-root "
                                  "(no '..' or symbolic links out of it)")
        try:
            info = target.stat()
        except OSError:
            raise ModelNotFound(f"model {name[:100]!r}: no such file under --models-root") from None
        if not stat.S_ISREG(info.st_mode):
            raise LilouInputError(f"model {name[:100]!r}: not a regular file")
        return ModelSource(path=target, sha256=self._digest(target, info), name=name)

    def _digest(self, path: Path, info: os.stat_result) -> str:
        """sha256 of the file, remembered while its inode, size and mtime stay the same."""
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        with self._lock:
            if key in self._digests:
                self._digests.move_to_end(key)
                return self._digests[key]
        with open(path, "rb") as handle:
            digest = hashlib.file_digest(handle, "sha256").hexdigest()
        with self._lock:
            self._digests[key] = digest
            while len(self._digests) > self._capacity:
                self._digests.popitem(last=False)
        return digest
