"""Request bodies: the CLI's options as fields (``lilou infer``, ``rank``, ``plan``, ``llm``).

The same models validate a JSON body and the form fields / query parameters of a multipart
upload. Text forms are accepted where a form has no lists: ``gpus`` and ``batches`` as
``a10g,t4`` / ``1,8``, ``shapes``, ``values`` and ``prices`` as a JSON object.
"""
from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic_core import PydanticCustomError
from pydantic import (BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, StrictBool, StrictFloat, StrictInt,
                      field_validator, model_validator)

Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4", "fp4"]
TF32 = Literal["off", "conv", "on"]
Backend = Literal["eager", "tvm"]


#: The deepest nesting of arrays and objects a request's JSON may have: a body with shapes is 3 levels deep. Python's
#: parser recurses once per level, so 100,000 brackets were a RecursionError (an internal error) before this check.
MAX_JSON_DEPTH = 64
#: An escape (a backslash and the character after it), a quote or a bracket: each token is one match, so the scan is
#: linear. A whole string as one match (``"[^"\\]*(?:\\.[^"\\]*)*"``) was tried again from every quote of a string
#: that never closes: 40 kB of ``\"`` took 6 s on the event loop, a 1 MiB body would have taken an hour (audit ua46).
_JSON_TOKEN = re.compile(r'\\.|["\[\]{}]', re.DOTALL)


def too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON ``text`` nests arrays and objects more than ``limit`` deep (brackets inside strings aside);
    a scan, before the parser recurses, in time linear in the text's length. Strings are followed as the parser
    follows them (a quote opens or closes one, an escape inside one is skipped), so over any part the parser reads
    it counts the depth the parser reaches."""
    depth = 0
    in_string = False
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token == '"':
            in_string = not in_string
        elif in_string or token[0] == "\\":
            continue
        elif token in ("[", "{"):
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def parse_json(raw: str | bytes) -> Any:
    """``json.loads(raw)``, refusing nesting deeper than :data:`MAX_JSON_DEPTH` with a ValueError (as the parser's
    own errors are: json.JSONDecodeError, UnicodeDecodeError)."""
    text = raw.decode(json.detect_encoding(raw)) if isinstance(raw, bytes) else raw
    if too_deep(text):
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except RecursionError:  # the scan's limit is far below the parser's: kept as a guard
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None


def _split_list(value: Any) -> Any:
    """``"a10g, t4"`` -> ``["a10g", "t4"]``; lists pass through. A text that lists nothing (``""``, ``",,"``) is an
    empty list, which names no device, as ``--gpus ,,`` (it was taken as no field: every device)."""
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",")]
        return [item for item in items if item]
    return value


def _json_object(value: Any) -> Any:
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            return parse_json(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a JSON object ({exc.msg})") from None
        except ValueError as exc:
            raise ValueError(f"not a usable JSON object ({exc})") from None
    return value


#: The fields whose values may be true or false; anywhere else JSON's true is not a number (pydantic's lax mode read
#: ``"batch": true`` as batch 1 and ``"prices": {"a10g": true}`` as 1 USD an hour).
BOOLEAN_FIELDS = frozenset({"values", "llm"})


def _holds_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, dict):
        return any(_holds_bool(item) for item in value.values())
    return isinstance(value, list) and any(_holds_bool(item) for item in value)


#: Fields whose names are taken in any case, as the CLI takes them (--precision FP16, --tf32 ON; lilou llm's
#: --dtype FP8 and --engine VLLM): "precision": "FP16" was a 422 while /v1/llm took "dtype": "FP8".
CASE_FREE_FIELDS = ("precision", "tf32", "backend", "engine", "dtype", "kv_dtype")


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    @model_validator(mode="before")
    @classmethod
    def _lower_case_names(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(isinstance(data.get(name), str) for name in CASE_FREE_FIELDS):
            data = {name: value.strip().lower() if name in CASE_FREE_FIELDS and isinstance(value, str) else value
                    for name, value in data.items()}
        return data

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                if name not in BOOLEAN_FIELDS and _holds_bool(value):
                    raise PydanticCustomError("boolean", "{field}: true/false where a number or a name is expected",
                                              {"field": name})
        return data

    model: str | None = Field(None, max_length=1024, description=(
        "path of an ONNX file relative to the server's --models-root; leave out when uploading the file "
        "(multipart part `file`)"))


class _GraphRequest(_Request):
    batch: PositiveInt | None = Field(None, description="leading (batch) dimension of every input (--batch)")
    shapes: dict[str, list[PositiveInt]] = Field(default_factory=dict, description=(
        "full shape of named inputs, e.g. {\"input_ids\": [8, 512]} (--shape input_ids=8x512), or the size of a "
        "named dynamic dimension in every input, e.g. {\"sequence_length\": [512]}"))
    # strict: "yes", "off" or "1" are not values (pydantic's lax booleans took them, where --value refuses them)
    values: dict[str, list[StrictBool | StrictInt | StrictFloat]] = Field(default_factory=dict, description=(
        "the value of run-time inputs that pick the work (--value), e.g. {\"use_cache_branch\": [false]}: an If on "
        "one is priced as the branch that runs"))
    precision: Precision | None = Field(None, description="precision the model computes in (default: ONNX types)")
    tf32: TF32 | None = Field(None, description="what FP32 convolutions/matmuls run in (default: PyTorch's)")
    backend: Backend = Field("eager", description="runtime whose kernels are predicted")
    launch_gap_us: float | None = Field(None, ge=0, le=1000, allow_inf_nan=False, description=(
        "the host's issue time per kernel in microseconds (--launch-gap-us; default: NeuSight's 2023 hosts', about "
        "30; 0 for CUDA-graph replay)"))

    def launch_gap_ms(self) -> float | None:
        return None if self.launch_gap_us is None else self.launch_gap_us / 1000.0

    @field_validator("shapes", mode="before")
    @classmethod
    def _shapes(cls, value: Any) -> Any:
        return _json_object(value) or {}

    @field_validator("values", mode="before")
    @classmethod
    def _values(cls, value: Any) -> Any:
        value = _json_object(value) or {}
        if isinstance(value, dict):  # {"use_cache_branch": false} as well as [false]
            value = {name: item if isinstance(item, list) else [item] for name, item in value.items()}
            for name, items in value.items():
                wrong = [item for item in items if not isinstance(item, (bool, int, float))]
                if wrong:  # one line, as --value words it (pydantic named the three types it is not)
                    shown = json.dumps(wrong[0])[:80] if isinstance(wrong[0], (str, list, dict, type(None))) else \
                        repr(wrong[0])[:80]
                    raise PydanticCustomError("value_type", "input {name} is given {item}; give true, false or a "
                                              "number", {"name": repr(name)[:80], "item": shown})
        return value


class PredictRequest(_GraphRequest):
    """``lilou infer MODEL --gpu NAME [--mig PROFILE] ...``"""

    gpu: str = Field(..., min_length=1, max_length=200, description="GPU name or alias, e.g. a10g")
    mig: str | None = Field(None, max_length=200, description="MIG profile of that GPU, e.g. 1g.10gb")


class RankRequest(_GraphRequest):
    """``lilou rank MODEL [--gpus a,b,GPU/PROFILE,...] ...``"""

    gpus: list[str] | None = Field(None, max_length=500, description=(
        "GPUs (whole) and MIG slices as GPU/PROFILE; default: every GPU and MIG slice"))

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, value: Any) -> Any:
        return _split_list(value)


class PlanRequest(_GraphRequest):
    """``lilou plan MODEL --slo-ms T [--gpus ...] [--batches ...] [--prices FILE]``, or with ``llm: true``
    ``lilou plan --llm MODEL --itl-slo-ms T --input-len I --output-len O [--dtype D] [--engine E]``. The fields of
    one kind of plan are refused in the other (Service.plan), as the CLI refuses --itl-slo-ms without --llm."""

    model: str | None = Field(None, max_length=1024, description=(
        "an ONNX file relative to --models-root (with llm: a built-in LLM name or a config.json there); "
        "leave out when uploading"))
    slo_ms: PositiveFloat | None = Field(None, description="end-to-end latency objective, ms (ONNX models)")
    gpus: list[str] | None = Field(None, max_length=500, description="devices to consider (default: all)")
    batch: PositiveInt | None = Field(None, description=(
        "plan this batch size only (lilou plan --batch B, argparse's abbreviation of --batches B); or give batches"))
    batches: list[PositiveInt] | None = Field(None, max_length=64, description=(
        "batch sizes to consider (default 1, 2, 4, ..., 128)"))
    prices: dict[str, PositiveFloat] | str | None = Field(None, description=(
        "USD per hour by device: a JSON object such as {\"a10g\": 1.01}, or the text of a --prices CSV file "
        "(header device,usd_per_hour)"))
    llm: bool = Field(False, description="the model is a decoder LLM: plan over `lilou llm` (--llm)")
    itl_slo_ms: PositiveFloat | None = Field(None, description="inter-token latency objective, ms (llm)")
    ttft_slo_ms: PositiveFloat | None = Field(None, description=(
        "time-to-first-token objective, ms, optional (llm): met by the 90 % upper bound of lilou llm's TTFT at the "
        "planned batch, the prefill of `batch` prompts arriving together"))
    input_len: PositiveInt | None = Field(None, description="prompt tokens per request (llm)")
    output_len: PositiveInt | None = Field(None, description="generated tokens per request (llm)")
    dtype: str | None = Field(None, max_length=20, description="LLM weight/compute dtype (llm)")
    kv_dtype: str | None = Field(None, max_length=20, description="KV-cache dtype (llm)")
    tp: Annotated[int, Field(gt=0, le=64)] | list[Annotated[int, Field(gt=0, le=64)]] = Field(1, description=(
        "tensor-parallel GPUs per replica, priced as that many (llm); a list such as [2, 4, 8] plans each device at "
        "each degree (lilou plan --tp 2,4,8)"))
    engine: Literal["vllm", "hf"] = "vllm"

    @field_validator("gpus", "batches", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator("tp", mode="before")
    @classmethod
    def _degrees(cls, value: Any) -> Any:
        """One line for a degree out of range, one degree or a list's (the union's members each said theirs)."""
        for degree in value if isinstance(value, list) else [value]:
            if isinstance(degree, int) and not isinstance(degree, bool) and degree < 1:
                raise PydanticCustomError("greater_than", "Input should be greater than 0")
            if isinstance(degree, int) and not isinstance(degree, bool) and degree > 64:
                raise PydanticCustomError("less_than_equal", "Input should be less than or equal to 64")
        return value

    @field_validator("prices", mode="before")
    @classmethod
    def _prices(cls, value: Any) -> Any:
        if isinstance(value, str) and value.lstrip().startswith("{"):
            return _json_object(value)
        return value or None


class LLMRequest(_Request):
    """``lilou llm MODEL --gpu NAME [--mig P] [--tp N] --batch B --input-len I --output-len O ...``"""

    model: str | None = Field(None, max_length=1024, description=(
        "a built-in LLM name (GET /v1/llm/models), or a config.json relative to --models-root; leave out when "
        "uploading the config.json"))
    gpu: str = Field(..., min_length=1, max_length=200)
    mig: str | None = Field(None, max_length=200)
    tp: PositiveInt = 1
    batch: PositiveInt = 1
    input_len: PositiveInt
    output_len: PositiveInt
    dtype: str | None = Field(None, max_length=20)
    kv_dtype: str | None = Field(None, max_length=20)
    engine: Literal["vllm", "hf"] = "vllm"
