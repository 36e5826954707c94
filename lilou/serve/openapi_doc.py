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
from typing import Any, Literal

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
    interval_ms: list[float] | None = Field(None, description="90 % interval [lo, hi] of the kernel's latency")
    extrapolated: bool | None = Field(None, description="the kernel lies outside the measured range of its model")
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
    precision_path: Literal["native", "weight_only", "emulated", "no_runtime"] = Field("native", description=(
        "what runs the precision on this device: native (the format's own units), weight_only (its weights on the "
        "16-bit tensor cores, FP16 activations), emulated (FP32 math on the CUDA cores), no_runtime (no known runtime "
        "runs it there: the latency is a lower bound; a plan lists the device as unmet)"))
    precision_note: str = Field("", description="why, where precision_path is not native")
    tf32: str
    latency_ms: float
    interval_ms: list[float] | None = Field(None, description="90 % interval [lo, hi], where the API gives one")
    extrapolated_share: float | None = Field(None, description="share of the time outside the measured range")
    fits: bool | None = Field(None, description="weights and the activations live at the peak within the device's memory")
    kernels: list[KernelBody]
    warnings: list[str]


class RankEntryBody(BaseModel):
    """One entry of `lilou rank --format json`, fastest first."""

    model_config = ConfigDict(extra="allow")
    gpu: str
    mig: str | None
    latency_ms: float
    interval_ms: list[float] | None = Field(None, description="90 % interval [lo, hi], where the API gives one")
    extrapolated_share: float | None = Field(None, description="share of the time outside the measured range")
    precision: str
    precision_path: Literal["native", "weight_only", "emulated", "no_runtime"] = Field("native", description=(
        "what runs the precision on this device: native (the format's own units), weight_only (its weights on the "
        "16-bit tensor cores, FP16 activations), emulated (FP32 math on the CUDA cores), no_runtime (no known runtime "
        "runs it there: the latency is a lower bound; a plan lists the device as unmet)"))
    precision_note: str = Field("", description="why, where precision_path is not native")
    precision_warnings: list[str] = Field([], description=(
        "the precision warnings lilou infer gives on this device (the ranking's pooled warnings are in the "
        "Lilou-Warnings header)"))
    tf32: str
    gpu_work_ms: float | None = Field(None, description="the kernels' GPU time without waits for launches; "
                                                        "devices tied by the host's launches are ordered by it")
    fits: bool | None = Field(None, description="weights and the activations live at the peak within the device's memory")
    memory_gb: float | None = Field(None, description="weights + activations at their peak in GiB, as stored on this device")
    backend: Literal["eager", "tvm"] = Field(..., description="the runtime whose kernels were predicted")


class MigProfileBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(..., description="the profile, e.g. 1g.10gb (a slice is named GPU/PROFILE)")
    memory_gb: float | None = None
    sms: int | None = None


class GPUBody(BaseModel):
    """One entry of `lilou gpus --format json`."""

    model_config = ConfigDict(extra="allow")
    name: str = Field(..., description="the name requests use (gpu, gpus)")
    aliases: list[str] = Field(..., description="other names a request may use")
    architecture: str
    compute_capability: str
    memory_gb: float
    mig_profiles: list[MigProfileBody] = Field(..., description="MIG profiles (empty: no MIG)")


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


#: Figures of an LLM configuration that does not fit the device's memory are null (lilou llm prints them so).
NullWhenNoFit = Field(..., description="null when the configuration does not fit the device's memory (memory.fits)")


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
    precision: str = Field(..., description="the dtype the model computes in (the same as dtype)")
    kv_dtype: str
    engine: str
    ttft_ms: float | None = NullWhenNoFit
    itl_ms: float | None = NullWhenNoFit
    e2e_ms: float | None = NullWhenNoFit
    tokens_per_s: float | None = NullWhenNoFit
    power_w: float | None = NullWhenNoFit
    energy_per_token_j: float | None = NullWhenNoFit
    memory: MemoryBody
    max_batch_fitting: int | None
    warnings: list[str]
    intervals: dict[str, list[float] | None] = Field(default_factory=dict, description=(
        "90 % intervals [lo, hi] of the figures above, by name; empty when the configuration does not fit"))
    steady_state: SteadyStateBody | None = Field(
        None, description="vLLM: a server that keeps `batch` requests running, arriving prompts chunked into the "
                          "decode steps; null for HF eager or when the configuration does not fit")


class PlanEntryBody(BaseModel):
    """One device of a plan: of its batches priced whose 90 % upper bound meets the SLO, the one with the most
    throughput at that bound."""

    model_config = ConfigDict(extra="allow")
    device: str
    gpu: str
    mig: str | None
    resource: str = Field(..., description="the Kubernetes resource that requests it, e.g. nvidia.com/mig-1g.10gb")
    gpus: int = Field(..., description="devices per replica (an LLM's tensor-parallel group)")
    batch: int
    precision: str | None
    precision_path: Literal["native", "weight_only", "emulated", "no_runtime"] | None = Field(None, description=(
        "ONNX plans: rank's precision_path on this device (native, weight_only or emulated: a device where no runtime "
        "runs the precision is in unmet); null for an LLM plan"))
    precision_note: str = Field("", description="why, where precision_path is not native")
    latency_ms: float = Field(..., description=(
        "the ONNX plan's latency, or the LLM plan's inter-token latency, of the kind itl_kind says"))
    itl_kind: Literal["steady_state", "static_batch"] | None = Field(..., description=(
        "LLM plans: which ITL latency_ms is: steady_state (engine vllm: lilou llm's steady_state.itl_ms, a server "
        "keeping `batch` requests running, prompts chunked in; above lilou llm's itl_ms) or static_batch (engine hf: "
        "lilou llm's itl_ms, the mean decode step of one static batch); null for an ONNX plan"))
    interval_ms: list[float]
    throughput_per_s: float
    throughput_per_s_at_upper: float
    memory_gb: float
    device_memory_gb: float
    fits: bool
    extrapolated_share: float
    ttft_ms: float | None = Field(..., description=(
        "LLM plans: time to first token at the planned batch (lilou llm's ttft_ms: the prefill of `batch` prompts "
        "arriving together); null for an ONNX plan"))
    ttft_kind: Literal["burst"] | None = Field(..., description=(
        "LLM plans: which TTFT ttft_ms is and ttft_slo_ms judges: burst, the first token of the last of `batch` "
        "prompts arriving together (the worst case at that concurrency); null for an ONNX plan"))
    ttft_interval_ms: list[float] | None = Field(..., description=(
        "LLM plans: its 90 % interval [lo, hi] (null for an ONNX plan, or where no calibration gives one)"))
    usd_per_hour: float | None
    price_source: str | None
    usd_per_million: float | None
    max_batch: int = Field(..., description=(
        "the largest batch priced that meets the SLO(s) and fits; `batch` is the one of those with the most "
        "throughput at the upper bound (ties: the larger), which can be smaller"))
    batch_exact: bool | None = Field(..., description=(
        "batch_search exact: whether max_batch was searched to the end (true: the batch above it misses "
        "the SLO(s) or does not fit) or, an ONNX plan's rows after its first 4, is the largest of the ladder "
        "`batches` within them (false: a larger one may be too); null when batch_search is listed"))


class UnmetBody(BaseModel):
    device: str
    tp: int | None = Field(None, description="in a plan over several tensor-parallel degrees: the degree left out "
                                             "(absent otherwise)")
    reason: str
    precision_path: Literal["no_runtime"] | None = Field(None, description=(
        "no_runtime where no known runtime runs the precision on the device (reason: `precision: ...`); absent "
        "otherwise"))


class PlanBody(BaseModel):
    """`lilou plan --format json`."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())
    model: str
    kind: Literal["model", "llm"] = Field(..., description="model: an ONNX plan (slo_ms); llm: a decoder LLM's (ITL)")
    backend: Literal["eager", "tvm"] | None = Field(..., description=(
        "an ONNX plan's runtime whose kernels were predicted; null for an LLM plan"))
    tp: int | list[int] = Field(..., description="tensor-parallel GPUs per replica; the list of degrees of a plan "
                                                 "given several (lilou plan --tp 2,4,8), each entry's in gpus")
    slo_ms: float = Field(..., description="the SLO (an LLM plan's: the ITL SLO)")
    ttft_slo_ms: float | None = Field(..., description=(
        "an LLM plan's TTFT SLO (ttft_slo_ms given), met by each entry's ttft_interval_ms upper bound; else null"))
    batches: list[int] = Field(..., description=(
        "the batch sizes tried (batch_search listed), or the ladder the search started from (exact)"))
    batch_search: Literal["listed", "exact"] = Field(..., description=(
        "listed: each entry's max_batch is the largest of `batches` within the SLO; exact (a plan given no batches): "
        "the largest batch that meets the SLO(s) and fits, searched from that ladder up to what memory holds (an "
        "ONNX plan's first 4 rows; each entry's batch_exact says which)"))
    unit: Literal["inference", "output_token"] = Field(..., description=(
        "what throughput_per_s counts per second and usd_per_million prices a million of: inferences (an ONNX "
        "plan) or output tokens (an LLM plan)"))
    precision: str | list[str] | None = Field(..., description=(
        "what the model computes in: one name when every device priced runs it so, else the sorted list of the "
        "names (an LLM in BF16 where the GPU has it, FP16 elsewhere); null when nothing was priced. lilou plan "
        "prints the same"))
    sort: Literal["cost", "throughput"]
    devices: int = Field(..., description="devices considered")
    plan: list[PlanEntryBody] = Field(..., description="the devices that meet the SLO, best first")
    unmet: list[UnmetBody] = Field(..., description="devices left out, and why")
    message: str | None = Field(..., description="why the plan is empty (null when it is not)")
    warnings: list[str]


class Health(BaseModel):
    status: str
    cache: dict[str, int | None] = Field(..., description=(
        "prepared models (parsed and grouped into kernels): entries, capacity, hits, misses, bytes (their memory, "
        "estimated from their node counts) and capacity_bytes (--cache-mb)"))
    kernel_groupings: dict[str, int] = Field(..., description="kernel groupings of cached models: entries, hits, "
                                                               "misses (the cache's own: a model is grouped when "
                                                               "it is cached)")
    endpoints: dict[str, bool] = Field(..., description="whether /v1/plan and /v1/llm are offered")


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "bad input (the CLI's exit status 2), or a path outside --models-root"},
    404: {"model": ErrorBody, "description": "no such file under --models-root"},
    408: {"model": ErrorBody, "description": "the request body did not arrive within --upload-timeout-s"},
    413: {"model": ErrorBody, "description": "request body over --max-upload-mb"},
    415: {"model": ErrorBody, "description": "neither JSON (application/json, application/*+json) nor "
                                             "multipart/form-data"},
    422: {"model": ErrorBody, "description": "a field is missing or invalid"},
    500: {"model": ErrorBody, "description": "internal error (one line; the traceback stays in the server log)"},
    503: {"model": ErrorBody, "description": "over the per-request time budget"},
}

WARNINGS_HEADER_DOC = {"Lilou-Warnings": {"description": "JSON list of the warnings `lilou rank` prints on stderr",
                                          "schema": {"type": "string"}}}


def request_body(schema: type[BaseModel]) -> dict[str, Any]:
    """``requestBody`` for an endpoint that takes JSON naming a file, or a multipart upload.

    A JSON request must name its model (the service answers 422 without it); a form sends the file instead. A form
    field cannot be null: a field left out (or sent empty) takes its default, so the form's fields are not
    nullable."""
    json_schema = schema.model_json_schema()
    json_schema["properties"]["model"] = _not_null(json_schema["properties"]["model"])
    json_schema["required"] = ["model", *[name for name in json_schema.get("required", []) if name != "model"]]
    form = copy.deepcopy(json_schema)
    form["title"] = f"{schema.__name__}Upload"
    properties = {name: _not_null(field) for name, field in form.get("properties", {}).items() if name != "model"}
    form["properties"] = {"file": {"type": "string", "format": "binary", "description": "the ONNX file"},
                          **properties}
    form["required"] = ["file", *[name for name in form.get("required", []) if name != "model"]]
    form["description"] = ("The same fields as form fields (or query parameters); lists as `a,b,c`, "
                           "objects (shapes, values, prices) as JSON text; a field left out or empty takes its "
                           "default, but gpus: an empty list names no device, as `--gpus ''` does.")
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": json_schema},
                                                          "multipart/form-data": {"schema": form}}}}


def _not_null(field: dict[str, Any]) -> dict[str, Any]:
    """``field``'s schema without its null member (``anyOf: [X, {type: null}]`` -> X), default and title kept."""
    members = [member for member in field.get("anyOf", ()) if member != {"type": "null"}]
    if "anyOf" not in field or len(members) == len(field["anyOf"]):
        return field
    rest = {key: value for key, value in field.items() if key not in ("anyOf", "default")}
    if len(members) == 1:
        return {**members[0], **rest}
    return {"anyOf": members, **rest}


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
