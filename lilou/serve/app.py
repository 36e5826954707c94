"""The FastAPI app: ``create_app(models_root)`` -> endpoints under ``/v1`` and the page at ``/``.

A thin layer over :mod:`lilou.api` (and ``lilou.plan`` / ``lilou.llm`` where installed): each body is the
object ``lilou infer|rank|plan|llm --format json`` prints; errors are ``{"detail": "<the CLI's line>"}``.
``lilou serve`` runs it with uvicorn; docs/service.md describes the endpoints.
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import re
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ValidationError

from lilou.docs import doc
from lilou.errors import LilouInputError
from lilou.serve import openapi_doc
from lilou.serve.errors import InvalidField, ModelNotFound, install_handlers, validation_message
from lilou.serve.limits import UploadSlots, set_up_logs
from lilou.serve.schemas import LLMRequest, PlanRequest, PredictRequest, RankRequest, parse_json
from lilou.serve.service import Service, Settings, has_llm, has_plan
from lilou.serve.uploads import (FILE_FIELD, ModelSource, check_content_length, json_too_large, media_type,
                                 read_limited, read_multipart, unsupported, within)

R = TypeVar("R", bound=BaseModel)
SETTINGS_ENV = "LILOU_SERVE_SETTINGS"
WARNINGS_HEADER = "Lilou-Warnings"
API_VERSION = "1"
#: The largest JSON body (or body of a request whose fields are in its URL). JSON carries no model bytes, only
#: options: the largest a client has reason to send is a prices CSV or 500 device names, a few KiB to ~100 KiB. The
#: upload cap (256 MiB) let a JSON body be read whole and parsed: a 20 MiB list of zeros took 120 MB more resident
#: memory (json.loads keeps ~6x the text), ~1.5 GB per request at 256 MiB. 1 MiB keeps that under ~10 MB.
MAX_JSON_BYTES = 2**20
#: Fields whose empty text is an empty list, not a field left out: "gpus" joined from an empty selection names no
#: device (lilou rank --gpus '' refuses it) instead of asking for every device.
LISTS = ("gpus",)
#: The Lilou-Warnings header's bounds: proxies refuse upstream headers over 4-64 KiB (a 502), and 3,000 unknown op
#: types made a 405 KB one. A longer warning is cut, and warnings past the total are counted instead.
MAX_HEADER_WARNING = 1000
MAX_WARNINGS_HEADER = 8192


def create_app(models_root: str | os.PathLike[str] | None = None, max_upload_mb: float = 256, cache_size: int = 64,
               time_budget_s: float = 60.0, threads: int = 4, upload_timeout_s: float = 120.0,
               cache_mb: float = 1024.0, cors_origins: list[str] | None = None, max_uploads: int = 16) -> FastAPI:
    """The service; ``models_root`` is the only folder whose files JSON requests may name. ``cors_origins``: the
    origins whose pages may call the API from a browser (``*``: any); none by default."""
    if models_root is not None and not Path(models_root).is_dir():
        raise LilouInputError(f"--models-root {os.fspath(models_root)!r} is not a directory")
    for option, value, unit in (("--max-upload-mb", max_upload_mb, "MiB"), ("--time-budget-s", time_budget_s, "seconds"),
                                ("--upload-timeout-s", upload_timeout_s, "seconds")):
        if not 0 < value < math.inf:  # NaN passed a test of <= 0, and then failed every request
            raise LilouInputError(f"{option} must be positive: a finite number of {unit}, not {value:g}")
    if cache_size < 0:
        raise LilouInputError("--cache-size must be >= 0")
    if max_uploads < 1:
        raise LilouInputError("--max-uploads must be at least 1")
    if not 0 <= cache_mb < math.inf:
        raise LilouInputError(f"--cache-mb must be a finite number of MiB >= 0, not {cache_mb:g}")
    origins = cors_allowed(cors_origins or [])
    settings = Settings(models_root=None if models_root is None else Path(models_root), max_upload_mb=max_upload_mb,
                        cache_size=cache_size, time_budget_s=time_budget_s, threads=threads,
                        upload_timeout_s=upload_timeout_s, cache_mb=cache_mb, max_uploads=max_uploads)
    service = Service(settings)
    optional = {"plan": has_plan(), "llm": has_llm()}

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await asyncio.get_running_loop().run_in_executor(service.executor, service.warm_up)
        yield
        service.shutdown()

    # redirect_slashes=False: "POST /v1/predict/" was a 307 to an absolute http:// URL (the wrong scheme behind an
    # HTTPS proxy, and many clients drop a POST's body on a redirect); it is a 404 now.
    app = FastAPI(title="Lilou", version=API_VERSION, lifespan=lifespan, docs_url=None, redoc_url=None,
                  redirect_slashes=False,
                  description="Predicted inference latency of ONNX models on NVIDIA GPUs and MIG slices, without "
                              "the GPU. Bodies are the CLI's `--format json` objects; errors are "
                              "`{\"detail\": \"<one line>\"}`.")
    app.state.service = service
    install_handlers(app)
    app.add_middleware(UploadSlots, limit=max_uploads)
    set_up_logs()
    if origins:  # the rank warnings travel in a header, which a browser hides from another origin's script unless exposed
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_methods=["GET", "HEAD", "POST"],
                           allow_headers=["Content-Type"], expose_headers=[WARNINGS_HEADER], max_age=600)
    _routes(app, service, optional)
    static = resources.files("lilou.serve") / "static"
    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    app.openapi = lambda: openapi_doc.cached(app)  # type: ignore[method-assign]
    return app


def warnings_header(warnings: list[str]) -> str:
    """The warnings as the Lilou-Warnings header's JSON list, within :data:`MAX_WARNINGS_HEADER` characters: each
    cut to :data:`MAX_HEADER_WARNING`, and those past the total counted in a last item (`lilou rank` says them all)."""
    items: list[str] = []
    size = 2
    for i, warning in enumerate(warnings):
        if len(warning) > MAX_HEADER_WARNING:
            warning = f"{warning[:MAX_HEADER_WARNING]}... ({len(warning) - MAX_HEADER_WARNING} more characters)"
        item = json.dumps(warning, ensure_ascii=True)
        if size + len(item) + 2 > MAX_WARNINGS_HEADER - 100:  # room for the count
            items.append(json.dumps(f"... and {len(warnings) - i} more warning(s), left out of this header for its "
                                    "size; lilou rank prints them all"))
            break
        items.append(item)
        size += len(item) + 2
    return "[" + ", ".join(items) + "]"


def cors_allowed(values: list[str]) -> list[str]:
    """``--cors-origin`` values (each may be a comma-separated list) as origins: ``*``, or ``scheme://host[:port]``."""
    origins = [item.strip().rstrip("/") for value in values for item in value.split(",") if item.strip()]
    for origin in origins:
        if origin != "*" and not re.fullmatch(r"https?://[^/\s?#]+", origin):
            raise LilouInputError(f"--cors-origin {origin!r}: give an origin such as https://dash.example.com "
                                  "(scheme, host and port, no path) or *")
    return origins


def app_from_environment() -> FastAPI:
    """uvicorn's factory for ``lilou serve --workers N``: the options travel in ``$LILOU_SERVE_SETTINGS``."""
    options = json.loads(os.environ.get(SETTINGS_ENV, "{}"))
    return create_app(**options)


async def parse_request(request: Request, schema: type[R], service: Service) -> tuple[R, ModelSource | None]:
    """The request's fields as ``schema`` and its uploaded file (None for a JSON body)."""
    limit = service.settings.max_upload_bytes
    content_type = request.headers.get("content-type", "")
    kind = media_type(content_type)
    if kind.startswith("application/") and kind.endswith("+json"):  # application/vnd.api+json ...: JSON too
        kind = "application/json"
    if kind in ("application/json", ""):  # options only: a small cap, not the upload's (json.loads takes ~6x)
        limit = min(limit, MAX_JSON_BYTES)
        check_content_length(request.headers, limit, json_too_large)
    else:
        check_content_length(request.headers, limit)
    body = within(request.stream(), service.settings.upload_timeout_s)
    fields: dict[str, Any] = dict(request.query_params)
    upload = None
    if kind == "application/json":
        raw = await read_limited(body, limit, json_too_large)
        try:
            body = parse_json(raw) if raw.strip() else {}
        except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError, or nested too deep
            raise InvalidField(f"the body is not valid JSON ({getattr(exc, 'msg', exc)})") from None
        if not isinstance(body, dict):
            raise InvalidField("the JSON body must be an object of fields, e.g. {\"model\": ..., \"gpu\": ...}")
        fields.update(body)
    elif kind == "multipart/form-data":
        parsed = await read_multipart(body, content_type, limit)
        fields.update(parsed.fields)
        upload = parsed.upload
    elif kind == "":
        if await read_limited(body, limit, json_too_large):  # a body without its type (curl -d without -H)
            raise unsupported(content_type)
        # else the fields are all in the query string
    else:
        raise unsupported(content_type)
    try:
        try:
            parsed_request = schema.model_validate({k: (None if v == "" and k not in LISTS else v)
                                                    for k, v in fields.items()})
        except ValidationError as exc:
            raise InvalidField(validation_message(exc.errors())) from None
        if upload is not None and parsed_request.model:
            raise InvalidField(f"give either an uploaded file (part {FILE_FIELD!r}) or a model name, not both")
    except BaseException:  # bad input, an internal error or a cancelled request: the upload is no one's now
        if upload is not None:
            upload.release()
        raise
    service.start_budget()  # the body is in: the time budget runs from here, for every step of the request
    return parsed_request, upload


async def _source(service: Service, request: PredictRequest | RankRequest | PlanRequest,
                  upload: ModelSource | None, http: Request) -> ModelSource:
    """The upload, or the file the request names under --models-root (hashed on a worker thread)."""
    if upload is not None:
        return upload
    if not request.model:
        raise InvalidField(f"model: name a file under --models-root, or upload the ONNX file as multipart part "
                           f"{FILE_FIELD!r}")
    return await service.run(service.models_root.resolve, request.model, request=http, fast=True)


async def _prediction(service: Service, fn, fields: PredictRequest | RankRequest, source: ModelSource, http: Request):
    """``fn(fields, source)`` on the fast lane when the model is cached with these options, else on the parse lane."""
    fast = service.is_cached(source, fields.batch, fields.shapes, fields.backend, fields.values)
    return await service.run(fn, fields, source, source=source, request=http, fast=fast)


async def _llm_model(service: Service, fields: LLMRequest | PlanRequest,
                     upload: ModelSource | None, http: Request) -> tuple[str | Path, ModelSource | None]:
    """An LLM is an uploaded config.json, a built-in name, or a config.json under --models-root."""
    if upload is not None:
        return upload.path, upload
    if not fields.model:
        raise InvalidField("model: name a built-in LLM (GET /v1/llm/models) or a config.json under --models-root, "
                           f"or upload it as multipart part {FILE_FIELD!r}")
    builtin = await service.run(service.builtin_llm, fields.model, request=http, fast=True)
    if builtin is not None:
        return builtin, None
    if service.models_root.root is None and not fields.model.lower().endswith(".json"):
        _unknown_llm(fields.model)  # no files by name: the CLI's line, not the one about ONNX files
    try:
        source = await service.run(service.models_root.resolve, fields.model, request=http, fast=True)
    except ModelNotFound:
        if fields.model.lower().endswith(".json"):
            raise
        _unknown_llm(fields.model)
        raise
    return source.path, source


def _unknown_llm(name: str) -> None:
    """Not a file, and no built-in name: raise the CLI's line, with the close built-in names (a 400, not a 404)."""
    from lilou.llm.config import builtin_config

    builtin_config(name)


def _routes(app: FastAPI, service: Service, optional: dict[str, bool]) -> None:
    docs = openapi_doc

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        html = (resources.files("lilou.serve") / "static" / "index.html").read_text(encoding="utf-8")
        return HTMLResponse(html, headers={"Content-Security-Policy": docs.PAGE_CSP})

    @app.get("/v1/healthz", tags=["service"], summary="liveness and cache counters",
             responses={200: {"model": docs.Health}})
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok", **service.stats(), "endpoints": optional})

    @app.get("/v1/gpus", tags=["predict"], summary="the GPU database (`lilou gpus --format json`)",
             responses={200: {"model": list[docs.GPUBody], "description": "GPU entries, MIG profiles included"}})
    async def gpus() -> JSONResponse:
        from lilou.hardware import all_gpus

        return JSONResponse([gpu.to_dict() for gpu in all_gpus()])

    @app.post("/v1/predict", tags=["predict"], summary="`lilou infer`: latency on one GPU or MIG slice",
              openapi_extra=docs.request_body(PredictRequest),
              responses={200: {"model": docs.PredictionBody}, **docs.ERRORS})
    async def predict(request: Request) -> JSONResponse:
        fields, upload = await parse_request(request, PredictRequest, service)
        source = await _source(service, fields, upload, request)
        return JSONResponse(await _prediction(service, service.predict, fields, source, request))

    @app.post("/v1/rank", tags=["predict"], summary="`lilou rank`: every GPU and MIG slice (or the listed), fastest first",
              openapi_extra=docs.request_body(RankRequest),
              responses={200: {"model": list[docs.RankEntryBody], "headers": docs.WARNINGS_HEADER_DOC}, **docs.ERRORS})
    async def rank(request: Request) -> JSONResponse:
        fields, upload = await parse_request(request, RankRequest, service)
        source = await _source(service, fields, upload, request)
        entries, warnings = await _prediction(service, service.rank, fields, source, request)
        return JSONResponse(entries, headers={WARNINGS_HEADER: warnings_header(warnings)})

    if optional["plan"]:
        @app.post("/v1/plan", tags=["plan"], summary="`lilou plan`: devices and batches that meet a latency SLO",
                  openapi_extra=docs.request_body(PlanRequest),
                  responses={200: {"model": docs.PlanBody}, **docs.ERRORS})
        async def plan(request: Request) -> JSONResponse:
            fields, upload = await parse_request(request, PlanRequest, service)
            if fields.llm:
                model, source = await _llm_model(service, fields, upload, request)
            else:
                source = await _source(service, fields, upload, request)
                model = source.path
            return JSONResponse(await service.run(service.plan, fields, model, source, source=upload, request=request))

    if optional["llm"]:
        @app.get("/v1/llm/models", tags=["llm"], summary="built-in LLM names for /v1/llm (`lilou llm --list`)",
                 responses={200: {"model": list[str], "description": "Hugging Face ids"}})
        async def llm_models() -> JSONResponse:
            return JSONResponse(await service.run(service.llm_models, fast=True))

        @app.post("/v1/llm", tags=["llm"], summary="`lilou llm`: TTFT, inter-token latency, power and memory",
                  openapi_extra=docs.request_body(LLMRequest), responses={200: {"model": docs.LLMBody}, **docs.ERRORS})
        async def llm(request: Request) -> JSONResponse:
            fields, upload = await parse_request(request, LLMRequest, service)
            model, source = await _llm_model(service, fields, upload, request)
            return JSONResponse(await service.run(service.llm, fields, model, source, source=upload, request=request))

    for route in [route for route in app.routes if "GET" in getattr(route, "methods", ()) and route.include_in_schema
                  or getattr(route, "path", None) == "/"]:
        app.add_api_route(route.path, _head(route.endpoint), methods=["HEAD"], include_in_schema=False)

    @app.get("/docs", include_in_schema=False)
    async def no_docs() -> JSONResponse:
        return JSONResponse({"detail": "Not Found: this server has no /docs page; its API contract is /openapi.json "
                                       f"(and {doc('service.md')})"}, status_code=404)

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return Response(status_code=204)


def _head(endpoint):
    """HEAD for a GET route (monitors probe with HEAD; it was a 405): the GET's status and headers, no body. The GET's
    Content-Length included: HEAD said 0, which RFC 9110 (8.6) forbids, since a GET would send that many bytes."""
    async def head() -> Response:
        response = await endpoint()
        return Response(status_code=response.status_code, headers=dict(response.headers))

    return head
