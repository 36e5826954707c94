"""HTTP status codes for bad input, and the one-line error bodies the service answers with.

Every error body is ``{"detail": "<one line>"}``: for a :class:`~lilou.errors.LilouInputError` the line
is exactly what the CLI prints after ``lilou: error:``. Nothing else (no traceback, no file path of the
server's temporary folders) leaves the server.
"""
from __future__ import annotations

import logging
import re

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from lilou.errors import LilouInputError

log = logging.getLogger("lilou.serve")


class ServeInputError(LilouInputError):
    """Bad input whose HTTP status is not the default 400."""

    status_code = 400


class ModelNotFound(ServeInputError):
    status_code = 404


class RequestTimeout(ServeInputError):
    """The request's body did not arrive within ``--upload-timeout-s`` (408)."""

    status_code = 408


class UploadTooLarge(ServeInputError):
    status_code = 413


class UnsupportedMediaType(ServeInputError):
    status_code = 415


class InvalidField(ServeInputError):
    """A request field fails validation (wrong type, missing, out of range)."""

    status_code = 422


class OverTimeBudget(Exception):
    """The prediction did not finish within the per-request time budget (503)."""


class ClientGone(Exception):
    """The client closed the connection while its request waited (499, nginx's code: no one reads it)."""


def one_line(exc: BaseException) -> str:
    """The CLI's rendering of an error message (lilou.cli._one_line): whitespace folded, 500 characters."""
    return " ".join(str(exc).split())[:500]


def error_body(message: str) -> dict[str, str]:
    return {"detail": message}


def status_of(exc: LilouInputError) -> int:
    return exc.status_code if isinstance(exc, ServeInputError) else 400


#: The names pydantic gives the members of a union in an error's location (``prices.dict[str,constrained-float].a10g``):
#: they name its types, not the client's fields, and are left out.
_UNION_MEMBER = re.compile(r"^(?:[\w-]+\[.*\]|str|int|float|bool|constrained-(?:float|int|str)|function-\w+)$")


def validation_message(errors: list[dict]) -> str:
    """Pydantic's error list as one line: ``gpu: Field required; batch: Input should be greater than 0``."""
    parts = []
    fields = [tuple(p for p in error.get("loc", ()) if p not in ("body", "query"))[:1] for error in errors]
    # a union field (prices: an object or CSV text) fails once per member: the text member's line adds nothing
    errors = [e for e, field in zip(errors, fields) if not ("str" in e.get("loc", ()) and fields.count(field) > 1)]
    for error in errors[:5]:
        where = ".".join(str(p) for p in error.get("loc", ())
                         if p not in ("body", "query") and not _UNION_MEMBER.match(str(p)))
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else str(error.get("msg", "invalid")))
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return one_line("; ".join(parts) + more)


def install_handlers(app: FastAPI) -> None:
    """Map every exception to a one-line JSON body with the right status."""

    @app.exception_handler(LilouInputError)
    async def _input_error(request: Request, exc: LilouInputError) -> JSONResponse:
        return JSONResponse(error_body(one_line(exc)), status_code=status_of(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(validation_message(list(exc.errors()))), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(error_body(one_line(exc.detail)), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(OverTimeBudget)
    async def _over_budget(request: Request, exc: OverTimeBudget) -> JSONResponse:
        return JSONResponse(error_body(one_line(exc)), status_code=503, headers={"Retry-After": "5"})

    @app.exception_handler(ClientGone)
    async def _client_gone(request: Request, exc: ClientGone) -> JSONResponse:
        return JSONResponse(error_body(one_line(exc)), status_code=499)

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
        # The traceback goes to the server's log only; the client gets the CLI's one line.
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return JSONResponse(error_body(f"internal error: {type(exc).__name__}: {one_line(exc)}"), status_code=500)
