"""What the endpoints do, as plain blocking functions: the same calls the CLI makes, on cached prepared models.

The event loop never runs these; :meth:`Service.run` hands them to a thread pool under the time budget.
"""
from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import secrets
import shutil
import tempfile
import importlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
import contextlib
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lilou.api import Predictor, PreparedModel
from lilou.errors import LilouInputError
from lilou.serve.cache import ModelCache, model_key
from lilou.serve.errors import ClientGone, InvalidField, OverTimeBudget
from lilou.serve.schemas import LLMRequest, PlanRequest, PredictRequest, RankRequest
from lilou.serve.uploads import ModelSource, ModelsRoot

if TYPE_CHECKING:
    from starlette.requests import Request

    from lilou.graph.batch_series import BatchSeries

T = TypeVar("T")
log = logging.getLogger("lilou.serve")

#: The model's name while it is loaded: a cached model, and the errors of its load, serve every request for the same
#: bytes, whatever each called its file, so they name no request; each request puts its own name in their place
#: (:meth:`Service.prepared`, :func:`named_errors`).
MODEL_PLACEHOLDER = f"<model {secrets.token_hex(6)}>"
#: Threads of the fast lane: predictions of models already cached, and finding a file under --models-root. A cached
#: resnet18 took 44 s behind five uploads being parsed when every request shared the --threads pool.
FAST_THREADS = 2
#: When the request being handled runs out of time (the event loop's clock): one budget per request, however many
#: steps it runs on the threads (a JSON request waited for its file's lookup and its prediction, a budget each).
_deadline: ContextVar[float | None] = ContextVar("lilou_serve_deadline", default=None)


@dataclass(frozen=True)
class Settings:
    """The options of ``lilou serve`` that shape the app (host and port belong to uvicorn)."""

    models_root: Path | None = None
    max_upload_mb: float = 256.0
    max_uploads: int = 16      # multipart requests in progress at once (lilou.serve.limits.UploadSlots)
    cache_size: int = 64
    cache_mb: float = 1024.0   # the cached models' memory, estimated (lilou.serve.cache.estimated_bytes)
    time_budget_s: float = 60.0
    threads: int = 4
    upload_timeout_s: float = 120.0

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 2**20)

    @property
    def cache_bytes(self) -> int:
        return int(self.cache_mb * 2**20)


def _importable(module: str, names: tuple[str, ...]) -> bool:
    """Whether ``module`` provides the agreed names (the plan and llm packages are optional here)."""
    try:
        imported = importlib.import_module(module)
    except ImportError:
        return False
    except Exception:  # noqa: BLE001 - a broken optional package must not take the service down
        log.exception("cannot import %s; its endpoint is left out", module)
        return False
    return all(hasattr(imported, name) for name in names)


def has_plan() -> bool:
    return _importable("lilou.plan", ("plan_model", "read_prices", "CapacityPlan"))


def has_llm() -> bool:
    return _importable("lilou.llm", ("LLMPredictor", "LLMPrediction", "builtin_models"))


class Service:
    """One Predictor per backend (checkpoints loaded once), the prepared-model cache and the worker threads."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.cache = ModelCache(settings.cache_size, settings.cache_bytes)
        self.models_root = ModelsRoot(settings.models_root)
        self.executor = ThreadPoolExecutor(max_workers=max(1, settings.threads), thread_name_prefix="lilou-predict")
        self.fast_lane = ThreadPoolExecutor(max_workers=FAST_THREADS, thread_name_prefix="lilou-fast")
        self._predictors: dict[str, Predictor] = {}
        self._llm = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------ plumbing
    def start_budget(self) -> None:
        """Start the time budget of the request being handled (its body read): its steps on the threads share it."""
        _deadline.set(asyncio.get_running_loop().time() + self.settings.time_budget_s)

    async def run(self, fn: Callable[..., T], *args: Any, source: ModelSource | None = None,
                  request: Request | None = None, fast: bool = False) -> T:
        """``fn(*args)`` on a worker thread (``fast``: the fast lane's, for work on a cached model or a file lookup),
        answered 503 past the request's time budget (queueing included, :meth:`start_budget`).

        Work still queued when the budget runs out, or when the client of ``request`` hangs up, never starts. A
        Python thread cannot be stopped: work already running goes on to its end, and its upload's temporary folder
        is removed then. Each of these events is logged in one line."""
        loop = asyncio.get_running_loop()
        budget = self.settings.time_budget_s
        deadline = _deadline.get() or loop.time() + budget
        what = f"{_path(request)} ({getattr(fn, '__name__', 'work')}): "
        if loop.time() >= deadline:  # spent by the request's earlier steps
            if source is not None:
                source.release()
            log.warning("%sover the time budget of %g s before it started; answered 503", what, budget)
            raise OverTimeBudget(_over_budget(budget))
        future = (self.fast_lane if fast else self.executor).submit(fn, *args)
        if source is not None:
            future.add_done_callback(lambda _: source.release())
        result = asyncio.wrap_future(future)
        gone = asyncio.ensure_future(_hung_up(request)) if request is not None else None
        try:
            await asyncio.wait([result, *([gone] if gone else [])], timeout=deadline - loop.time(),
                               return_when=asyncio.FIRST_COMPLETED)
            if result.done():
                return result.result()
            started = not future.cancel()  # queued work is dropped; running work runs on
        finally:
            result.cancel()  # a no-op when done; else its outcome is no one's now
            if gone is not None:
                gone.cancel()
        fate = "it runs on to its end" if started else "its work, still queued, is dropped"
        if gone is not None and gone.done() and not gone.cancelled():
            log.info("%sthe client hung up; %s", what, fate)
            raise ClientGone("the client closed the connection before the answer")
        log.warning("%sover the time budget of %g s; answered 503, %s", what, budget, fate)
        raise OverTimeBudget(_over_budget(budget))

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.fast_lane.shutdown(wait=False, cancel_futures=True)

    def is_cached(self, source: ModelSource, batch: int | None, shapes: dict[str, list[int]], backend: str,
                  values: dict[str, list[bool | int | float]] | None = None) -> bool:
        """Whether the model with these options is prepared and cached (its prediction belongs to the fast lane)."""
        from lilou.fusion.backends import check_backend

        try:
            backend = check_backend(backend)
        except LilouInputError:
            return False  # said by the prediction itself
        return self._key(source, batch, shapes, backend, values) in self.cache

    def _key(self, source: ModelSource, batch: int | None, shapes: dict[str, list[int]], backend: str,
             values: dict[str, list[bool | int | float]] | None):
        folder = None if source.temp_dir is not None else str(source.path.parent)  # uploads come without external data
        return model_key(source.sha256, batch, shapes, backend, values, folder)

    def predictor(self, backend: str = "eager") -> Predictor:
        with self._lock:
            if backend not in self._predictors:
                self._predictors[backend] = Predictor(backend=backend)
            return self._predictors[backend]

    def stats(self) -> dict[str, Any]:
        """Counters of the model cache. A cached model is parsed and grouped into kernels at once, so the
        kernel-grouping counters (kept in /v1/healthz for its clients) are the cache's own."""
        cache = self.cache.stats()
        return {"cache": cache, "kernel_groupings": {key: cache[key] for key in ("entries", "hits", "misses")}}

    def prepared(self, source: ModelSource, batch: int | None, shapes: dict[str, list[int]],
                 backend: str, series: BatchSeries | None = None,
                 values: dict[str, list[bool | int | float]] | None = None) -> PreparedModel:
        """The model read and grouped into kernels, from the cache, named as this request named it (the cached entry,
        and the errors of its load, which other requests for the same bytes share, name the model MODEL_PLACEHOLDER).

        A plan passes the file's ``series``: graphs of later batches derived from its first reads, identical to the
        graphs a read gives (:mod:`lilou.graph.batch_series`), so the cache holds what /v1/predict would prepare. Each
        is grouped into kernels on its own (a CLI plan reuses its first batch's groups; cached entries here are
        shared with /v1/predict, which must equal `lilou infer`)."""
        from lilou.graph.dag import load_graph

        predictor = self.predictor(backend)

        def load() -> PreparedModel:
            try:
                if series is not None and batch is not None:
                    graph = series.graph(batch, shapes or None)
                else:
                    graph = load_graph(source.path, batch=batch, shapes=shapes or None, values=values or None,
                                       backend=backend)
                prepared = predictor.prepare(dataclasses.replace(graph, name=MODEL_PLACEHOLDER))
            except LilouInputError as exc:  # shared with requests for the same bytes: this request's path goes
                raise type(exc)(_placeholder_for(source, str(exc))) from None
            return dataclasses.replace(prepared, batch=batch)  # the batch is the option's

        prepared = self.cache.get(self._key(source, batch, shapes, predictor.backend, values), load)
        # the graph keeps the placeholder (a copy would lose what it memoizes); only errors would show its name
        return dataclasses.replace(prepared, name=source.name,
                                   warnings=tuple(w.replace(MODEL_PLACEHOLDER, source.name) for w in prepared.warnings))

    def warm_up(self) -> None:
        """Load the eager checkpoints and the fusion model before the first request."""
        import onnx
        from onnx import TensorProto, helper

        from lilou.graph.dag import build_graph

        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])
        model = helper.make_model(helper.make_graph([helper.make_node("MatMul", ["x", "x"], ["y"], name="mm")],
                                                    "warm_up", [x], [y]),
                                  opset_imports=[helper.make_opsetid("", 17)])
        onnx.checker.check_model(model)
        self.predictor("eager").predict(build_graph(model, name="warm_up"), gpu="a10g")

    # ------------------------------------------------------------ endpoints
    def predict(self, request: PredictRequest, source: ModelSource) -> dict[str, Any]:
        with named_errors(source, self.models_root.root, request.values):
            prepared = self.prepared(source, request.batch, request.shapes, request.backend, values=request.values)
            predictor = self.predictor(request.backend).with_launch_gap(request.launch_gap_ms())
            prediction = predictor.predict(prepared, gpu=request.gpu, mig=request.mig, precision=request.precision,
                                           tf32=request.tf32)
        return prediction.to_json()

    def rank(self, request: RankRequest, source: ModelSource) -> tuple[list[dict[str, Any]], list[str]]:
        with named_errors(source, self.models_root.root, request.values):
            prepared = self.prepared(source, request.batch, request.shapes, request.backend, values=request.values)
            predictor = self.predictor(request.backend).with_launch_gap(request.launch_gap_ms())
            ranking = predictor.rank(prepared, gpus=request.gpus, precision=request.precision, tf32=request.tf32)
        return ranking.to_json(), list(ranking.warnings)

    def plan(self, request: PlanRequest, model: str | Path, source: ModelSource | None) -> dict[str, Any]:
        """``lilou plan``; ``model`` is a file (or, with ``llm``, a built-in LLM name)."""
        from lilou.plan import plan_llm, plan_model

        batches = plan_batches(request)
        prices = self._prices(request.prices)
        with named_errors(source, self.models_root.root, request.values), _llm_paths(request.llm):
            if request.llm:
                missing = [flag for flag, value in (("itl_slo_ms", request.itl_slo_ms),
                                                    ("input_len", request.input_len),
                                                    ("output_len", request.output_len)) if value is None]
                if missing:
                    raise InvalidField(f"plan with llm needs {', '.join(missing)}")
                if request.launch_gap_us is not None:
                    raise InvalidField("launch_gap_us applies to ONNX models; with llm the engine's host time is "
                                       "lilou llm's own (engine)")
                if request.values:
                    raise InvalidField("values apply to ONNX models; lilou llm prices a decoder step by step itself")
                check_plan_fields(request)
                check_json_config(source)
                plan = plan_llm(model, request.itl_slo_ms, input_len=request.input_len, output_len=request.output_len,
                                gpus=request.gpus, batches=batches, prices=prices, dtype=request.dtype,
                                engine=request.engine, llm_predictor=self.llm_predictor(), tp=request.tp,
                                kv_dtype=request.kv_dtype, ttft_slo_ms=request.ttft_slo_ms)
            else:
                check_plan_fields(request)
                if request.slo_ms is None:
                    raise InvalidField("plan needs slo_ms (or llm: true with itl_slo_ms, input_len, output_len)")
                # Each batch re-shapes the graph: one cached prepared model per batch, shared with /v1/predict;
                # batches not cached are read through one BatchSeries (later ones derived from the first reads).
                plan = plan_model(model, request.slo_ms, gpus=request.gpus, batches=batches, prices=prices,
                                  predictor=self.predictor(request.backend).with_launch_gap(request.launch_gap_ms()),
                                  shapes=request.shapes or None,
                                  precision=request.precision, tf32=request.tf32,
                                  prepare=self._plan_batches(source, request.backend, batches, request.values))
        result = plan.to_json()
        if not (request.llm and source is not None and source.temp_dir is not None):
            # an uploaded config.json keeps the name plan_llm gives it, as /v1/llm (lilou llm) names it and its
            # warnings and errors do ("Mixtral-8x7B-v0.1"): the upload's display name was "config.json"
            result["model"] = source.name if source is not None else str(model)
        return result

    def _plan_batches(self, source: ModelSource, backend: str, batches: list[int] | None,
                      values: dict[str, list[bool | int | float]]) -> Callable[[int, dict | None], PreparedModel]:
        """``plan_model``'s ``prepare`` for one plan: cached prepared models, read through one BatchSeries."""
        from lilou.graph.batch_series import BatchSeries
        from lilou.plan.planner import ONNX_LADDER, check_batches

        largest = ONNX_LADDER[-1] if batches is None else check_batches(batches)[-1]  # None: the ONNX plan's ladder
        series = BatchSeries(source.path, largest=largest, values=values or None,
                             backend=backend)
        return lambda batch, shapes: self.prepared(source, batch, shapes or {}, backend, series=series,
                                                   values=values)

    def _prices(self, prices: dict[str, float] | str | None) -> dict[str, float] | None:
        """Prices keyed by device name, checked as ``--prices`` files are (lilou.plan.read_prices)."""
        if prices is None:
            return None
        from lilou.plan import read_prices

        if isinstance(prices, dict):
            # each pair checked as it is (it was written as a CSV line: a key "a10g,5\nt4" priced two devices)
            from lilou.plan.prices import checked_prices

            try:
                return checked_prices(prices)
            except LilouInputError as exc:
                message = str(exc)
                raise type(exc)(message if message.startswith("prices") else f"prices: {message}") from None
        text = prices
        folder = Path(tempfile.mkdtemp(prefix="lilou-prices-"))
        try:
            path = folder / "prices.csv"
            path.write_text(text, encoding="utf-8")
            try:
                prices = read_prices(path)
                # the lines of the client's own CSV text, as its errors name them ("prices line 4: ...")
                prices.notes = [re.sub(r"^--prices line (\d+): ", r"prices line \1: ", note) for note in prices.notes]
                return prices
            except LilouInputError as exc:
                raise type(exc)(str(exc).replace(f"--prices: {path}", "prices").replace(str(path), "prices")) from None
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def llm_predictor(self):
        from lilou.llm import LLMPredictor

        predictor = self.predictor("eager")
        with self._lock:
            if self._llm is None:
                self._llm = LLMPredictor(predictor)
            return self._llm

    def llm(self, request: LLMRequest, model: str | Path, source: ModelSource | None) -> dict[str, Any]:
        with named_errors(source, self.models_root.root), _llm_paths(True):
            check_json_config(source)
            prediction = self.llm_predictor().predict(
                model, request.gpu, mig=request.mig, tp=request.tp, batch=request.batch, input_len=request.input_len,
                output_len=request.output_len, dtype=request.dtype, kv_dtype=request.kv_dtype, engine=request.engine)
        result = prediction.to_json()
        if source is not None and source.temp_dir is None and "model" in result:
            result["model"] = source.name  # a file under --models-root: its path there (an upload: the CLI's name)
        return result

    def llm_models(self) -> list[str]:
        from lilou.llm import builtin_models

        return list(builtin_models())

    def builtin_llm(self, name: str) -> str | None:
        """The built-in LLM ``name`` spells, as `lilou llm` resolves it (any case, organisation optional ...)."""
        from lilou.llm.config import builtin_name

        return builtin_name(name)


def _llm_paths(llm: bool):
    """For an LLM: no name read as a path relative to the server's working folder (lilou.llm.config.absolute_paths_only:
    a built-in name resolved to "org/name" read that folder's config.json where the server was started beside one);
    the service's own files are absolute paths. lilou.llm is imported only then (it is optional here)."""
    if not llm:
        return contextlib.nullcontext()
    from lilou.llm.config import absolute_paths_only

    return absolute_paths_only()


def _over_budget(budget: float) -> str:
    return (f"the prediction did not finish within the server's time budget of {budget:g} s (the server is busy or "
            "the model is very large); retry later")


async def _hung_up(request: Request) -> None:
    """Return once the client of ``request`` (its body read) has closed the connection."""
    try:
        while (await request.receive())["type"] != "http.disconnect":
            pass
    except Exception:  # noqa: BLE001 - a connection that cannot be read is gone too
        return


def _path(request: Request | None) -> str:
    return "a request" if request is None else f"{request.method} {request.url.path[:100]}"


def check_json_config(source: ModelSource | None) -> None:
    """An LLM's file must be a JSON config: an ONNX model (or other binary) gets a line that says where it goes, not
    "not a readable JSON config (UnicodeDecodeError)"."""
    if source is None:
        return
    with open(source.path, "rb") as file:
        head = file.read(64).lstrip(b"\xef\xbb\xbf \t\r\n")
    if head[:1] in (b"{", b"["):
        return
    raise LilouInputError(f"{source.path}: not a JSON config (its first bytes are not JSON): /v1/llm and plans with llm "
                          "read a Hugging Face config.json; an ONNX model goes to /v1/predict, /v1/rank or /v1/plan "
                          "without llm")


def plan_batches(request: PlanRequest) -> list[int] | None:
    """The batches a plan tries: ``batch`` B alone, as ``lilou plan --batch B`` (argparse's abbreviation of
    --batches) plans B only, or ``batches``."""
    if request.batch is None:
        return request.batches
    if request.batches is not None and request.batches != [request.batch]:
        raise InvalidField("give batch or batches, not both (batch B plans batch B only, as lilou plan --batch B)")
    return [request.batch]


#: Fields of one kind of plan that the other kind has no use for (``lilou plan`` refuses --itl-slo-ms ... without
#: --llm); a field with a default counts when the request gives it.
_LLM_ONLY = ("itl_slo_ms", "ttft_slo_ms", "input_len", "output_len", "dtype", "kv_dtype", "tp", "engine")
_ONNX_ONLY = ("slo_ms", "shapes", "precision", "tf32", "backend")


def check_plan_fields(request: PlanRequest) -> None:
    """Refuse the fields the plan's kind would ignore (an LLM plan was priced in BF16 with precision fp32 given, an
    ONNX plan with tp 4 planned one GPU per replica), as ``lilou plan`` refuses LLM options without --llm."""
    given = request.model_fields_set
    fields = _ONNX_ONLY if request.llm else _LLM_ONLY
    extra = [name for name in fields if name in given and getattr(request, name) not in (None, {})]
    if not extra:
        return
    verb = "applies" if len(extra) == 1 else "apply"
    if request.llm:
        raise InvalidField(f"{', '.join(extra)} {verb} to ONNX models; with llm a decoder LLM is planned with "
                           "itl_slo_ms, input_len and output_len, its precision set by dtype")
    raise InvalidField(f"{', '.join(extra)} {verb} with llm: true (a decoder LLM planned over lilou llm); an ONNX "
                       "model is planned with slo_ms, its precision set by precision")


def _placeholder_for(source: ModelSource, message: str) -> str:
    """``message`` of a load shared with other requests: the request's own path (an upload's folder, a file under
    --models-root) replaced by the placeholder each request names in its own way."""
    message = message.replace(str(source.path), MODEL_PLACEHOLDER)
    if source.temp_dir is not None:
        message = message.replace(str(source.temp_dir), "<upload>")
    return message


@contextmanager
def named_errors(source: ModelSource | None, root: Path | None,
                 values: Mapping[str, object] | None = None) -> Iterator[None]:
    """Bad-input messages that name the model as the request did, never by the server's own paths nor by the name
    another request for the same bytes gave it; an error of the request's ``values`` in its words, not the CLI's."""
    try:
        yield
    except LilouInputError as exc:
        message = _in_values_words(str(exc), values or {})
        if source is not None:
            message = message.replace(str(source.path), source.name).replace(MODEL_PLACEHOLDER, source.name)
            if source.temp_dir is not None:
                message = message.replace(str(source.temp_dir), "<upload>")
        if root is not None:
            message = message.replace(f"{root}{os.sep}", "")
        if message == str(exc):
            raise
        raise type(exc)(message) from None


def _in_values_words(message: str, values: Mapping[str, object]) -> str:
    """An error of ``values`` as the request wrote it: the graph code words it for the command line (``--value NAME:
    ...``, ``--value LOOP=N: ...``, ``--value names ...``), which a JSON request has none of (audit ua43d, finding 8).
    The names are the request's own, so a name holding ``:`` or ``=`` is matched whole."""
    for name in sorted(values, key=len, reverse=True):
        for separator, said in ((":", ":"), ("=", " = ")):
            head = f"--value {name}{separator}"
            if message.startswith(head):
                return f"values[{name!r}]{said}{message[len(head):]}"
    return f"values name {message[len('--value names '):]}" if message.startswith("--value names ") else message
