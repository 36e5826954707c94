"""`lilou serve`: a real uvicorn process on a free loopback port, driven over HTTP with httpx.

Every body is compared with what the Python API (the CLI's own path) gives for the same real model
(examples/resnet18.onnx); every error path is checked for its status and its one-line message.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import onnx
import pytest

from lilou.errors import LilouInputError

REPO = Path(__file__).resolve().parents[1]
RESNET18 = REPO / "examples" / "resnet18.onnx"
CONTRACT = REPO / "lilou" / "serve" / "openapi.json"
MiB = 2**20


# --------------------------------------------------------------------------- server
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serve(*options: str, tmpdir: Path | None = None, startup_s: float = 120.0) -> Iterator[str]:
    """``lilou serve`` in its own process on a free loopback port; yields the base URL."""
    port = free_port()
    env = dict(os.environ)
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)   # where the server puts its upload folders
    log = open(Path(tmpdir or "/tmp") / f"lilou-serve-{port}.log", "w+b")  # noqa: SIM115
    process = subprocess.Popen([sys.executable, "-m", "lilou.cli", "serve", "--port", str(port), *options],
                               env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if process.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"lilou serve exited with {process.returncode}: {log.read()[-2000:]!r}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{base}/v1/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"lilou serve did not answer within {startup_s:g} s")
            time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture(scope="session")
def models_root(tmp_path_factory) -> Path:
    """resnet18 twice (one under a sub-folder), a copy with other bytes, a broken file and two ways out."""
    root = tmp_path_factory.mktemp("models")
    outside = tmp_path_factory.mktemp("outside")
    shutil.copy(RESNET18, root / "resnet18.onnx")
    (root / "sub").mkdir()
    shutil.copy(RESNET18, root / "sub" / "copy.onnx")
    model = onnx.load(str(RESNET18), load_external_data=False)
    model.doc_string = "same graph, other bytes"
    onnx.save(model, str(root / "resnet18-doc.onnx"))
    (root / "broken.onnx").write_bytes(b"this is not an ONNX file\n" * 4)
    shutil.copy(RESNET18, outside / "secret.onnx")
    (root / "escape.onnx").symlink_to(outside / "secret.onnx")
    (root / "out").symlink_to(outside, target_is_directory=True)
    return root


@pytest.fixture(scope="session")
def upload_tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("server-tmp")


@pytest.fixture(scope="session")
def server(models_root, upload_tmp) -> Iterator[str]:
    with serve("--models-root", str(models_root), "--max-upload-mb", "1", "--threads", "2",
               tmpdir=upload_tmp) as base:
        yield base


@pytest.fixture(scope="session")
def client(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=120) as http:
        yield http


@pytest.fixture(scope="session")
def predictor():
    from lilou.api import Predictor

    return Predictor()


def _upload(path: Path = RESNET18, name: str = "resnet18.onnx") -> dict:
    return {"file": (name, path.read_bytes(), "application/octet-stream")}


def _expected(result: dict, model: str) -> dict:
    return {**result, "model": model}


# --------------------------------------------------------------------------- endpoints
def test_healthz_reports_cache_and_optional_endpoints(client):
    from lilou.serve.service import has_llm, has_plan

    body = client.get("/v1/healthz").json()
    assert body["status"] == "ok"
    assert set(body["cache"]) == {"entries", "capacity", "hits", "misses", "bytes", "capacity_bytes"}
    assert body["cache"]["capacity"] == 64 and body["cache"]["capacity_bytes"] == 1024 * MiB
    assert set(body["kernel_groupings"]) == {"entries", "hits", "misses"}
    assert body["endpoints"] == {"plan": has_plan(), "llm": has_llm()}


def test_gpus_is_the_cli_database(client):
    from lilou.hardware import all_gpus

    response = client.get("/v1/gpus")
    assert response.status_code == 200
    assert response.json() == json.loads(json.dumps([gpu.to_dict() for gpu in all_gpus()]))


def test_predict_json_names_a_file_under_models_root(client, models_root, predictor):
    response = client.post("/v1/predict", json={"model": "resnet18.onnx", "gpu": "a10g"})
    assert response.status_code == 200, response.text
    expected = predictor.predict(models_root / "resnet18.onnx", gpu="a10g").to_json()
    assert response.json() == _expected(expected, "resnet18.onnx")


def test_predict_upload_mig_slice(client, predictor):
    response = client.post("/v1/predict", files=_upload(name="my model.onnx"),
                           data={"gpu": "a100-80gb", "mig": "1g.10gb", "batch": "1"})
    assert response.status_code == 200, response.text
    expected = predictor.predict(RESNET18, gpu="a100-80gb", mig="1g.10gb", batch=1).to_json()
    body = response.json()
    assert body == _expected(expected, "my_model.onnx")
    assert body["mig"] == "1g.10gb" and body["warnings"][0].startswith("GPU name 'a100-80gb' is ambiguous")


def test_predict_fields_as_query_parameters_with_precision(client, predictor):
    response = client.post("/v1/predict?gpu=t4&tf32=off&precision=fp16", files=_upload())
    assert response.status_code == 200, response.text
    expected = predictor.predict(RESNET18, gpu="t4", precision="fp16", tf32="off").to_json()
    assert response.json() == _expected(expected, "resnet18.onnx")
    assert response.json()["precision"] == "fp16"


def test_named_dimensions_in_shapes(client, predictor, tmp_path):
    """``shapes`` binds a named dynamic dimension in every input, as ``--shape sequence_length=N`` does."""
    from tests.test_named_dimensions import BOUND, decoder_step

    path = decoder_step(tmp_path)
    shapes = {name: list(size) for name, size in BOUND.items()}
    response = client.post("/v1/predict", files=_upload(path, "decoder_step.onnx"),
                           data={"gpu": "a10g", "shapes": json.dumps(shapes)})
    assert response.status_code == 200, response.text
    expected = predictor.predict(path, gpu="a10g", shapes=BOUND).to_json()
    assert response.json() == _expected(expected, "decoder_step.onnx")


def test_values_pick_the_branch_that_runs(client, predictor):
    """``values`` sets a run-time input as ``--value`` does; the cache tells true from false, and a value the input
    cannot hold is a 400 with the CLI's line, in the request's words (values['NAME'], not --value NAME)."""
    from tests.test_branches import DECODE, MERGED

    shapes = json.dumps({name: list(size) for name, size in DECODE.items()})
    for value in (False, True):
        response = client.post("/v1/predict", files=_upload(MERGED, "merged.onnx"),
                               data={"gpu": "a10g", "shapes": shapes, "values": json.dumps({"use_cache_branch": value})})
        assert response.status_code == 200, response.text
        expected = predictor.predict(MERGED, gpu="a10g", shapes=DECODE, values={"use_cache_branch": [value]})
        assert response.json() == _expected(expected.to_json(), "merged.onnx")
    from lilou.plan import plan_model

    named = {"sequence_length": [1], "past_sequence_length": [511]}
    plan = client.post("/v1/plan", files=_upload(MERGED, "merged.onnx"),
                       data={"slo_ms": "50", "gpus": "a10g", "batches": "1,4", "shapes": json.dumps(named),
                             "values": '{"use_cache_branch": false}'})
    assert plan.status_code == 200, plan.text
    expected = plan_model(MERGED, 50, gpus=["a10g"], batches=[1, 4], predictor=predictor, shapes=named,
                          values={"use_cache_branch": [False]}).to_json()
    assert plan.json()["plan"] == expected["plan"]
    bad = client.post("/v1/predict", files=_upload(MERGED, "merged.onnx"),
                      data={"gpu": "a10g", "shapes": shapes, "values": '{"use_cache_branch": [2]}'})
    assert (bad.status_code, bad.json()) == (400, {"detail": "values['use_cache_branch']: the input is boolean; give "
                                                             "true or false, got 2"})


def test_a_value_is_a_json_boolean_or_number(client):
    """"yes", "off" or "1" are no values: pydantic's lax booleans took "yes" and "off" as true and false where --value
    refuses them, and other strings were refused in three lines, one per type (audit ua46)."""
    for given, shown in (("off", '"off"'), ("1", '"1"'), (None, "null"), ([1], "[1]")):
        response = client.post("/v1/predict", json={"model": "x.onnx", "gpu": "a10g", "values": {"flag": [given]}})
        assert (response.status_code, response.json()) == (422, {"detail": f"values: input 'flag' is given {shown}; "
                                                                           "give true, false or a number"})


def test_errors_of_values_are_in_the_requests_words(client):
    """The graph code words them for the command line (``--value /Loop=100000: ...``), which a JSON request has none
    of (audit ua43d, finding 8)."""
    from lilou.graph.loops import UNBOUNDED_TRIPS

    loop = Path(__file__).parent / "data" / "control_flow" / "scripted-while.onnx"

    def detail(values: dict, endpoint: str = "/v1/predict", **fields) -> str:
        response = client.post(endpoint, files=_upload(loop, "while.onnx"),
                               data={**fields, "values": json.dumps(values)})
        assert response.status_code == 400, response.text
        return response.json()["detail"]

    assert detail({"/Loop": 10**10}, gpu="t4") == ("values['/Loop'] = 10000000000: more iterations than any loop runs "
                                                   f"(at most {UNBOUNDED_TRIPS - 1:,})")
    assert detail({"/Loop": -1}, "/v1/rank", gpus="t4").startswith("values['/Loop'] = -1: '/Loop' is a Loop; give")
    assert detail({"/Loop": 2501}, "/v1/plan", gpus="t4", slo_ms="50").startswith("values['/Loop'] = 2501: 2,501 ")
    assert detail({"nope": 1}, gpu="t4").startswith("values name nope, neither an input of the model")
    huge = 10**400  # valid JSON: an internal error (OverflowError) before audit ua46
    assert detail({"/Loop": huge}, gpu="t4") == ("values['/Loop'] = 10000000000000000000... (401 digits): more "
                                                 "iterations than any loop runs (at most 2,147,483,646)")


def test_integers_of_hundreds_of_digits_are_400s_not_500s(client):
    """JSON bounds no integer: a 400-digit batch or length of an LLM was "internal error: OverflowError: int too large
    to convert to float" in /v1/llm and /v1/plan (audit ua46)."""
    from lilou.serve.service import has_llm, has_plan

    if not (has_llm() and has_plan()):
        pytest.skip("lilou.llm or lilou.plan is not installed")
    huge = 10**400
    shown = "10000000000000000000... (401 digits)"
    llm = {"model": "llama-3.1-8b", "gpu": "h100", "input_len": 5, "output_len": 5}
    for field, name in (("batch", "batch"), ("input_len", "input length"), ("output_len", "output length")):
        response = client.post("/v1/llm", json={**llm, field: huge})
        assert (response.status_code, response.json()) == (400, {
            "detail": f"{name} {shown} is above 2^40, not a real one; use a realistic {name}"})
    plan = client.post("/v1/plan", json={**{k: v for k, v in llm.items() if k != "gpu"}, "llm": True,
                                         "itl_slo_ms": 50, "gpus": "h100", "input_len": huge})
    assert (plan.status_code, plan.json()) == (400, {
        "detail": f"--input-len {shown} is above 2^40, not a real length; use a realistic one"})


def test_a_batch_the_file_cannot_take_is_a_400(client):
    """Whisper's encoder exported at batch 2 and asked at batch 1: the CLI's line (lilou/graph/fixed_sizes.py)."""
    whisper = Path(__file__).parent / "data" / "genai" / "whisper-encoder-export.onnx"
    bad = client.post("/v1/predict", files=_upload(whisper, "whisper.onnx"), data={"gpu": "a10g", "batch": "1"})
    assert bad.status_code == 400
    assert bad.json()["detail"].startswith("the file fixes its input sizes (features 2x80x3000 -> 1x80x3000), and "
                                           "at the sizes asked 45 node(s) have no shape (node_MatMul_41, ")


def test_launch_gap_of_the_callers_host(client, predictor):
    """launch_gap_us, as `--launch-gap-us`: the same answers as a predictor with that gap (sharing the loaded one)."""
    response = client.post("/v1/predict", json={"model": "resnet18.onnx", "gpu": "a10g", "launch_gap_us": 0})
    assert response.status_code == 200, response.text
    expected = predictor.with_launch_gap(0.0).predict(RESNET18, gpu="a10g").to_json()
    assert response.json() == _expected(expected, "resnet18.onnx")
    assert response.json()["latency_ms"] < predictor.predict(RESNET18, gpu="a10g").latency_ms
    assert predictor.with_launch_gap(None) is predictor and predictor.model.overhead.gap_ms > 0.02  # left as it was
    gpus = ["a10g", "t4"]
    response = client.post("/v1/rank", json={"model": "resnet18.onnx", "gpus": gpus, "launch_gap_us": 12})
    assert response.json() == predictor.with_launch_gap(0.012).rank(RESNET18, gpus=gpus).to_json()
    response = client.post("/v1/predict", json={"model": "resnet18.onnx", "gpu": "a10g", "launch_gap_us": -1})
    assert (response.status_code, response.json()) == (422, {
        "detail": "launch_gap_us: Input should be greater than or equal to 0"})
    response = client.post("/v1/plan", json={"model": "llama-3.1-8b", "llm": True, "itl_slo_ms": 40, "input_len": 512,
                                             "output_len": 128, "launch_gap_us": 10})
    assert response.status_code == 422 and response.json()["detail"].startswith("launch_gap_us applies to ONNX models")


def test_an_llm_plan_no_device_holds_is_empty_and_bad_lengths_are_refused(client):
    """As lilou plan --llm: a model no device holds is a 200 with the empty plan and its line (it was a 400 "no device
    can serve it"); an argument every device refused is refused as itself."""
    body = {"model": "llama-3.1-70b", "llm": True, "itl_slo_ms": 50, "input_len": 1024, "output_len": 256,
            "gpus": ["a100-sxm4-80gb", "h100-sxm/1g.10gb"]}
    response = client.post("/v1/plan", json=body)
    assert response.status_code == 200 and response.json()["plan"] == []
    assert response.json()["message"].endswith("try --tp 2 (its weights split over 2 of a100-sxm4-80gb)")
    for fields, status, detail in (({"tp": 9}, 400, "--tp 9: tensor parallelism is modelled within one node of at most 8 GPUs"),
                                   ({"input_len": 0}, 422, "input_len: Input should be greater than 0")):
        response = client.post("/v1/plan", json={**body, **fields})
        assert (response.status_code, response.json()) == (status, {"detail": detail})


def test_an_llm_plan_of_tensor_parallel_replicas_is_the_cli_object(client):
    body = {"model": "meta-llama/Llama-3.1-70B-Instruct", "llm": True, "itl_slo_ms": 40, "input_len": 1024,
            "output_len": 256, "gpus": ["h100-sxm"], "batches": [1, 8], "tp": 4}
    response = client.post("/v1/plan", json=body)
    assert response.status_code == 200, response.text
    from lilou.plan import plan_llm

    expected = plan_llm("meta-llama/Llama-3.1-70B-Instruct", 40, input_len=1024, output_len=256, gpus=["h100-sxm"],
                        batches=[1, 8], tp=4).to_json()
    assert response.json() == expected and response.json()["plan"][0]["gpus"] == 4
    response = client.post("/v1/plan", json={**body, "tp": 0})
    assert response.status_code == 422 and response.json()["detail"].startswith("tp:")


def test_an_llm_plan_with_a_ttft_slo_is_the_cli_object(client):
    """ttft_slo_ms, as lilou plan --llm --ttft-slo-ms: entries carry ttft_ms and its interval, the plan its TTFT SLO;
    a bad value is a 422, and the field is refused on an ONNX plan."""
    body = {"model": "llama-3.1-8b", "llm": True, "itl_slo_ms": 100, "input_len": 2048, "output_len": 128,
            "gpus": ["h100-sxm"], "batches": [1, 8, 32], "ttft_slo_ms": 2000}
    response = client.post("/v1/plan", json=body)
    assert response.status_code == 200, response.text
    from lilou.plan import plan_llm

    expected = plan_llm("llama-3.1-8b", 100, input_len=2048, output_len=128, gpus=["h100-sxm"], batches=[1, 8, 32],
                        ttft_slo_ms=2000).to_json()
    assert response.json() == expected and expected["ttft_slo_ms"] == 2000
    assert expected["model"] == "meta-llama/Llama-3.1-8B-Instruct"  # named as lilou llm names it
    (entry,) = expected["plan"]
    assert entry["ttft_interval_ms"][1] <= 2000 and entry["ttft_ms"] > 0
    response = client.post("/v1/plan", json={**body, "ttft_slo_ms": 0})
    assert (response.status_code, response.json()) == (422, {"detail": "ttft_slo_ms: Input should be greater than 0"})
    response = client.post("/v1/plan", json={"model": "resnet18.onnx", "slo_ms": 5, "ttft_slo_ms": 100})
    assert response.status_code == 422 and response.json()["detail"].startswith("ttft_slo_ms applies with llm: true")


def test_an_llm_plan_over_several_tp_degrees_is_the_cli_object(client):
    body = {"model": "meta-llama/Llama-3.1-70B-Instruct", "llm": True, "itl_slo_ms": 60, "input_len": 1024,
            "output_len": 256, "gpus": ["h100-sxm"], "batches": [1, 8], "tp": [2, 4]}
    response = client.post("/v1/plan", json=body)
    assert response.status_code == 200, response.text
    from lilou.plan import plan_llm

    expected = plan_llm("meta-llama/Llama-3.1-70B-Instruct", 60, input_len=1024, output_len=256, gpus=["h100-sxm"],
                        batches=[1, 8], tp=[2, 4]).to_json()
    assert response.json() == expected and expected["tp"] == [2, 4]
    assert sorted(e["gpus"] for e in expected["plan"]) == [2, 4]
    for tp in ([2, 0], 0):
        response = client.post("/v1/plan", json={**body, "tp": tp})
        assert response.status_code == 422 and response.json()["detail"].startswith("tp"), response.json()


def test_true_or_false_is_not_a_number(client):
    """JSON's true was read as 1 by pydantic's lax mode: a batch of 1, a price of 1 USD an hour; the CLI and the API
    refuse a boolean batch. `values` and `llm` take booleans."""
    for body, field in (({"model": "resnet18.onnx", "gpu": "a10g", "batch": True}, "batch"),
                        ({"model": "resnet18.onnx", "gpus": ["a10g"], "shapes": {"input": [True, 3, 224, 224]}}, "shapes"),
                        ({"model": "resnet18.onnx", "slo_ms": 50, "batches": [1, True]}, "batches"),
                        ({"model": "resnet18.onnx", "slo_ms": True}, "slo_ms"),
                        ({"model": "resnet18.onnx", "slo_ms": 50, "prices": {"a10g": True}}, "prices")):
        route = "/v1/predict" if "gpu" in body else "/v1/rank" if "gpus" in body else "/v1/plan"
        response = client.post(route, json=body)
        assert (response.status_code, response.json()) == (422, {
            "detail": f"{field}: true/false where a number or a name is expected"}), (body, response.text)
    response = client.post("/v1/llm", json={"model": "llama-3.1-8b", "gpu": "a10g", "batch": False, "input_len": 8,
                                            "output_len": 8})
    assert response.status_code == 422 and response.json()["detail"].startswith("batch: true/false")
    response = client.post("/v1/predict", json={"model": "resnet18.onnx", "gpu": "a10g", "values": {"flag": [True]}})
    assert response.status_code != 422 or not response.json()["detail"].startswith("values: true/false")


def test_rank_body_is_the_cli_list_and_warnings_travel_in_a_header(client, models_root, predictor):
    gpus = ["a10g", "t4", "a100-80gb/1g.10gb", "h100-sxm"]
    response = client.post("/v1/rank", json={"model": "sub/copy.onnx", "gpus": gpus})
    assert response.status_code == 200, response.text
    ranking = predictor.rank(models_root / "sub" / "copy.onnx", gpus=gpus)
    assert response.json() == ranking.to_json()
    assert [e["gpu"] for e in response.json()] == [e.gpu for e in ranking]
    assert json.loads(response.headers["Lilou-Warnings"]) == ranking.warnings
    # the same list as a comma-separated form field
    upload = client.post("/v1/rank", files=_upload(), data={"gpus": ",".join(gpus)})
    assert upload.json() == response.json()


def test_precision_paths_travel_in_predict_rank_and_plan_bodies(client, predictor):
    """/v1/predict, /v1/rank and /v1/plan carry precision_path as the CLI does (audit ua44b, finding 1): a P100 runs
    no INT8 (no_runtime), a T4 does; FP8 on an A100 is weight-only and on a T4 runs nowhere, so a plan leaves it out."""
    qdq = REPO / "tests" / "data" / "quantized" / "resnet-qdq.onnx"
    response = client.post("/v1/rank", files=_upload(qdq, "resnet-qdq.onnx"), data={"gpus": "p100-pcie-16gb,t4"})
    assert response.status_code == 200, response.text
    rows = {row["gpu"]: row for row in response.json()}
    assert (rows["p100-pcie-16gb"]["precision_path"], rows["t4"]["precision_path"]) == ("no_runtime", "native")
    assert rows["p100-pcie-16gb"]["precision_note"] == ("no INT8 path on p100-pcie-16gb (no INT8 tensor cores, no "
                                                        "DP4A): a lower bound")
    assert response.json() == predictor.rank(qdq, gpus=["p100-pcie-16gb", "t4"]).to_json()
    single = client.post("/v1/predict", files=_upload(qdq, "resnet-qdq.onnx"), data={"gpu": "p100-pcie-16gb"}).json()
    assert (single["precision_path"], single["precision_note"]) == ("no_runtime", rows["p100-pcie-16gb"]["precision_note"])
    from lilou.serve.service import has_plan

    if not has_plan():
        return
    bert = REPO / "tests" / "data" / "quantized" / "bert.onnx"
    plan = client.post("/v1/plan", files=_upload(bert, "bert.onnx"),
                       data={"slo_ms": "2000", "gpus": "t4,a100-sxm4-80gb", "batches": "1", "precision": "fp8"})
    assert plan.status_code == 200, plan.text
    assert [(e["device"], e["precision_path"]) for e in plan.json()["plan"]] == [("a100-sxm4-80gb", "weight_only")]
    assert [(u["device"], u["precision_path"]) for u in plan.json()["unmet"]] == [("t4", "no_runtime")]
    assert plan.json()["unmet"][0]["reason"].startswith("precision: no known runtime runs FP8 GEMMs on t4")


def test_rank_every_device_by_default(client, predictor):
    response = client.post("/v1/rank", files=_upload())
    assert response.status_code == 200
    assert response.json() == predictor.rank(RESNET18).to_json()


def test_second_request_for_the_same_bytes_skips_the_graph_work(client, models_root):
    """Uploads of the same bytes share an entry whatever their names; a --models-root file is its own entry, since
    the external data beside it (an upload has none) can change its shapes (before session 36 the two shared one,
    and whichever came first set the other's result)."""
    data = (models_root / "resnet18-doc.onnx").read_bytes()
    before = client.get("/v1/healthz").json()["cache"]
    first = client.post("/v1/predict", files={"file": ("first.onnx", data)}, data={"gpu": "a10g"})
    middle = client.get("/v1/healthz").json()["cache"]
    second = client.post("/v1/predict", files={"file": ("renamed.onnx", data)}, data={"gpu": "l4"})
    after = client.get("/v1/healthz").json()["cache"]
    assert first.status_code == second.status_code == 200
    assert middle["misses"] == before["misses"] + 1 and middle["entries"] == before["entries"] + 1
    assert after["misses"] == middle["misses"] and after["hits"] == middle["hits"] + 1
    groupings = client.get("/v1/healthz").json()["kernel_groupings"]
    assert groupings["entries"] >= 1 and groupings["hits"] >= 1
    assert second.json()["model"] == "renamed.onnx" and second.json()["gpu"] == "l4"
    rooted = client.post("/v1/predict", json={"model": "resnet18-doc.onnx", "gpu": "l4"})
    last = client.get("/v1/healthz").json()["cache"]
    assert rooted.status_code == 200 and last["misses"] == after["misses"] + 1
    assert {**rooted.json(), "model": "renamed.onnx"} == second.json()  # no external data here: the same result


def test_cached_graph_is_grouped_into_kernels_once(monkeypatch, predictor):
    """The fusion model runs once per cached graph, and the predictions equal the plain API's."""
    import lilou.fusion.predict as fusion
    from lilou.serve.schemas import PredictRequest, RankRequest
    from lilou.serve.service import Service, Settings
    from lilou.serve.uploads import ModelSource

    calls = []
    original = fusion.predict_partition
    monkeypatch.setattr(fusion, "predict_partition", lambda *a, **k: calls.append(1) or original(*a, **k))
    service = Service(Settings())
    source = ModelSource(path=RESNET18, sha256="resnet18-bytes", name="resnet18.onnx")
    try:
        first = service.predict(PredictRequest(gpu="a10g"), source)
        second = service.predict(PredictRequest(gpu="t4", tf32="off"), source)
        entries, warnings = service.rank(RankRequest(gpus=["a10g", "l4"]), source)
    finally:
        service.shutdown()
    assert len(calls) == 1
    assert service.stats()["kernel_groupings"] == {"entries": 1, "hits": 2, "misses": 1}
    assert first == _expected(predictor.predict(RESNET18, gpu="a10g").to_json(), "resnet18.onnx")
    assert second == _expected(predictor.predict(RESNET18, gpu="t4", tf32="off").to_json(), "resnet18.onnx")
    ranking = predictor.rank(RESNET18, gpus=["a10g", "l4"])
    assert (entries, warnings) == (ranking.to_json(), ranking.warnings)


def test_cache_holds_prepared_models_per_backend_and_batch(monkeypatch, zoo_onnx):
    """Each backend and each batch of the same bytes is its own prepared model; the names are the request's."""
    import lilou.fusion.predict as fusion
    from lilou.api import Predictor, PreparedModel
    from lilou.serve.schemas import PredictRequest, RankRequest
    from lilou.serve.service import Service, Settings
    from lilou.serve.uploads import ModelSource

    dynamic = zoo_onnx("resnet18", batch=1, dynamic_batch=True)
    calls = []
    original = fusion.predict_partition
    monkeypatch.setattr(fusion, "predict_partition", lambda *a, **k: calls.append(a[1]) or original(*a, **k))
    service = Service(Settings())
    first = ModelSource(path=dynamic, sha256="resnet18-dynamic", name="a.onnx")
    again = ModelSource(path=dynamic, sha256="resnet18-dynamic", name="b.onnx")
    try:
        eager = service.predict(PredictRequest(gpu="a10g", batch=2), first)
        tvm = service.predict(PredictRequest(gpu="a10g", batch=2, backend="tvm"), again)
        four = service.rank(RankRequest(gpus=["a10g"], batch=4), again)
        cached = service.prepared(first, 2, {}, "eager")
    finally:
        service.shutdown()
    assert calls == ["eager", "tvm", "eager"]
    assert {k: v for k, v in service.stats()["cache"].items() if "bytes" not in k} == {
        "entries": 3, "capacity": 64, "hits": 1, "misses": 3}
    assert isinstance(cached, PreparedModel) and (cached.name, cached.batch, cached.backend) == ("a.onnx", 2, "eager")
    expected = Predictor().predict(dynamic, gpu="a10g", batch=2).to_json()
    assert eager == {**expected, "model": "a.onnx"} and eager["batch"] == 2
    assert tvm == {**Predictor(backend="tvm").predict(dynamic, gpu="a10g", batch=2).to_json(), "model": "b.onnx"}
    assert tvm["backend"] == "tvm" and tvm["latency_ms"] != eager["latency_ms"]
    assert four[0] == Predictor().rank(dynamic, gpus=["a10g"], batch=4).to_json()


def test_plan_uses_one_cached_model_per_batch(monkeypatch, zoo_onnx, predictor):
    """A second plan of the same bytes runs no fusion model, and equals the CLI's plan; /v1/predict at a
    batch the plan tried finds it cached."""
    from lilou.serve.service import has_plan

    if not has_plan():
        pytest.skip("lilou.plan is not installed: /v1/plan is not offered")
    import lilou.fusion.predict as fusion
    from lilou.plan import plan_model
    from lilou.serve.schemas import PlanRequest, PredictRequest
    from lilou.serve.service import Service, Settings
    from lilou.serve.uploads import ModelSource

    dynamic = zoo_onnx("resnet18", batch=1, dynamic_batch=True)
    calls = []
    original = fusion.predict_partition
    monkeypatch.setattr(fusion, "predict_partition", lambda *a, **k: calls.append(a[1]) or original(*a, **k))
    service = Service(Settings())
    source = ModelSource(path=dynamic, sha256="resnet18-dynamic", name="r18.onnx")
    request = PlanRequest(slo_ms=30, gpus=["a10g", "t4", "a100-80gb/1g.10gb"], batches=[1, 2, 4])
    try:
        first = service.plan(request, dynamic, source)
        assert (len(calls), service.stats()["cache"]["misses"], service.stats()["cache"]["hits"]) == (3, 3, 0)
        second = service.plan(request, dynamic, source)
        predicted = service.predict(PredictRequest(gpu="l4", batch=2), source)
    finally:
        service.shutdown()
    assert len(calls) == 3 and {k: v for k, v in service.stats()["cache"].items() if "bytes" not in k} == {
        "entries": 3, "capacity": 64, "hits": 4, "misses": 3}
    expected = plan_model(dynamic, 30, gpus=request.gpus, batches=[1, 2, 4], predictor=predictor).to_json()
    assert first == second == {**expected, "model": "r18.onnx"} and first["batches"] == [1, 2, 4]
    assert predicted == {**predictor.predict(dynamic, gpu="l4", batch=2).to_json(), "model": "r18.onnx"}


def test_plan_reads_a_file_three_times_and_groups_each_batch(graph_work, zoo_onnx, predictor):
    """A plan's uncached batches are read through one BatchSeries: 3 reads for 5 batches, each graph grouped into
    kernels on its own (the cache is shared with /v1/predict), and the plan equals the CLI's."""
    from lilou.serve.service import has_plan

    if not has_plan():
        pytest.skip("lilou.plan is not installed: /v1/plan is not offered")
    from lilou.plan import plan_model
    from lilou.serve.schemas import PlanRequest
    from lilou.serve.service import Service, Settings
    from lilou.serve.uploads import ModelSource

    dynamic = zoo_onnx("resnet18", batch=1, dynamic_batch=True)
    service = Service(Settings())
    request = PlanRequest(slo_ms=1000, gpus=["a10g", "t4"], batches=[1, 2, 4, 8, 16])
    try:
        result = service.plan(request, dynamic, ModelSource(path=dynamic, sha256="r18-series", name="r18.onnx"))
    finally:
        service.shutdown()
    assert graph_work == {"load": 3, "fuse": 5} and result["batches"] == [1, 2, 4, 8, 16]
    expected = plan_model(dynamic, 1000, gpus=request.gpus, batches=request.batches, predictor=predictor).to_json()
    assert result == {**expected, "model": "r18.onnx"}


def test_upload_folders_are_removed(client, upload_tmp):
    assert client.post("/v1/predict", files=_upload(), data={"gpu": "a10g"}).status_code == 200
    assert client.post("/v1/predict", files=_upload(), data={"gpu": "nope"}).status_code == 400
    deadline = time.monotonic() + 5
    while list(upload_tmp.glob("lilou-upload-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(upload_tmp.glob("lilou-upload-*")) == []


def test_llm_endpoint_is_the_cli_object(client, predictor):
    from lilou.serve.service import has_llm

    if not has_llm():
        pytest.skip("lilou.llm is not installed: /v1/llm is not offered")
    from lilou.llm import LLMPredictor, builtin_models

    assert client.get("/v1/llm/models").json() == list(builtin_models())
    name = "meta-llama/Llama-2-7b-hf" if "meta-llama/Llama-2-7b-hf" in builtin_models() else builtin_models()[0]
    request = {"model": name, "gpu": "a100-80gb", "batch": 4, "input_len": 512, "output_len": 128}
    response = client.post("/v1/llm", json=request)
    assert response.status_code == 200, response.text
    expected = LLMPredictor(predictor).predict(name, "a100-80gb", batch=4, input_len=512, output_len=128).to_json()
    assert response.json() == json.loads(json.dumps(expected))
    missing = client.post("/v1/llm", json={"model": name, "gpu": "a100-80gb", "input_len": 512})
    assert missing.status_code == 422 and missing.json() == {"detail": "output_len: Field required"}
    # a name that is neither built in nor a file: the CLI's line with close names (400), not "no such file" (404)
    unknown = client.post("/v1/llm", json={**request, "model": "no/such-llm"})
    assert unknown.status_code == 400 and unknown.json()["detail"].startswith("unknown LLM 'no/such-llm'")
    close = client.post("/v1/llm", json={**request, "model": "llama-3"})
    assert close.status_code == 400 and "did you mean meta-llama/Llama-3" in close.json()["detail"]
    missing_file = client.post("/v1/llm", json={**request, "model": "configs/config.json"})
    assert missing_file.status_code == 404
    # a name as `lilou llm` takes it: any case, no organisation, a base name for its only fine-tune architecture
    short = client.post("/v1/llm", json={**request, "model": "llama-3.1-8b"})
    assert short.status_code == 200 and short.json()["model"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_plan_endpoint_is_the_cli_object(client, models_root, predictor):
    from lilou.serve.service import has_plan

    if not has_plan():
        pytest.skip("lilou.plan is not installed: /v1/plan is not offered")
    from lilou.plan import plan_model, read_prices

    prices_csv = models_root.parent / "prices.csv"
    prices_csv.write_text("device,usd_per_hour\na10g,1.01\nt4,0.53\n")
    request = {"model": "resnet18.onnx", "slo_ms": 5, "gpus": ["a10g", "t4", "h100-sxm"], "batches": [1],
               "prices": {"a10g": 1.01, "t4": 0.53}}
    response = client.post("/v1/plan", json=request)
    assert response.status_code == 200, response.text
    expected = plan_model(models_root / "resnet18.onnx", 5, gpus=request["gpus"], batches=[1],
                          prices=read_prices(prices_csv), predictor=predictor).to_json()
    assert response.json() == json.loads(json.dumps({**expected, "model": "resnet18.onnx"}))
    as_csv = client.post("/v1/plan", json={**request, "prices": prices_csv.read_text()})
    assert as_csv.json() == response.json()
    form = {"slo_ms": "5", "gpus": "a10g,t4,h100-sxm", "batches": "1"}
    uploaded = client.post("/v1/plan", data=form, files={**_upload(), "prices": ("prices.csv", prices_csv.read_bytes())})
    assert uploaded.status_code == 200, uploaded.text
    assert uploaded.json() == response.json()
    bad = client.post("/v1/plan", json={**request, "prices": "device,usd_per_hour\na10g,-1\n"})
    assert bad.status_code == 400 and bad.json()["detail"] == "prices line 2: price '-1' must be a positive number"
    no_slo = client.post("/v1/plan", json={"model": "resnet18.onnx"})
    assert no_slo.status_code == 422


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize(("model", "status", "detail"), [
    ("../resnet18.onnx", 400, "model '../resnet18.onnx': refused, it leads outside --models-root (no '..' or "
                              "symbolic links out of it)"),
    ("escape.onnx", 400, "model 'escape.onnx': refused, it leads outside --models-root (no '..' or symbolic "
                         "links out of it)"),
    ("out/secret.onnx", 400, "model 'out/secret.onnx': refused, it leads outside --models-root (no '..' or "
                             "symbolic links out of it)"),
    ("/etc/passwd", 400, "model '/etc/passwd': an absolute path; name a file relative to --models-root"),
    ("missing.onnx", 404, "model 'missing.onnx': no such file under --models-root"),
    ("sub", 400, "model 'sub': not a regular file"),
])
def test_models_root_is_the_only_folder_served(client, model, status, detail):
    response = client.post("/v1/predict", json={"model": model, "gpu": "a10g"})
    assert (response.status_code, response.json()) == (status, {"detail": detail})


def test_bad_input_gets_the_cli_line(client, models_root, predictor):
    with pytest.raises(LilouInputError) as unknown:
        predictor.predict(RESNET18, gpu="no-such-gpu")
    response = client.post("/v1/predict", json={"model": "resnet18.onnx", "gpu": "no-such-gpu"})
    assert (response.status_code, response.json()) == (400, {"detail": str(unknown.value)})

    with pytest.raises(LilouInputError) as broken:
        predictor.predict(models_root / "broken.onnx", gpu="a10g")
    expected = str(broken.value).replace(str(models_root / "broken.onnx"), "bad.onnx")
    response = client.post("/v1/predict", files=_upload(models_root / "broken.onnx", "bad.onnx"), data={"gpu": "a10g"})
    assert (response.status_code, response.json()) == (400, {"detail": expected})
    assert "/" not in response.json()["detail"].split(" is not")[0]   # no server path in the message

    with pytest.raises(LilouInputError) as batch:
        predictor.predict(RESNET18, gpu="a10g", batch=8)
    response = client.post("/v1/predict", json={"model": "resnet18.onnx", "gpu": "a10g", "batch": 8})
    assert (response.status_code, response.json()) == (400, {"detail": str(batch.value).replace(
        str(RESNET18), "resnet18.onnx")})


@pytest.mark.parametrize(("body", "detail"), [
    ({"model": "resnet18.onnx"}, "gpu: Field required"),
    ({"model": "resnet18.onnx", "gpu": "a10g", "batch": 0}, "batch: Input should be greater than 0"),
    ({"model": "resnet18.onnx", "gpu": "a10g", "precision": "fp64"},
     "precision: Input should be 'fp32', 'tf32', 'fp16', 'bf16', 'fp8', 'int8', 'int4' or 'fp4'"),
    ({"model": "resnet18.onnx", "gpu": "a10g", "gpus": ["t4"]}, "gpus: Extra inputs are not permitted"),
    ({"gpu": "a10g"}, "model: name a file under --models-root, or upload the ONNX file as multipart part 'file'"),
    ({"model": "resnet18.onnx", "gpu": "a10g", "shapes": {"x": [0]}}, "shapes.x.0: Input should be greater than 0"),
])
def test_invalid_fields_are_422_with_one_line(client, body, detail):
    response = client.post("/v1/predict", json=body)
    assert (response.status_code, response.json()) == (422, {"detail": detail})


def test_a_union_field_fails_in_the_client_s_words(client):
    """prices is an object or CSV text: pydantic's error named its member types ('prices.dict[str,constrained-float]
    .a10g', then 'prices: Input should be a valid string' for the text member)."""
    response = client.post("/v1/plan", json={"model": "resnet18.onnx", "slo_ms": 30, "prices": {"a10g": -1}})
    assert (response.status_code, response.json()) == (422, {"detail": "prices.a10g: Input should be greater than 0"})


def test_a_file_under_another_part_name_is_told_where_it_goes(client):
    """`curl -F upload=@model.onnx` read the file as a text field: 'form field 'upload' is longer than 65536 bytes'."""
    response = client.post("/v1/predict", files={"upload": ("r18.onnx", RESNET18.read_bytes())}, data={"gpu": "t4"})
    assert (response.status_code, response.json()) == (422, {
        "detail": "part 'upload' holds a file of more than 65536 bytes; the ONNX file (or config.json) goes in multipart "
                  "part 'file'"})


def test_malformed_requests(client):
    not_json = client.post("/v1/predict", content=b"{not json", headers={"content-type": "application/json"})
    assert not_json.status_code == 422 and not_json.json()["detail"].startswith("the body is not valid JSON")
    a_list = client.post("/v1/rank", json=["resnet18.onnx"])
    assert a_list.status_code == 422
    text = client.post("/v1/predict", content=b"model=resnet18.onnx", headers={"content-type": "text/plain"})
    assert text.status_code == 415 and text.json()["detail"].startswith("unsupported Content-Type 'text/plain'")
    both = client.post("/v1/predict", files=_upload(), data={"gpu": "a10g", "model": "resnet18.onnx"})
    assert (both.status_code, both.json()) == (422, {"detail": "give either an uploaded file (part 'file') or a "
                                                               "model name, not both"})
    assert client.get("/v1/predict").status_code == 405
    assert client.get("/v1/nothing").json() == {"detail": "Not Found"}


def test_upload_over_the_limit_is_413(client):
    big = b"\0" * (MiB + MiB // 2)  # the server runs with --max-upload-mb 1
    declared = client.post("/v1/predict", files={"file": ("big.onnx", big)}, data={"gpu": "a10g"})
    assert declared.status_code == 413
    assert declared.json()["detail"].startswith("request body larger than the server's limit of 1 MiB")

    def chunks():  # no Content-Length: the limit is enforced while the stream is read
        yield b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="big.onnx"\r\n\r\n'
        for _ in range(24):
            yield b"\0" * (64 * 1024)

    streamed = client.post("/v1/predict", content=chunks(),
                           headers={"content-type": "multipart/form-data; boundary=xyz"})
    assert streamed.status_code == 413
    assert client.get("/v1/healthz").status_code == 200


@pytest.mark.parametrize(("body", "detail"), [
    (b'--zzz\r\nContent-Disposition: form-data; name="gpu"\r\n\r\na10g\r\n--zzz--\r\n',
     "malformed multipart body: its parts are not separated by the boundary its Content-Type names ('--b')"),
    (b'--b\r\nbroken header\r\n\r\na10g\r\n--b--\r\n',
     "malformed multipart body: a part's headers are not 'Name: value' lines"),
    (b'--b\r\nContent-Disposition: form-data; name="gpu"\r\n\r\na10g',
     "malformed multipart body: it ends before the closing boundary '--b--' (a truncated request)"),
    (b'--b\r\nContent-Disposition: form-data; name="file"; filename="m.onnx"\r\n\r\n\x08\x07',
     "malformed multipart body: the 'file' part ends before the closing boundary '--b--' (a truncated request)"),
])
def test_malformed_multipart_is_said_in_the_client_s_terms(tmp_path, body, detail):
    """The parser's own words were shown ("Expected boundary character 98, got 122 at index 4"), and a body cut
    off inside a field part lost the field silently (then "gpu: Field required")."""
    from lilou.serve.errors import InvalidField
    from lilou.serve.uploads import read_multipart

    async def once():
        yield body

    with pytest.raises(InvalidField) as raised:
        asyncio.run(read_multipart(once(), "multipart/form-data; boundary=b", MiB, temp_root=str(tmp_path)))
    assert str(raised.value) == detail
    assert list(tmp_path.iterdir()) == []


def test_multipart_limit_is_enforced_while_reading(tmp_path):
    """An endless upload stops being read at the limit, and its temporary folder is gone."""
    from lilou.serve.errors import UploadTooLarge
    from lilou.serve.uploads import read_multipart

    sent = 0

    async def endless():
        nonlocal sent
        yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="m.onnx"\r\n\r\n'
        while True:
            sent += 65536
            yield b"\1" * 65536

    with pytest.raises(UploadTooLarge):
        asyncio.run(read_multipart(endless(), "multipart/form-data; boundary=b", 1 * MiB, temp_root=str(tmp_path)))
    assert MiB - 65536 <= sent <= MiB + 65536
    assert list(tmp_path.iterdir()) == []


def test_over_the_time_budget_is_503_while_health_answers(tmp_path):
    with serve("--time-budget-s", "0.001", tmpdir=tmp_path) as base, httpx.Client(base_url=base, timeout=60) as http:
        response = http.post("/v1/predict", files=_upload(), data={"gpu": "a10g"})
        assert response.status_code == 503
        assert response.json() == {"detail": "the prediction did not finish within the server's time budget of "
                                             "0.001 s (the server is busy or the model is very large); retry later"}
        assert response.headers["Retry-After"] == "5"
        assert http.get("/v1/healthz").status_code == 200


def test_a_stalled_upload_is_408_and_its_part_removed(tmp_path):
    """A client that sent half a body and stopped held its connection and temporary folder for ever."""
    import socket

    with serve("--upload-timeout-s", "1", tmpdir=tmp_path) as base:
        port = int(base.rsplit(":", 1)[1])
        head = b'--b\r\nContent-Disposition: form-data; name="file"; filename="m.onnx"\r\n\r\n' + b"\1" * 1000
        with socket.create_connection(("127.0.0.1", port), timeout=30) as stalled:
            stalled.sendall(b"POST /v1/predict?gpu=a10g HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n"
                            b"Content-Type: multipart/form-data; boundary=b\r\n\r\n" + head)
            answer = b""
            while b"}" not in answer:
                chunk = stalled.recv(4096)
                if not chunk:
                    break
                answer += chunk
        status, _, rest = answer.partition(b"\r\n")
        assert status == b"HTTP/1.1 408 Request Timeout"
        assert json.loads(rest.partition(b"\r\n\r\n")[2]) == {"detail": (
            "the request body did not arrive within the server's upload time limit of 1 s (--upload-timeout-s); a "
            "weight-stripped ONNX file is enough for Lilou (lilou zoo export --strip-weights)")}
        with httpx.Client(base_url=base, timeout=60) as http:
            assert http.get("/v1/healthz").status_code == 200
        assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []


def test_internal_errors_are_one_line_without_traceback(monkeypatch):
    from lilou.serve.app import create_app

    app = create_app(None)

    def broken(*args):
        raise ZeroDivisionError("division by zero\n  in a deep frame")

    monkeypatch.setattr(app.state.service, "predict", broken)

    async def call():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return await http.post("/v1/predict", files=_upload(), data={"gpu": "a10g"})

    response = asyncio.run(call())
    assert (response.status_code, response.json()) == (
        500, {"detail": "internal error: ZeroDivisionError: division by zero in a deep frame"})
    app.state.service.shutdown()


def test_no_models_root_means_uploads_only():
    from lilou.serve.uploads import ModelsRoot

    with pytest.raises(LilouInputError, match="started without --models-root"):
        ModelsRoot(None).resolve("resnet18.onnx")


def test_an_unknown_llm_name_without_models_root_is_the_clis_line():
    """Without --models-root an unknown LLM name (a typo on the page) was answered "this server was started without
    --models-root, so it serves no files by name; upload the ONNX file ...": of ONNX files, and no close names."""
    from lilou.serve.service import has_llm

    if not has_llm():
        pytest.skip("lilou.llm is not installed: /v1/llm is not offered")
    from lilou.llm.config import builtin_config
    from lilou.serve.app import create_app

    app = create_app(None)
    request = {"gpu": "a10g", "input_len": 8, "output_len": 8}

    async def call(model: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return await http.post("/v1/llm", json={**request, "model": model})

    try:
        with pytest.raises(LilouInputError) as unknown:
            builtin_config("llama-3.1-8bb")
        response = asyncio.run(call("llama-3.1-8bb"))
        assert (response.status_code, response.json()) == (400, {"detail": str(unknown.value)})
        assert "did you mean " in str(unknown.value) and "meta-llama/Llama-3.1-8B-Instruct" in str(unknown.value)
        response = asyncio.run(call("my-llm/config.json"))   # a file's name: no file is served by name here
        assert (response.status_code, response.json()) == (400, {"detail": (
            "model 'my-llm/config.json': this server was started without --models-root, so it serves no files by "
            "name; upload the file as multipart part 'file'")})
    finally:
        app.state.service.shutdown()


def test_openapi_is_the_committed_contract(client):
    served = client.get("/openapi.json").json()
    committed = json.loads(CONTRACT.read_text())
    # Regenerate after a deliberate API change: .venv/bin/python -m lilou.serve.openapi_doc --write
    assert served["paths"] == committed["paths"]
    assert served["components"] == committed["components"]
    assert {"/v1/predict", "/v1/rank", "/v1/gpus", "/v1/healthz"} <= set(served["paths"])
    body = served["paths"]["/v1/predict"]["post"]["requestBody"]["content"]
    assert set(body) == {"application/json", "multipart/form-data"}
    assert body["multipart/form-data"]["schema"]["required"] == ["file", "gpu"]


def test_page_is_served_with_its_own_assets_only(client):
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    assert "http://" not in page.text and "https://" not in page.text
    for asset in ("/static/app.js", "/static/style.css"):
        response = client.get(asset)
        assert response.status_code == 200 and "http://" not in response.text.replace("http://www.w3.org/2000/svg", "")


def test_service_path_does_not_import_torch():
    code = ("import sys\n"
            "from lilou.serve.app import create_app\n"
            "from lilou.serve.uploads import ModelSource\n"
            "app = create_app(None)\n"
            "service = app.state.service\n"
            "service.warm_up()\n"
            "from lilou.serve.schemas import PredictRequest\n"
            f"source = ModelSource(path=__import__('pathlib').Path({str(RESNET18)!r}), sha256='x', name='r')\n"
            "service.predict(PredictRequest(gpu='a10g'), source)\n"
            "service.shutdown()\n"
            "print('torch' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False"


def test_cli_refuses_bad_options_with_one_line(tmp_path, capsys):
    from lilou.cli import main

    for options, message in ((["--models-root", str(tmp_path / "nowhere")], "is not a directory"),
                             (["--port", "70000"], "--port 70000: not a TCP port"),
                             (["--max-upload-mb", "0"], "--max-upload-mb must be positive"),
                             (["--upload-timeout-s", "0"], "--upload-timeout-s must be positive"),
                             (["--workers", "0"], "--workers and --threads must be at least 1")):
        assert main(["serve", *options]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("lilou: error: ") and message in lines[0]


def test_a_port_in_use_is_one_line_and_exit_2():
    """uvicorn printed five log lines and exited with status 3."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "lilou.cli", "serve", "--port", str(port)], capture_output=True,
                              text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"lilou: error: cannot listen on 127.0.0.1:{port}: Address already in use (is another "
                           "server on that port? give --port another)\n")


# --------------------------------------------------------------------------- one request's error, its own name
def _identity_only(path: Path) -> Path:
    """A valid graph whose only node launches no kernel: preparing it fails with a message naming the model."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="id")], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)


def test_a_waiting_request_s_error_names_its_own_upload(monkeypatch, tmp_path):
    """Bob's upload of the bytes Alice is loading waited for her load, and got her exception: 'alice-secret.onnx: no
    node of the graph launches a GPU kernel' (report ua39a item 1). Each request's error names its own upload."""
    import threading

    import lilou.graph.dag as dag
    from lilou.serve.schemas import PredictRequest, RankRequest
    from lilou.serve.service import Service, Settings
    from lilou.serve.uploads import ModelSource

    sources = {}
    for who in ("alice-secret", "bob"):
        folder = tmp_path / f"lilou-upload-{who}"
        folder.mkdir()
        path = _identity_only(folder / "model.onnx")
        sources[who] = ModelSource(path=path, sha256="same-bytes", name=f"{who}.onnx", temp_dir=folder)
    release = threading.Event()
    original = dag.load_graph
    monkeypatch.setattr(dag, "load_graph", lambda *a, **k: release.wait(60) and original(*a, **k))
    service = Service(Settings())
    errors: dict[str, BaseException] = {}

    def call(who: str, request) -> None:
        try:
            (service.predict if isinstance(request, PredictRequest) else service.rank)(request, sources[who])
        except BaseException as exc:  # noqa: BLE001 - kept for the assertions
            errors[who] = exc

    try:
        alice = threading.Thread(target=call, args=("alice-secret", PredictRequest(gpu="t4")))
        alice.start()
        _wait_for(lambda: service.cache.stats()["misses"] == 1, "Alice's load started")
        bob = threading.Thread(target=call, args=("bob", RankRequest(gpus=["t4"])))
        bob.start()
        _wait_for(lambda: service.cache.stats()["hits"] == 1, "Bob waits for Alice's load")
        release.set()
        alice.join(60)
        bob.join(60)
    finally:
        release.set()
        service.shutdown()
    tail = ": no node of the graph launches a GPU kernel, so there is no latency to predict"
    assert isinstance(errors["alice-secret"], LilouInputError) and isinstance(errors["bob"], LilouInputError)
    assert str(errors["alice-secret"]).startswith("alice-secret.onnx" + tail)
    assert str(errors["bob"]).startswith("bob.onnx" + tail)
    assert errors["bob"] is not errors["alice-secret"]
    for exc in errors.values():
        assert "lilou-upload-" not in str(exc) and "<model" not in str(exc)


def test_a_waiter_of_a_load_that_failed_internally_loads_for_itself():
    """An internal error's message is the loading request's (a path, a name): a request that waited for that load
    loads the model itself instead of being answered with another request's message."""
    import threading

    from lilou.serve.cache import ModelCache

    cache = ModelCache(4, size_of=len)
    release, results = threading.Event(), {}

    def failing():
        release.wait(60)
        raise RuntimeError("while reading /tmp/lilou-upload-alice/model.onnx")

    def owner():
        try:
            cache.get(("k",), failing)
        except RuntimeError as exc:
            results["owner"] = str(exc)

    first = threading.Thread(target=owner)
    first.start()
    _wait_for(lambda: cache.stats()["misses"] == 1, "the first load started")
    second = threading.Thread(target=lambda: results.setdefault("waiter", cache.get(("k",), lambda: "bob's model")))
    second.start()
    _wait_for(lambda: cache.stats()["hits"] == 1, "the second request waits")
    release.set()
    first.join(60)
    second.join(60)
    assert results == {"owner": "while reading /tmp/lilou-upload-alice/model.onnx", "waiter": "bob's model"}


# --------------------------------------------------------------------------- deeply nested JSON
def test_deeply_nested_json_is_a_422_line_not_a_recursion_error(client, upload_tmp):
    """100,000 brackets in a body, a form field or a query parameter were a 500 'internal error: RecursionError'
    (report ua39a 5a); the form-field case also left the upload on disk. Nesting is capped at 64 levels."""
    from urllib.parse import quote

    deep = "[" * 100_000 + "]" * 100_000
    body = client.post("/v1/predict", content=f'{{"model": {deep}}}'.encode(),
                       headers={"content-type": "application/json"})
    assert (body.status_code, body.json()) == (422, {
        "detail": "the body is not valid JSON (nested deeper than 64 levels)"})
    field = '{"x": ' + "[" * 5000 + "]" * 5000 + "}"
    form = client.post("/v1/predict", files=_upload(), data={"gpu": "t4", "shapes": field})
    assert (form.status_code, form.json()) == (422, {
        "detail": "shapes: Value error, not a usable JSON object (nested deeper than 64 levels)"})
    prices = client.post("/v1/plan", files=_upload(), data={"slo_ms": "5", "prices": "{" + field[1:]})
    assert prices.status_code == 422 and "nested deeper than 64 levels" in prices.json()["detail"]
    query = client.post(f"/v1/predict?gpu=t4&shapes={quote(field)}", files=_upload())
    assert (query.status_code, query.json()) == (form.status_code, form.json())
    # 64 levels are read (and refused for what they hold, not for their depth); brackets in strings do not count
    def nested(levels: int) -> dict:  # the body and "values" are 2 levels, "x" holds the rest
        return {"model": "resnet18.onnx", "gpu": "t4", "values": {"x": json.loads("[" * (levels - 2) + '"[[[["' +
                                                                                  "]" * (levels - 2))}}

    sixty_four = client.post("/v1/predict", json=nested(64))
    assert sixty_four.status_code == 422 and sixty_four.json()["detail"].startswith("values: input 'x' is given [[[")
    sixty_five = client.post("/v1/predict", json=nested(65))
    assert sixty_five.json() == {"detail": "the body is not valid JSON (nested deeper than 64 levels)"}
    deadline = time.monotonic() + 5
    while list(upload_tmp.glob("lilou-upload-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(upload_tmp.glob("lilou-upload-*")) == []


def test_the_depth_scan_is_linear_in_the_body_s_length(client):
    """The scan for nesting matched a whole string at each quote, and one that never closes was scanned again from
    each of its escaped quotes: 40 kB of \\" took 6 s on the event loop (every request waited), the 1 MiB a JSON
    body may have would have taken an hour (audit ua46). Brackets inside strings still do not count."""
    from lilou.serve.schemas import too_deep

    started = time.monotonic()
    body = client.post("/v1/predict", content=('{"model": "' + '\\"' * 400_000).encode(),
                       headers={"content-type": "application/json"})
    assert (body.status_code, body.json()) == (422, {
        "detail": "the body is not valid JSON (Unterminated string starting at)"})
    field = client.post("/v1/predict", files=_upload(), data={"gpu": "t4", "shapes": '{"x": "' + '\\"' * 30_000})
    assert (field.status_code, field.json()) == (422, {
        "detail": "shapes: Value error, not a JSON object (Unterminated string starting at)"})
    assert time.monotonic() - started < 20
    assert not too_deep('"' + "\\\"" * 500_000) and not too_deep('"' + "[" * 100) and too_deep("[" * 65)
    assert too_deep('["\\\\", ' + "[" * 64 + "]" * 64 + "]") and not too_deep('["\\"[", ' + "[" * 63 + "]" * 63 + "]")


# --------------------------------------------------------------------------- uploads never outlive their request
def test_an_upload_is_removed_whatever_stops_its_request(monkeypatch, tmp_path):
    """parse_request released the upload only on bad input (LilouInputError): a RecursionError in a form field left
    /tmp/lilou-upload-*/model.onnx for ever, up to --max-upload-mb each (report ua39a item 6)."""
    import tempfile

    from lilou.serve.app import create_app
    from lilou.serve.schemas import PredictRequest
    from lilou.serve.uploads import read_multipart

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    app = create_app(None)

    def broken(*args, **kwargs):
        raise RuntimeError("a validator's own bug")

    monkeypatch.setattr(PredictRequest, "model_validate", broken)

    async def call():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return await http.post("/v1/predict", files=_upload(), data={"gpu": "a10g"})

    try:
        response = asyncio.run(call())
    finally:
        app.state.service.shutdown()
    assert (response.status_code, response.json()) == (500, {"detail": "internal error: RuntimeError: a validator's "
                                                                       "own bug"})
    assert list(tmp_path.iterdir()) == []

    async def cancelled():  # a request cancelled while its file arrives (the server shutting down)
        yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="m.onnx"\r\n\r\n' + b"\1" * 1000
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(read_multipart(cancelled(), "multipart/form-data; boundary=b", MiB, temp_root=str(tmp_path)))
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- plan fields, as lilou plan takes them
def test_plan_batch_plans_that_batch_only(client, models_root, predictor, zoo_onnx):
    """`batch` was accepted and ignored: the plan tried 1 ... 128 (report ua39a item 8). `lilou plan --batch 4` plans
    batch 4 only (argparse reads it as --batches 4), and so does batch 4 here."""
    from lilou.plan import plan_model

    dynamic = models_root / "r18-dynamic.onnx"
    shutil.copy(zoo_onnx("resnet18", batch=1, dynamic_batch=True), dynamic)
    response = client.post("/v1/plan", json={"model": dynamic.name, "slo_ms": 5, "batch": 4, "gpus": "a10g"})
    assert response.status_code == 200, response.text
    expected = plan_model(dynamic, 5, gpus=["a10g"], batches=[4], predictor=predictor).to_json()
    assert response.json() == json.loads(json.dumps({**expected, "model": dynamic.name}))
    assert response.json()["batches"] == [4] and response.json()["plan"][0]["batch"] == 4
    same = client.post("/v1/plan", json={"model": dynamic.name, "slo_ms": 5, "batch": 4, "batches": [4],
                                         "gpus": "a10g"})
    assert same.json() == response.json()
    both = client.post("/v1/plan", json={"model": dynamic.name, "slo_ms": 5, "batch": 4, "batches": [8]})
    assert (both.status_code, both.json()) == (422, {
        "detail": "give batch or batches, not both (batch B plans batch B only, as lilou plan --batch B)"})
    from lilou.plan import plan_llm

    llm = client.post("/v1/plan", json={"model": "llama-3.1-8b", "llm": True, "itl_slo_ms": 40, "input_len": 512,
                                        "output_len": 64, "gpus": "a10g", "batch": 8})
    assert llm.status_code == 200, llm.text
    expected = plan_llm("llama-3.1-8b", 40, input_len=512, output_len=64, gpus=["a10g"], batches=[8]).to_json()
    assert llm.json()["plan"] == json.loads(json.dumps(expected["plan"])) and llm.json()["batches"] == [8]


@pytest.mark.parametrize(("fields", "detail"), [
    ({"model": "resnet18.onnx", "slo_ms": 5, "tp": 4, "dtype": "fp8", "engine": "hf", "itl_slo_ms": 3},
     "itl_slo_ms, dtype, tp, engine apply with llm: true (a decoder LLM planned over lilou llm); an ONNX model is "
     "planned with slo_ms, its precision set by precision"),
    ({"model": "resnet18.onnx", "slo_ms": 5, "tp": 1},
     "tp applies with llm: true (a decoder LLM planned over lilou llm); an ONNX model is planned with slo_ms, its "
     "precision set by precision"),
    ({"model": "llama-3.1-8b", "llm": True, "itl_slo_ms": 30, "input_len": 512, "output_len": 64, "precision": "fp32",
      "tf32": "on", "backend": "tvm", "shapes": {"x": [1]}, "slo_ms": 1},
     "slo_ms, shapes, precision, tf32, backend apply to ONNX models; with llm a decoder LLM is planned with "
     "itl_slo_ms, input_len and output_len, its precision set by dtype"),
])
def test_plan_refuses_the_fields_of_the_other_kind_of_plan(client, fields, detail):
    """An ONNX plan with tp 4 answered 200 with one GPU per replica, an LLM plan with precision fp32 was priced in
    BF16 (report ua39a item 8); `lilou plan` refuses --tp ... without --llm."""
    response = client.post("/v1/plan", json=fields)
    assert (response.status_code, response.json()) == (422, {"detail": detail})


# --------------------------------------------------------------------------- the OpenAPI contract says what is sent
def test_response_bodies_fit_their_openapi_schemas(client):
    """LLMBody declared ttft_ms ... as non-null numbers, which a model that does not fit sends as null; /v1/plan's 200
    had no schema (report ua39a item 9). Real bodies, validated strictly by the models the contract is built from."""
    from lilou.serve import openapi_doc as docs

    no_fit = client.post("/v1/llm", json={"model": "llama-3.1-70b", "gpu": "l4", "input_len": 512, "output_len": 64})
    assert no_fit.status_code == 200 and no_fit.json()["memory"]["fits"] is False and no_fit.json()["ttft_ms"] is None
    fits = client.post("/v1/llm", json={"model": "llama-3.1-8b", "gpu": "a100-80gb", "input_len": 512,
                                        "output_len": 64})
    for body in (no_fit.json(), fits.json()):
        docs.LLMBody.model_validate(body, strict=True)
    onnx_plan = client.post("/v1/plan", json={"model": "resnet18.onnx", "slo_ms": 5, "gpus": "a10g,t4", "batches": [1],
                                              "prices": {"a10g": 1.01}})
    # an LLM plan over devices that compute in BF16 and in FP16: precision is the list of both
    llm_plan = client.post("/v1/plan", json={"model": "llama-3.1-8b", "llm": True, "itl_slo_ms": 40, "input_len": 512,
                                             "output_len": 64, "gpus": "a10g,v100-sxm2-32gb", "batches": [1]})
    assert llm_plan.json()["precision"] == ["bf16", "fp16"] and onnx_plan.json()["precision"] == "fp32"
    for body in (onnx_plan.json(), llm_plan.json()):
        docs.PlanBody.model_validate(body, strict=True)
    predicted = client.post("/v1/predict", json={"model": "resnet18.onnx", "gpu": "a10g"}).json()
    docs.PredictionBody.model_validate(predicted, strict=True)
    for entry in client.post("/v1/rank", json={"model": "resnet18.onnx", "gpus": "a10g,m40-24gb"}).json():
        docs.RankEntryBody.model_validate(entry, strict=True)
    served = client.get("/openapi.json").json()
    plan_200 = served["paths"]["/v1/plan"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert plan_200 == {"$ref": "#/components/schemas/PlanBody"}
    llm_body = served["components"]["schemas"]["LLMBody"]["properties"]
    assert llm_body["ttft_ms"]["anyOf"] == [{"type": "number"}, {"type": "null"}]


def test_request_schemas_say_what_is_required_and_what_a_form_can_send(client):
    """`model` was optional in every JSON schema although a JSON request without it is always a 422; the form
    schemas declared fields nullable that a form cannot send as null (report ua39a item 9)."""
    served = client.get("/openapi.json").json()
    for path in ("/v1/predict", "/v1/rank", "/v1/plan", "/v1/llm"):
        content = served["paths"][path]["post"]["requestBody"]["content"]
        as_json, form = content["application/json"]["schema"], content["multipart/form-data"]["schema"]
        assert as_json["required"][0] == "model" and as_json["properties"]["model"]["type"] == "string"
        assert "model" not in form["properties"] and form["required"][0] == "file"
        for name, field in form["properties"].items():
            assert {"type": "null"} not in field.get("anyOf", []) and field.get("type") != "null", (path, name)
    precision = served["paths"]["/v1/predict"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"][
        "properties"]["precision"]
    assert precision["enum"] == ["fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4", "fp4"]


# --------------------------------------------------------------------------- memory
def _asgi_post(app, path: str, **kwargs) -> httpx.Response:
    async def call():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return await http.post(path, **kwargs)

    return asyncio.run(call())


def test_a_json_body_is_capped_far_below_the_upload_limit():
    """JSON bodies were read whole and parsed up to --max-upload-mb (256 MiB by default): a 20 MiB list of zeros
    took 120 MB more memory before its 422 (report ua39a item 10). JSON carries options only: 1 MiB."""
    from lilou.serve.app import create_app

    app = create_app(None)   # --max-upload-mb 256
    MAX_JSON_BYTES = MiB  # noqa: N806 - lilou.serve.app's
    detail = ("JSON request body larger than 1024 KiB: a JSON request names its model (under --models-root) and "
              "carries options only; upload an ONNX file as multipart part 'file'")
    try:
        big = json.dumps({"model": "m.onnx", "gpus": [0] * (MAX_JSON_BYTES // 2)}).encode()
        declared = _asgi_post(app, "/v1/rank", content=big, headers={"content-type": "application/json"})
        assert (declared.status_code, declared.json()) == (413, {"detail": detail})

        async def chunks():  # no Content-Length: counted while read
            for start in range(0, len(big), 65536):
                yield big[start:start + 65536]

        streamed = _asgi_post(app, "/v1/rank", content=chunks(), headers={"content-type": "application/json"})
        assert (streamed.status_code, streamed.json()) == (413, {"detail": detail})
        no_type = _asgi_post(app, "/v1/rank?model=m.onnx", content=big)
        assert (no_type.status_code, no_type.json()) == (413, {"detail": detail})
        # just under the cap is read, and answered for what it says
        under = json.dumps({"model": "m.onnx", "gpus": ["t4"] * ((MAX_JSON_BYTES - 100) // 6)}).encode()
        assert len(under) <= MAX_JSON_BYTES
        read = _asgi_post(app, "/v1/rank", content=under, headers={"content-type": "application/json"})
        assert read.status_code == 422 and read.json()["detail"].startswith("gpus: List should have at most 500")
    finally:
        app.state.service.shutdown()


def test_the_model_cache_is_bounded_by_memory_as_well_as_entries():
    """The cache was bounded by entry count only: 64 entries of a 0.6 MB upload of 20,000 nodes (50 MB each held)
    is 3 GB (report ua39a item 10). It now also holds at most --cache-mb, each entry estimated from its node count."""
    from lilou.serve.cache import BYTES_PER_ENTRY, BYTES_PER_NODE, ModelCache
    from lilou.serve.schemas import PredictRequest
    from lilou.serve.service import Service, Settings
    from lilou.serve.uploads import ModelSource

    cache = ModelCache(capacity=64, max_bytes=100, size_of=len)
    for name, size in (("a", 60), ("b", 30)):
        assert cache.get((name,), lambda name=name, size=size: name * size) == name * size
    assert cache.stats()["entries"] == 2 and cache.stats()["bytes"] == 90
    cache.get(("c",), lambda: "c" * 30)   # 120 bytes: the least recently used, a, goes
    assert (cache.stats()["entries"], cache.stats()["bytes"]) == (2, 60)
    assert cache.get(("b",), lambda: "reloaded") == "b" * 30 and cache.get(("a",), lambda: "a again") == "a again"
    assert cache.get(("huge",), lambda: "h" * 101) == "h" * 101   # larger than the whole budget: served, not kept
    assert (cache.stats()["entries"], cache.stats()["bytes"], cache.stats()["misses"]) == (3, 67, 5)

    one = BYTES_PER_ENTRY + BYTES_PER_NODE * 176   # ResNet-18's graph: 176 nodes
    service = Service(Settings(cache_mb=1.5 * one / MiB))
    try:
        for sha in ("first", "second", "third"):
            service.predict(PredictRequest(gpu="a10g"), ModelSource(path=RESNET18, sha256=sha, name="r18.onnx"))
    finally:
        service.shutdown()
    stats = service.stats()["cache"]
    assert (stats["entries"], stats["bytes"], stats["misses"]) == (1, one, 3)


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
@pytest.mark.parametrize(("option", "unit"), [("--max-upload-mb", "MiB"), ("--time-budget-s", "seconds"),
                                              ("--upload-timeout-s", "seconds")])
def test_options_that_are_not_finite_positive_numbers_are_refused(option, unit, value):
    """--max-upload-mb nan started a server whose every POST was a 500 (cannot convert float NaN to integer);
    --time-budget-s nan one whose every POST was a 503, inf one without a budget (report ua39a item 11)."""
    from lilou.serve.app import create_app

    keyword = option[2:].replace("-", "_")
    with pytest.raises(LilouInputError) as refused:
        create_app(None, **{keyword: float(value)})
    assert str(refused.value) == f"{option} must be positive: a finite number of {unit}, not {value}"


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_cache_mb_is_a_finite_number_of_mib(value):
    from lilou.serve.app import create_app

    with pytest.raises(LilouInputError, match=f"^--cache-mb must be a finite number of MiB >= 0, not {value}$"):
        create_app(None, cache_mb=float(value))


def test_lilou_serve_with_a_nan_option_exits_2_with_one_line():
    done = subprocess.run([sys.executable, "-m", "lilou.cli", "serve", "--port", "0", "--max-upload-mb", "nan"],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "lilou: error: --max-upload-mb must be positive: a finite number of MiB, not nan\n"


# --------------------------------------------------------------------------- as the CLI takes them
def test_gpus_that_name_nothing_are_refused_as_the_cli_refuses_them(client):
    """`gpus: ",,"` (or an empty form field, as a tool joining an empty selection sends) ranked every device; `lilou
    rank --gpus ,,` and `--gpus ''` refuse it (report ua39a item 15)."""
    detail = "no GPU named; list GPUs like --gpus a10g,t4,a100-80gb/1g.10gb (see `lilou gpus`)"
    for response in (client.post("/v1/rank", json={"model": "resnet18.onnx", "gpus": ",,"}),
                     client.post("/v1/rank", json={"model": "resnet18.onnx", "gpus": ""}),
                     client.post("/v1/rank", files=_upload(), data={"gpus": ""}),
                     client.post("/v1/rank?gpus=,", files=_upload()),
                     client.post("/v1/plan", json={"model": "resnet18.onnx", "slo_ms": 5, "gpus": ",,"})):
        assert (response.status_code, response.json()) == (400, {"detail": detail})


def test_prices_out_of_range_are_refused(client):
    """1e308 made a slice's derived price Infinity, written into the JSON; 1e-320 priced every device at 0.0."""
    request = {"model": "resnet18.onnx", "slo_ms": 30, "gpus": "a100-sxm4-80gb/1g.10gb", "batches": [1]}
    for prices, detail in (({"a100-sxm4-80gb": 1e308}, "prices['a100-sxm4-80gb']: 1e+308 is not a price"),
                           ({"a100-sxm4-80gb": 1e-320}, "prices['a100-sxm4-80gb']: 1e-320 is not a price"),
                           ("device,usd_per_hour\na100-sxm4-80gb,1e308\n", "prices line 2: price '1e308' is not a price")):
        response = client.post("/v1/plan", json={**request, "prices": prices})
        assert (response.status_code, response.json()) == (
            400, {"detail": f"{detail} from 0.000001 to 1000000 USD per hour"}), prices


def test_a_note_of_csv_prices_names_its_line_as_errors_do(client):
    """A family's name in the CSV text of a request is noted with its line, as a bad line is refused with its line
    (the notes said "prices:" alone, the errors "prices line 3:"; audit ua46)."""
    response = client.post("/v1/plan", json={"model": "resnet18.onnx", "slo_ms": 30, "gpus": "a10g", "batches": [1],
                                             "prices": "device,usd_per_hour\na10g,1.0\na100,2.0\n"})
    assert response.status_code == 200, response.text
    assert "prices line 3: GPU name 'a100' is ambiguous; using a100-sxm4-40gb (other matches: a100-pcie-40gb, " \
           "a100-pcie-80gb, a100-sxm4-80gb); pass the full name to choose" in response.json()["warnings"]


def test_a_prices_key_cannot_price_another_device(client):
    """A key was pasted into CSV text: {"a10g,5\\nt4": 0.5} priced t4 at 0.5 and a10g at 5 (report ua39a item 13).
    Each pair is checked as it is, as the Python API checks a prices mapping."""
    injected = client.post("/v1/plan", json={"model": "resnet18.onnx", "slo_ms": 5, "gpus": "a10g,t4", "batches": [1],
                                             "prices": {"a10g,5\nt4": 0.5}})
    assert injected.status_code == 400 and injected.json()["detail"].startswith("prices: unknown GPU 'a10g,5 t4'")
    twice = client.post("/v1/plan", json={"model": "resnet18.onnx", "slo_ms": 5, "batches": [1],
                                          "prices": {"a10g": 1.0, "A10G": 2.0}})
    assert (twice.status_code, twice.json()) == (400, {"detail": "prices: a10g is priced twice"})


def test_a_second_plan_skips_the_batches_a_fixed_batch_file_refused(graph_work):
    """Batches the file cannot take are remembered per bytes: a plan of a file that fixes its batch at 1 read the
    graph again for batches 2 to 128 on every request (~24 s for TinyLlama), so a retry after a 503 never got
    faster. The second plan reads nothing, and says the same."""
    from lilou.serve.service import has_plan

    if not has_plan():
        pytest.skip("lilou.plan is not installed: /v1/plan is not offered")
    from lilou.serve.schemas import PlanRequest, PredictRequest
    from lilou.serve.service import Service, Settings
    from lilou.serve.uploads import ModelSource

    service = Service(Settings())
    source = ModelSource(path=RESNET18, sha256="resnet18-fixed", name="r18.onnx")
    request = PlanRequest(slo_ms=1000, gpus=["a10g", "t4"], batches=[1, 2, 4, 8])
    try:
        first = service.plan(request, RESNET18, source)
        reads = graph_work["load"]
        second = service.plan(request, RESNET18, source)
        assert graph_work["load"] == reads, "the second plan read the graph again for the refused batches"
        with pytest.raises(LilouInputError, match="fixed shapes") as refused:
            service.predict(PredictRequest(gpu="a10g", batch=4), source)
        assert graph_work["load"] == reads
    finally:
        service.shutdown()
    assert first == second and first["batches"] == [1] and "<model" not in str(refused.value)
    assert any("skipped" in warning for warning in first["warnings"])


MIXTRAL = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
           "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
           "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000, "max_position_embeddings": 32768,
           "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def test_an_uploaded_config_is_named_as_the_cli_names_the_file(client, predictor, tmp_path):
    """An uploaded config.json was saved as model.json, so its errors and warnings said "model" ("model has mamba
    layers") and its "model" was "config.json" whatever the folder. Now: the CLI's name for the client's file, its
    stem, or for a config.json the folder the file name gives."""
    from lilou.serve.service import has_llm

    if not has_llm():
        pytest.skip("lilou.llm is not installed: /v1/llm is not offered")
    from lilou.llm import LLMPredictor

    llm = LLMPredictor(predictor)
    mamba = tmp_path / "mamba-2.8b-config.json"
    mamba.write_text(json.dumps({"architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 2560,
                                 "num_hidden_layers": 64, "vocab_size": 50280, "state_size": 16, "expand": 2}))
    fields = {"gpu": "b200", "input_len": "40000", "output_len": "10"}
    response = client.post("/v1/llm", files={"file": (mamba.name, mamba.read_bytes())}, data=fields)
    with pytest.raises(LilouInputError) as cli:
        llm.predict(mamba, "b200", input_len=40000, output_len=10)
    assert response.status_code == 400 and response.json()["detail"] == str(cli.value)
    assert response.json()["detail"].startswith("mamba-2.8b-config has mamba layers")

    folder = tmp_path / "Mixtral-8x7B-v0.1"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(MIXTRAL))
    (tmp_path / "mixtral.json").write_text(json.dumps(MIXTRAL))
    data = json.dumps(MIXTRAL).encode()
    for filename, path, name in (("Mixtral-8x7B-v0.1/config.json", folder / "config.json", "Mixtral-8x7B-v0.1"),
                                 ("mixtral.json", tmp_path / "mixtral.json", "mixtral"),
                                 ("config.json", None, "config")):
        response = client.post("/v1/llm", files={"file": (filename, data)}, data=fields)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["model"] == name
        assert any(f"{name}'s 32768" in warning for warning in body["warnings"]), body["warnings"]
        if path is not None:  # the CLI's object for the same file
            assert body == json.loads(json.dumps(llm.predict(path, "b200", input_len=40000,
                                                             output_len=10).to_json()))
    tp = client.post("/v1/llm", files={"file": ("mixtral.json", data)}, data={**fields, "tp": "3"})
    assert tp.status_code == 400 and tp.json()["detail"].endswith("attention heads of mixtral"), tp.text


def test_a_gpu_name_of_many_kilobytes_is_refused_at_once(client):
    """/v1/rank's gpus (and plan's prices) took names of any length: one of 40 kB took 11 s to refuse and froze the
    whole service meanwhile (/v1/healthz waited 8 s: the regular expression for a name that holds a MIG slice
    backtracks quadratically, holding Python's lock), and a 1 MiB body would have for hours (audit ua46)."""
    line = ("GPU name '" + "-" * 40 + "'... has 40,000 characters; a GPU or MIG profile name has at most 200 "
            "(`lilou gpus` lists the known GPUs)")
    started = time.monotonic()
    rank = client.post("/v1/rank", json={"model": "resnet18.onnx", "gpus": ["t4", "-" * 40_000]})
    assert (rank.status_code, rank.json()) == (400, {"detail": line})
    from lilou.serve.service import has_plan

    if has_plan():
        plan = client.post("/v1/plan", json={"model": "resnet18.onnx", "slo_ms": 5, "prices": {"-" * 40_000: 1.0}})
        assert (plan.status_code, plan.json()) == (400, {"detail": f"prices: {line}"})
    assert time.monotonic() - started < 30  # 22 s of the service's CPU before, on an idle machine


def test_an_upload_keeps_the_letters_of_its_name_in_any_script(client):
    """Only ASCII letters and digits were kept of an upload's file name: "モデル.onnx" was shown as "onnx" (every
    Japanese or Chinese name alike) and "modèle v2.onnx" as "mod_le_v2.onnx" (audit ua46). Letters and digits of any
    script are kept now; spaces, punctuation and format characters (a right-to-left override) still become "_", and a
    config's name, a folder on disk, is cut to 200 bytes of UTF-8 (600 for 200 Japanese characters was over the
    255 a folder's name may take)."""
    data = RESNET18.read_bytes()
    for filename, name in (("モデル.onnx", "モデル.onnx"), ("modèle v2.onnx", "modèle_v2.onnx"),
                           ("../../résnet-18_β.onnx", "résnet-18_β.onnx"), ("a\u202egnp.onnx", "a_gnp.onnx"),
                           ("resnet18.onnx", "resnet18.onnx")):
        response = client.post("/v1/predict", files={"file": (filename, data)}, data={"gpu": "a10g"})
        assert response.status_code == 200, response.text
        assert response.json()["model"] == name
    from lilou.serve.service import has_llm

    if not has_llm():
        return
    config = json.dumps(MIXTRAL).encode()
    fields = {"gpu": "b200", "input_len": "40000", "output_len": "10"}
    for filename, name in (("モデル/config.json", "モデル"), ("モ" * 300 + ".json", "モ" * 66)):
        response = client.post("/v1/llm", files={"file": (filename, config)}, data=fields)
        assert response.status_code == 200, response.text
        assert response.json()["model"] == name
        assert any(f"{name}'s 32768" in warning for warning in response.json()["warnings"])


def test_a_built_in_llm_is_never_read_from_the_server_s_working_folder(monkeypatch, tmp_path):
    """"llama-3.1-8b" resolves to "meta-llama/Llama-3.1-8B-Instruct", which lilou.llm read as a path relative to the
    server's working folder where one exists: a server started beside a folder of that name (a snapshot downloaded to
    org/name) served that folder's config.json, outside --models-root (weights 0.04 GB for 14.96; audit ua46)."""
    from lilou.serve.service import Service, Settings, has_llm, has_plan

    if not (has_llm() and has_plan()):
        pytest.skip("lilou.llm or lilou.plan is not installed")
    from lilou.llm import LLMPredictor
    from lilou.plan import plan_llm
    from lilou.serve.schemas import LLMRequest, PlanRequest

    name = "meta-llama/Llama-3.1-8B-Instruct"
    expected = LLMPredictor().predict(name, "h100-sxm", input_len=64, output_len=8).to_json()
    planned = plan_llm(name, 40, input_len=64, output_len=8, gpus=["h100-sxm"], batches=[1]).to_json()
    decoy = tmp_path / name
    decoy.mkdir(parents=True)
    (decoy / "config.json").write_text(json.dumps({**MIXTRAL, "num_hidden_layers": 2, "num_local_experts": 2}))
    monkeypatch.chdir(tmp_path)
    assert LLMPredictor().predict(name, "h100-sxm", input_len=64, output_len=8).model == "Llama-3.1-8B-Instruct"  # CLI
    service = Service(Settings())
    try:
        served = service.llm(LLMRequest(gpu="h100-sxm", input_len=64, output_len=8), name, None)
        plan = service.plan(PlanRequest(llm=True, itl_slo_ms=40, input_len=64, output_len=8, gpus=["h100-sxm"],
                                        batches=[1]), name, None)
    finally:
        service.shutdown()
    assert served == expected and served["memory"]["weights_gb"] > 14
    assert plan == planned


def test_an_uploaded_config_is_named_in_an_llm_plan_as_in_llm(client, tmp_path):
    """An LLM plan of an uploaded config.json was named by the upload's file name ("config.json", "mixtral.json")
    while its warnings and errors, and /v1/llm for the same upload, named it "Mixtral-8x7B-v0.1" and "mixtral" (audit
    ua46). The rest of the body is lilou plan --llm's for the same file."""
    from lilou.serve.service import has_llm, has_plan

    if not (has_llm() and has_plan()):
        pytest.skip("lilou.llm or lilou.plan is not installed")
    from lilou.plan import plan_llm

    folder = tmp_path / "Mixtral-8x7B-v0.1"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(MIXTRAL))
    data = json.dumps(MIXTRAL).encode()
    fields = {"llm": "true", "itl_slo_ms": "50", "input_len": "40000", "output_len": "10", "gpus": "b200",
              "batches": "1"}
    expected = json.loads(json.dumps(plan_llm(folder / "config.json", 50, input_len=40000, output_len=10,
                                              gpus=["b200"], batches=[1]).to_json()))
    for filename, name in (("Mixtral-8x7B-v0.1/config.json", "Mixtral-8x7B-v0.1"), ("mixtral.json", "mixtral"),
                           ("config.json", "config")):
        plan = client.post("/v1/plan", files={"file": (filename, data)}, data=fields)
        assert plan.status_code == 200, plan.text
        llm = client.post("/v1/llm", files={"file": (filename, data)},
                          data={"gpu": "b200", "input_len": "40000", "output_len": "10"})
        assert plan.json()["model"] == llm.json()["model"] == name
        assert plan.json() == {**expected, "model": name, "warnings": [w.replace("Mixtral-8x7B-v0.1", name)
                                                                       for w in expected["warnings"]]}
        assert any(f"{name}'s 32768" in warning for warning in plan.json()["warnings"]), plan.json()["warnings"]


def test_an_onnx_file_sent_to_llm_is_told_where_it_goes(client):
    from lilou.serve.service import has_llm

    if not has_llm():
        pytest.skip("lilou.llm is not installed: /v1/llm is not offered")
    response = client.post("/v1/llm", files=_upload(), data={"gpu": "h100-sxm", "input_len": "10", "output_len": "10"})
    assert response.status_code == 400
    assert response.json()["detail"].startswith("resnet18.onnx: not a JSON config"), response.text
    assert "/v1/predict" in response.json()["detail"]


def test_names_are_taken_in_any_case_as_the_cli_takes_them(client):
    """lilou infer --precision FP16 works; "precision": "FP16" was a 422 (and tf32, backend, engine likewise)."""
    lower = client.post("/v1/predict", json={"model": "resnet18.onnx", "gpu": "t4", "precision": "fp16",
                                             "tf32": "off", "backend": "eager"})
    upper = client.post("/v1/predict", json={"model": "resnet18.onnx", "gpu": "t4", "precision": "FP16",
                                             "tf32": "Off", "backend": "EAGER"})
    assert lower.status_code == upper.status_code == 200, upper.text
    assert upper.json() == lower.json() and upper.json()["precision"] == "fp16"
    form = client.post("/v1/rank", files=_upload(), data={"gpus": "a10g", "precision": "BF16", "tf32": "ON"})
    assert form.status_code == 200, form.text
    from lilou.serve.service import has_llm

    if has_llm():
        fields = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "input_len": 100, "output_len": 10}
        llm = client.post("/v1/llm", json={**fields, "dtype": "FP8", "kv_dtype": "FP8", "engine": "VLLM"})
        plain = client.post("/v1/llm", json={**fields, "dtype": "fp8", "kv_dtype": "fp8", "engine": "vllm"})
        assert llm.status_code == 200, llm.text
        assert llm.json() == plain.json() and llm.json()["dtype"] == "fp8"


def test_head_answers_on_the_get_routes_and_a_trailing_slash_is_not_redirected(client):
    """HEAD / and HEAD /v1/healthz were 405 (monitors probe with HEAD); "POST /v1/predict/" was a 307 to an absolute
    http:// URL (the wrong scheme behind an HTTPS proxy, and a POST body dropped by many clients)."""
    for path in ("/", "/v1/healthz", "/v1/gpus"):
        head = client.head(path)
        assert head.status_code == 200 and head.content == b"", (path, head.status_code)
    for path in ("/", "/v1/gpus"):  # the GET's length (it said 0, audit ua46); /v1/healthz's counters move between them
        assert int(client.head(path).headers["content-length"]) == len(client.get(path).content) > 1000, path
    assert "text/html" in client.head("/").headers["content-type"]
    for method, path in (("POST", "/v1/predict/"), ("GET", "/v1/healthz/"), ("POST", "/v1/rank/")):
        response = client.request(method, path, json={"model": "resnet18.onnx", "gpu": "t4"})
        assert response.status_code == 404 and "location" not in response.headers, (method, path)


def test_cors_is_off_by_default_and_opt_in_exposes_the_warnings_header(client, models_root, tmp_path):
    """Without --cors-origin a preflight is refused (no Access-Control-* header anywhere); with it, a dashboard on
    that origin may call the API and read Lilou-Warnings. --access-log logs one line per request."""
    preflight = {"Origin": "http://dash.internal", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "content-type"}
    refused = client.options("/v1/rank", headers=preflight)
    assert refused.status_code == 405 and "access-control-allow-origin" not in refused.headers
    with serve("--models-root", str(models_root), "--cors-origin", "http://dash.internal, http://other.internal",
               "--access-log", tmpdir=tmp_path) as base:
        allowed = httpx.options(f"{base}/v1/rank", headers=preflight)
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == "http://dash.internal"
        assert "POST" in allowed.headers["access-control-allow-methods"]
        ranked = httpx.post(f"{base}/v1/rank", json={"model": "resnet18.onnx", "gpus": "a10g,t4"},
                            headers={"Origin": "http://dash.internal"}, timeout=120)
        assert ranked.status_code == 200
        assert ranked.headers["access-control-allow-origin"] == "http://dash.internal"
        assert "lilou-warnings" in ranked.headers["access-control-expose-headers"].lower()
        stranger = httpx.options(f"{base}/v1/rank", headers={**preflight, "Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in stranger.headers
        port = base.rsplit(":", 1)[1]
    log = (tmp_path / f"lilou-serve-{port}.log").read_text()
    assert '"POST /v1/rank HTTP/1.1" 200' in log and '"GET /v1/healthz HTTP/1.1" 200' in log


def test_a_cors_origin_that_is_not_an_origin_is_refused(capsys):
    from lilou.cli import main

    assert main(["serve", "--cors-origin", "dash.internal/path"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--cors-origin 'dash.internal/path'" in lines[0]


def test_structured_json_media_types_are_json_and_a_body_without_a_type_is_told_what_to_send(client):
    """application/vnd.api+json was a 415; a JSON body sent without Content-Type got "unsupported Content-Type ''"."""
    body = json.dumps({"model": "resnet18.onnx", "gpu": "t4"}).encode()
    plain = client.post("/v1/predict", content=body, headers={"content-type": "application/json"})
    for kind in ("application/vnd.api+json", "application/merge-patch+json; charset=utf-8"):
        structured = client.post("/v1/predict", content=body, headers={"content-type": kind})
        assert structured.status_code == 200 and structured.json() == plain.json(), (kind, structured.text)
    untyped = client.post("/v1/predict", content=body)
    assert "content-type" not in untyped.request.headers
    assert untyped.status_code == 415
    assert "Content-Type: application/json" in untyped.json()["detail"], untyped.text


def test_the_openapi_schemas_declare_every_field_the_bodies_carry(client):
    """fits, a kernel's interval_ms and extrapolated, a rank entry's extrapolated_share passed only through
    additionalProperties, and /v1/gpus and /v1/llm/models declared an empty schema (report ua41a nit 5)."""
    from lilou.serve import openapi_doc as docs

    predicted = client.post("/v1/predict", json={"model": "resnet18.onnx", "gpu": "a10g"}).json()
    assert set(predicted) <= set(docs.PredictionBody.model_fields), set(predicted) - set(docs.PredictionBody.model_fields)
    for kernel in predicted["kernels"]:
        assert set(kernel) <= set(docs.KernelBody.model_fields), set(kernel) - set(docs.KernelBody.model_fields)
    for entry in client.post("/v1/rank", json={"model": "resnet18.onnx", "gpus": "a10g,t4"}).json():
        assert set(entry) <= set(docs.RankEntryBody.model_fields), set(entry) - set(docs.RankEntryBody.model_fields)
    for gpu in client.get("/v1/gpus").json():
        docs.GPUBody.model_validate(gpu, strict=True)
    served = client.get("/openapi.json").json()
    gpus_200 = served["paths"]["/v1/gpus"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert gpus_200["type"] == "array" and gpus_200["items"] == {"$ref": "#/components/schemas/GPUBody"}
    if "/v1/llm/models" in served["paths"]:
        models_200 = served["paths"]["/v1/llm/models"]["get"]["responses"]["200"]["content"]["application/json"]
        assert models_200["schema"]["items"] == {"type": "string"}
    docs_page = client.get("/docs")
    assert docs_page.status_code == 404 and "/openapi.json" in docs_page.json()["detail"]


def test_a_load_that_ran_out_of_time_or_data_is_tried_again_a_bad_file_is_not():
    """The cache remembers a load's bad-input failure, so a retried plan skips what failed; but shape inference
    past its time limit on a busy server, or a dataset fetched since, may succeed next time: those are not kept."""
    from lilou.errors import MissingDataError, OutOfTimeError
    from lilou.serve.cache import ModelCache

    cache = ModelCache(4, size_of=len)
    for error, tried_again in ((LilouInputError("fixed shapes"), False), (OutOfTimeError("60 s"), True),
                               (MissingDataError("fetch it"), True)):
        calls = []

        def load(error=error, calls=calls):
            calls.append(1)
            raise error

        key = (type(error).__name__,)
        for _ in range(2):
            with pytest.raises(type(error)):
                cache.get(key, load)
        assert len(calls) == (2 if tried_again else 1), type(error).__name__


def test_missing_checkpoints_are_one_line_and_exit_2_before_uvicorn_starts(tmp_path, monkeypatch, capsys):
    """They were loaded in the ASGI lifespan only: a 20-line uvicorn traceback and exit status 3 (audit ua42f)."""
    import uvicorn

    import lilou.checkpoints as checkpoints
    from lilou.cli import main

    monkeypatch.setattr(checkpoints, "SHIPPED_ROOT", tmp_path / "shipped")
    monkeypatch.setenv("LILOU_CHECKPOINTS", str(tmp_path / "root"))
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: pytest.fail("uvicorn started"))
    assert main(["serve", "--port", "0"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lilou: error: checkpoint 'kernel_latency' not found at ")
