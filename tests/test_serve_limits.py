"""`lilou serve` under load and hostile input: one time budget per request, queued work dropped when its client hangs
up or its budget runs out, a fast lane for cached models, a cap on uploads in progress, bounded headers and log lines.
In-process (the app over httpx.ASGITransport, or lilou.serve.service.Service itself); nothing is timed."""
from __future__ import annotations

import asyncio
import json
import logging
import threading
from pathlib import Path

import httpx
import onnx
import pytest
from onnx import helper

from lilou.serve.errors import ClientGone, OverTimeBudget, UploadTooLarge
from lilou.serve.service import Service, Settings

REPO = Path(__file__).resolve().parents[1]
RESNET18 = REPO / "examples" / "resnet18.onnx"


class _Request:
    """What Service.run reads of a starlette Request: its method, path and ASGI receive."""

    def __init__(self, hung_up: bool) -> None:
        self.method, self.hung_up = "POST", hung_up
        self.url = type("URL", (), {"path": "/v1/predict"})()

    async def receive(self) -> dict:
        if not self.hung_up:
            await asyncio.Event().wait()
        return {"type": "http.disconnect"}


@pytest.fixture
def blocked_service():
    """A service of one parse thread, held busy until the test ends."""
    service = Service(Settings(threads=1, time_budget_s=0.2))
    release = threading.Event()
    service.executor.submit(release.wait)
    yield service
    release.set()
    service.shutdown()


def test_queued_work_of_a_client_that_hung_up_never_starts(blocked_service, caplog):
    ran = []
    with caplog.at_level(logging.INFO, logger="lilou.serve"), pytest.raises(ClientGone):
        asyncio.run(blocked_service.run(ran.append, 1, request=_Request(hung_up=True)))
    blocked_service.executor.shutdown(wait=False)
    assert ran == []
    assert caplog.messages == ["POST /v1/predict (append): the client hung up; its work, still queued, is dropped"]


def test_queued_work_past_the_budget_never_starts_and_is_logged(blocked_service, caplog):
    ran = []
    with caplog.at_level(logging.INFO, logger="lilou.serve"), pytest.raises(OverTimeBudget):
        asyncio.run(blocked_service.run(ran.append, 1, request=_Request(hung_up=False)))
    assert ran == []
    assert caplog.messages == ["POST /v1/predict (append): over the time budget of 0.2 s; answered 503, its work, "
                               "still queued, is dropped"]


def test_the_fast_lane_answers_while_the_parse_threads_are_busy(blocked_service):
    assert asyncio.run(blocked_service.run(len, "four", fast=True)) == 4


def test_every_step_of_a_request_shares_its_one_budget():
    """A JSON request waited for its file's lookup and then its prediction, a whole budget each."""
    from lilou.serve import service as module

    service = Service(Settings(time_budget_s=60))
    ran = []

    async def request() -> None:
        service.start_budget()
        first = module._deadline.get()
        assert await service.run(len, "ab") == 2
        assert module._deadline.get() == first   # the step did not start a budget of its own
        module._deadline.set(asyncio.get_running_loop().time() - 1)   # as if the earlier steps had spent it
        await service.run(ran.append, 1)

    try:
        with pytest.raises(OverTimeBudget):
            asyncio.run(request())
    finally:
        service.shutdown()
    assert ran == []


# --------------------------------------------------------------------------- the app
def _call(app, *requests: tuple[str, str, dict]) -> list[httpx.Response]:
    async def calls():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=120) as http:
            return [await http.request(method, path, **kwargs) for method, path, kwargs in requests]

    return asyncio.run(calls())


def test_a_cached_model_is_predicted_while_every_parse_thread_is_busy(tmp_path):
    """A cached resnet18 took 44 s behind five large uploads sharing the four threads (report ua43a F2)."""
    from lilou.serve.app import create_app

    (tmp_path / "resnet18.onnx").write_bytes(RESNET18.read_bytes())
    app = create_app(tmp_path, threads=1, time_budget_s=30)
    service, release = app.state.service, threading.Event()
    body = {"json": {"model": "resnet18.onnx", "gpu": "a10g"}}
    try:
        first, = _call(app, ("POST", "/v1/predict", body))
        service.executor.submit(release.wait)   # the one parse thread is busy from now on
        again, = _call(app, ("POST", "/v1/predict", body))
    finally:
        release.set()
        service.shutdown()
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()


def test_a_json_request_declaring_a_huge_body_is_told_the_json_limit():
    """It was told about the ONNX upload limit (256 MiB) and weight-stripped files."""
    from starlette.requests import Request

    from lilou.serve.app import parse_request
    from lilou.serve.schemas import PredictRequest

    scope = {"type": "http", "method": "POST", "path": "/v1/predict", "query_string": b"",
             "headers": [(b"content-type", b"application/json"), (b"content-length", b"300000000")]}
    service = Service(Settings())
    try:
        with pytest.raises(UploadTooLarge) as refused:
            asyncio.run(parse_request(Request(scope), PredictRequest, service))
    finally:
        service.shutdown()
    assert str(refused.value).startswith("JSON request body larger than 1024 KiB: a JSON request names its model")


def test_a_model_over_the_node_limit_is_a_400_naming_the_upload(monkeypatch):
    from lilou.graph import loading
    from lilou.serve.app import create_app
    from tests.onnx_builders import make_model, tensor

    monkeypatch.setattr(loading, "MAX_NODES", 10)
    nodes = [helper.make_node("Relu", [f"t{i - 1}" if i else "x"], [f"t{i}"], name=f"r{i}") for i in range(11)]
    model = make_model(nodes, [tensor("x", [1, 8])], [tensor("t10", [1, 8])])
    app = create_app(None)
    try:
        answer, = _call(app, ("POST", "/v1/predict", {"files": {"file": ("chain.onnx", model.SerializeToString())},
                                                      "data": {"gpu": "a10g"}}))
    finally:
        app.state.service.shutdown()
    assert (answer.status_code, answer.json()) == (400, {"detail": (
        "chain.onnx: 11 nodes, over the 10 Lilou reads in one model (real models have a few thousand); split the "
        "model, or price a shorter version of it")})
    assert isinstance(onnx.load_from_string(model.SerializeToString()), onnx.ModelProto)


# --------------------------------------------------------------------------- uploads in progress
def test_uploads_past_the_cap_are_a_503_before_their_body_is_read():
    from lilou.serve.limits import UploadSlots

    release, calls = asyncio.Event(), []

    async def inner(scope, receive, send):
        calls.append(scope["path"])
        await release.wait()

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    async def receive():
        raise AssertionError("the refused request's body is not read")

    def scope(kind: bytes, path: str) -> dict:
        return {"type": "http", "path": path, "headers": [(b"content-type", kind)]}

    async def scenario():
        slots = UploadSlots(inner, limit=1)
        held = asyncio.ensure_future(slots(scope(b"multipart/form-data; boundary=x", "/first"), receive, send))
        await asyncio.sleep(0)
        await slots(scope(b"Multipart/form-data; boundary=x", "/second"), receive, send)   # refused
        json_request = asyncio.ensure_future(slots(scope(b"application/json", "/json"), receive, send))
        await asyncio.sleep(0)
        release.set()
        await held
        await json_request
        await slots(scope(b"multipart/form-data; boundary=x", "/third"), receive, send)   # a slot is free again
        return slots.active

    assert asyncio.run(scenario()) == 0
    assert calls == ["/first", "/json", "/third"]
    assert sent[0]["status"] == 503 and (b"retry-after", b"5") in sent[0]["headers"]
    assert json.loads(sent[1]["body"]) == {"detail": "the server is taking 1 uploads already (--max-uploads); retry "
                                                     "in a few seconds, or name a file under --models-root in a JSON "
                                                     "request"}


def test_max_uploads_must_be_positive():
    from lilou.errors import LilouInputError
    from lilou.serve.app import create_app

    with pytest.raises(LilouInputError, match="^--max-uploads must be at least 1$"):
        create_app(None, max_uploads=0)


# --------------------------------------------------------------------------- headers and logs
def test_the_warnings_header_is_bounded_and_says_what_it_left_out():
    """3,000 unknown op types made a 405 KB Lilou-Warnings header (curl, httpx and every proxy refuse it)."""
    from lilou.serve.app import MAX_WARNINGS_HEADER, warnings_header

    warnings = ["w" * 100_000] + [f"warning {i}" for i in range(3000)]
    header = warnings_header(warnings)
    items = json.loads(header)
    assert len(header) <= MAX_WARNINGS_HEADER
    assert items[0] == "w" * 1000 + "... (99000 more characters)"
    assert items[1:4] == ["warning 0", "warning 1", "warning 2"]
    kept = len(items) - 2
    assert items[-1] == (f"... and {3001 - 1 - kept} more warning(s), left out of this header for its size; "
                         "lilou rank prints them all")
    assert json.loads(warnings_header(["a", "b"])) == ["a", "b"]


def test_the_access_log_cuts_long_urls():
    from lilou.serve.limits import ShortURLs

    url = "/v1/predict?x=" + "a" * 100_000
    record = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "POST", url, "1.1", 422), None)
    assert ShortURLs().filter(record)
    assert record.getMessage() == (f'127.0.0.1:5 - "POST {url[:300]}...({len(url) - 300} more characters) '
                                   'HTTP/1.1" 422')


def test_the_service_lines_are_written_at_level_info():
    """Work dropped for a hung-up client was logged at info by a logger without a handler: nothing was written."""
    from lilou.serve.app import create_app

    app = create_app(None)
    app.state.service.shutdown()
    own = logging.getLogger("lilou.serve")
    assert own.getEffectiveLevel() == logging.INFO and len(own.handlers) == 1
    create_app(None).state.service.shutdown()
    assert len(own.handlers) == 1
