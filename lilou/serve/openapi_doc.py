"""The service's OpenAPI document: request bodies for both JSON and multipart, response and error shapes.

The document is a tested contract, committed as ``lilou/serve/openapi.json``. After a deliberate
change of the API, regenerate it with::

    .venv/bin/python -m lilou.serve.openapi_doc --write
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

CONTRACT = Path(__file__).with_name("openapi.json")

# The page: its own script and style only, nothing from the network.
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
            "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")


class ErrorBody(BaseModel):
    detail: str = Field(..., description="one line: what the CLI prints after `lilou: error:`")


class KernelBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    nodes: list[str]
    type: str
    latency_ms: float
    flops: int
    bytes: int


class PredictionBody(BaseModel):
    """`lilou infer --format json` (DESIGN.md); fields added to the CLI's object appear here too."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())
    model: str
    gpu: str
    mig: str | None
    backend: str
    batch: int | None
    precision: str
    tf32: str
    latency_ms: float
    interval_ms: list[float] | None = Field(None, description="90 % interval [lo, hi], where the API gives one")
    extrapolated_share: float | None = Field(None, description="share of the time outside the measured range")
    kernels: list[KernelBody]
    warnings: list[str]


class RankEntryBody(BaseModel):
    """One entry of `lilou rank --format json`, fastest first."""

    model_config = ConfigDict(extra="allow")
    gpu: str
    mig: str | None
    latency_ms: float
    interval_ms: list[float] | None = Field(None, description="90 % interval [lo, hi], where the API gives one")
    precision: str
    tf32: str
    gpu_work_ms: float | None = Field(None, description="the kernels' GPU time without waits for launches; "
                                                        "devices tied by the host's launches are ordered by it")
    fits: bool | None = Field(None, description="weights and largest activation within the device's memory")
    memory_gb: float | None = Field(None, description="weights + largest activation in GiB, as stored on this device")


class MemoryBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    weights_gb: float
    kv_cache_gb: float
    activations_gb: float
    total_gb: float
    device_gb: float
    fits: bool


class SteadyStateBody(BaseModel):
    itl_ms: float
    tokens_per_s: float
    interval_ms: list[float] | None


class LLMBody(BaseModel):
    """`lilou llm --format json` (DESIGN.md)."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())
    model: str
    gpu: str
    mig: str | None
    tp: int
    batch: int
    input_len: int
    output_len: int
    dtype: str
    ttft_ms: float
    itl_ms: float
    e2e_ms: float
    tokens_per_s: float
    power_w: float
    energy_per_token_j: float
    memory: MemoryBody
    max_batch_fitting: int | None
    warnings: list[str]
    steady_state: SteadyStateBody | None = Field(
        None, description="vLLM: a server that keeps `batch` requests running, arriving prompts chunked into the "
                          "decode steps; null for HF eager or when the configuration does not fit")


class Health(BaseModel):
    status: str
    cache: dict[str, int] = Field(..., description="prepared models (parsed and grouped into kernels): entries, "
                                                    "capacity, hits, misses")
    kernel_groupings: dict[str, int] = Field(..., description="kernel groupings of cached models: entries, hits, "
                                                               "misses (the cache's own: a model is grouped when "
                                                               "it is cached)")
    endpoints: dict[str, bool] = Field(..., description="whether /v1/plan and /v1/llm are offered")


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "bad input (the CLI's exit status 2), or a path outside --models-root"},
    404: {"model": ErrorBody, "description": "no such file under --models-root"},
    408: {"model": ErrorBody, "description": "the request body did not arrive within --upload-timeout-s"},
    413: {"model": ErrorBody, "description": "request body over --max-upload-mb"},
    415: {"model": ErrorBody, "description": "neither application/json nor multipart/form-data"},
    422: {"model": ErrorBody, "description": "a field is missing or invalid"},
    500: {"model": ErrorBody, "description": "internal error (one line; the traceback stays in the server log)"},
    503: {"model": ErrorBody, "description": "over the per-request time budget"},
}

WARNINGS_HEADER_DOC = {"Lilou-Warnings": {"description": "JSON list of the warnings `lilou rank` prints on stderr",
                                          "schema": {"type": "string"}}}


def request_body(schema: type[BaseModel]) -> dict[str, Any]:
    """``requestBody`` for an endpoint that takes JSON naming a file, or a multipart upload."""
    json_schema = schema.model_json_schema()
    form = copy.deepcopy(json_schema)
    form["title"] = f"{schema.__name__}Upload"
    properties = form.get("properties", {})
    properties.pop("model", None)
    form["properties"] = {"file": {"type": "string", "format": "binary", "description": "the ONNX file"},
                          **properties}
    form["required"] = ["file", *[name for name in form.get("required", []) if name != "model"]]
    form["description"] = ("The same fields as form fields (or query parameters); lists as `a,b,c`, "
                           "objects (shapes, values, prices) as JSON text.")
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": json_schema},
                                                          "multipart/form-data": {"schema": form}}}}


def build(app: FastAPI) -> dict[str, Any]:
    return get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)


def cached(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is None:
        app.openapi_schema = build(app)
    return app.openapi_schema


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="print or write the service's OpenAPI contract")
    parser.add_argument("--write", action="store_true", help=f"write {CONTRACT.name} beside this module")
    args = parser.parse_args(argv)
    from lilou.serve.app import create_app

    text = json.dumps(build(create_app(None)), indent=2, sort_keys=True) + "\n"
    if args.write:
        CONTRACT.write_text(text, encoding="utf-8")
        print(f"wrote {CONTRACT}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
