"""Limits the service holds across requests: uploads in progress at once, and the length of a logged URL.

Each upload streams to its own temporary folder (up to ``--max-upload-mb``) and keeps it until its prediction ends
or ``--upload-timeout-s`` passes; 240 stalled uploads of 256 MiB each held 60 GB of ``/tmp``. :class:`UploadSlots`
answers a multipart request 503 at once, before its body is read, while ``--max-uploads`` others are in progress,
so the disk uploads hold is at most ``--max-uploads`` x ``--max-upload-mb``.
"""
from __future__ import annotations

import logging
import sys
from typing import Any

from starlette.responses import JSONResponse

from lilou.serve.errors import error_body

#: The longest URL (path and query) the access log writes; a 100 KB query string was written whole.
MAX_LOGGED_URL = 300


class UploadSlots:
    """ASGI middleware: at most ``limit`` multipart (upload) requests in progress; one more is answered 503."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.active = 0   # one event loop: no lock

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not _is_multipart(scope):
            await self.app(scope, receive, send)
            return
        if self.active >= self.limit:
            message = (f"the server is taking {self.limit} uploads already (--max-uploads); retry in a few seconds, or "
                       "name a file under --models-root in a JSON request")
            await JSONResponse(error_body(message), status_code=503, headers={"Retry-After": "5"})(scope, receive, send)
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1


def _is_multipart(scope: dict) -> bool:
    return any(name == b"content-type" and value.lower().lstrip().startswith(b"multipart/")
               for name, value in scope.get("headers", ()))


class ShortURLs(logging.Filter):
    """Cut the URL of uvicorn's access-log lines (its third argument) to :data:`MAX_LOGGED_URL` characters."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and len(args[2]) > MAX_LOGGED_URL:
            url = args[2]
            record.args = (*args[:2], f"{url[:MAX_LOGGED_URL]}...({len(url) - MAX_LOGGED_URL} more characters)",
                           *args[3:])
        return True


def set_up_logs() -> None:
    """Put :class:`ShortURLs` on uvicorn's access logger, and write the service's own lines (``lilou.serve``: work
    dropped for a client that hung up or past its budget) at level info to stderr, as uvicorn writes its own; once."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, ShortURLs) for f in access.filters):
        access.addFilter(ShortURLs())
    own = logging.getLogger("lilou.serve")
    if not own.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
        own.addHandler(handler)
        own.setLevel(logging.INFO)
