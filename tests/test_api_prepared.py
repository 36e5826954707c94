"""``Predictor.prepare``: a model read and grouped once gives exactly the results its path gives.

On the shipped examples/resnet18.onnx and a zoo transformer (ELECTRA-small, exported with a dynamic batch),
every prediction of the prepared model is compared, field by field, with the same call on the path;
the fusion model runs once per preparation however many devices and calls follow.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from lilou.api import Predictor, PreparedModel, rank_devices
from lilou.errors import LilouInputError

REPO = Path(__file__).resolve().parents[1]
RESNET18 = str(REPO / "examples" / "resnet18.onnx")
GPUS = ["a10g", "t4", "a100-80gb/1g.10gb", "h100-sxm"]


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor()


@pytest.fixture(scope="module")
def resnet18(predictor) -> PreparedModel:
    return predictor.prepare(RESNET18)


@pytest.fixture(scope="module")
def electra(zoo_onnx) -> str:
    return str(zoo_onnx("electra-small", batch=2, seq=32, dynamic_batch=True))


def test_prepared_model_holds_the_graph_kernels_and_warnings(predictor, resnet18):
    from lilou.graph.dag import load_graph

    graph = load_graph(RESNET18)
    assert resnet18.name == RESNET18 and resnet18.backend == "eager" and resnet18.batch is None
    assert sorted(resnet18.graph.dag.nodes) == sorted(graph.dag.nodes)
    assert resnet18.graph.inputs[0].shape == (1, 3, 224, 224)
    # every launching node is in exactly one kernel group
    grouped = [node for group in resnet18.kernels.nodes for node in group]
    assert len(grouped) == len(set(grouped))
    assert isinstance(resnet18.warnings, tuple) and list(resnet18.warnings) == graph.warnings
    with pytest.raises(dataclasses.FrozenInstanceError):
        resnet18.name = "other"  # type: ignore[misc]


def test_predict_of_a_prepared_model_is_the_path_s_prediction(predictor, resnet18):
    for gpu, mig, options in (("a10g", None, {}), ("a100-80gb", "1g.10gb", {}),
                              ("t4", None, {"precision": "fp16", "tf32": "off"})):
        expected = predictor.predict(RESNET18, gpu=gpu, mig=mig, **options)
        got = predictor.predict(resnet18, gpu=gpu, mig=mig, **options)
        assert got.to_json() == expected.to_json()
        assert got.kernels == expected.kernels and got.warnings == expected.warnings
        assert len(got.kernels) == len(resnet18.kernels)
    # the ambiguity note of 'a100-80gb' went into that prediction's warnings, not into the prepared model's
    assert not any(w.startswith("GPU name 'a100-80gb' is ambiguous") for w in resnet18.warnings)


def test_predict_many_and_rank_of_a_prepared_model(predictor, resnet18):
    devices = rank_devices(GPUS)
    many = predictor.predict_many(resnet18, devices)
    assert [p.to_json() for p in many] == [p.to_json() for p in predictor.predict_many(RESNET18, devices)]
    assert [p.device for p in many] == ["a10g", "t4", "a100-sxm4-80gb/1g.10gb", "h100-sxm"]
    ranking, expected = predictor.rank(resnet18, gpus=GPUS), predictor.rank(RESNET18, gpus=GPUS)
    assert ranking.to_json() == expected.to_json() and ranking.warnings == expected.warnings
    assert ranking.model == RESNET18 and [e.device for e in ranking][0] == "h100-sxm"
    everything = predictor.rank(resnet18)
    assert everything.to_json() == predictor.rank(RESNET18).to_json()
    assert len(everything) == len(rank_devices())


def test_zoo_transformer_prepared_at_a_batch(predictor, electra):
    prepared = predictor.prepare(electra, batch=4)
    assert prepared.batch == 4 and prepared.graph.inputs[0].shape == (4, 32)
    expected = predictor.predict(electra, gpu="a100-sxm4-80gb", batch=4)
    got = predictor.predict(prepared, gpu="a100-sxm4-80gb")
    assert got.to_json() == expected.to_json() and got.batch == 4
    ranking = predictor.rank(prepared, gpus=["a10g", "t4", "a100-80gb/1g.10gb"], precision="bf16")
    reference = predictor.rank(electra, gpus=["a10g", "t4", "a100-80gb/1g.10gb"], batch=4, precision="bf16")
    assert ranking.to_json() == reference.to_json() and ranking.warnings == reference.warnings
    assert {e.precision for e in ranking} == {"bf16"}
    # another batch is another preparation, with other kernels
    two = predictor.prepare(electra, batch=2)
    assert predictor.predict(two, gpu="a10g").to_json() == predictor.predict(electra, gpu="a10g", batch=2).to_json()
    assert [s.flops for s in two.kernels.specs] != [s.flops for s in prepared.kernels.specs]


def test_the_fusion_model_runs_once_per_preparation(monkeypatch, predictor):
    import lilou.fusion.predict as fusion

    calls = []
    original = fusion.predict_partition
    monkeypatch.setattr(fusion, "predict_partition", lambda *a, **k: calls.append(a[1]) or original(*a, **k))
    prepared = predictor.prepare(RESNET18)
    for gpu in ("a10g", "t4", "l4"):
        predictor.predict(prepared, gpu=gpu)
    predictor.predict_many(prepared, rank_devices(GPUS))
    predictor.rank(prepared, gpus=GPUS)
    assert calls == ["eager"]
    predictor.predict(RESNET18, gpu="a10g")  # a path is prepared on every call
    assert calls == ["eager", "eager"]


def test_a_loaded_graph_is_prepared_under_its_name(predictor, resnet18):
    from lilou.graph.dag import load_graph

    graph = load_graph(RESNET18)
    prepared = predictor.prepare(graph)
    assert prepared.name == "resnet18" and prepared.graph is graph
    assert predictor.predict(prepared, gpu="l4").to_json() == predictor.predict(graph, gpu="l4").to_json()
    with pytest.raises(LilouInputError, match="^batch, shapes and values apply when loading a file; pass them to "
                                              "load_graph instead$"):
        predictor.prepare(graph, batch=2)


def test_options_a_prepared_model_cannot_take(predictor, resnet18):
    with pytest.raises(LilouInputError) as batch:
        predictor.predict(resnet18, gpu="a10g", batch=2)
    assert str(batch.value) == (f"{RESNET18}: batch, shapes and values apply when a model is prepared; pass them "
                                "to Predictor.prepare instead")
    with pytest.raises(LilouInputError) as shapes:
        predictor.rank(resnet18, shapes={"input": [2, 3, 224, 224]})
    assert str(shapes.value) == str(batch.value)
    with pytest.raises(LilouInputError) as values:
        predictor.predict(resnet18, gpu="a10g", values={"input": [1.0]})
    assert str(values.value) == str(batch.value)
    with pytest.raises(LilouInputError) as other:
        predictor.predict_many(dataclasses.replace(resnet18, backend="tvm"), rank_devices(["a10g"]))
    assert str(other.value) == (f"{RESNET18}: prepared for the tvm backend, and this predictor predicts eager "
                                "kernels; prepare it with Predictor(backend='eager')")
    with pytest.raises(LilouInputError, match="already prepared; pass it to predict or rank as it is$"):
        predictor.prepare(resnet18)
    # bad device names still fail first, without touching the model
    with pytest.raises(LilouInputError, match="no-such-gpu"):
        predictor.predict(resnet18, gpu="no-such-gpu")


@pytest.mark.parametrize(("options", "message"), [
    ({"batch": 2.5}, "--batch must be a positive integer, got 2.5"),
    ({"batch": True}, "--batch must be a positive integer, got True"),
    ({"batch": "4"}, "--batch must be a positive integer, got '4'"),
    ({"shapes": {"pixel_values": (2.5, 3, 224, 224)}},
     "shapes['pixel_values']: give a sequence of positive integer sizes, e.g. (8, 512), got (2.5, 3, 224, 224)"),
    ({"shapes": {"pixel_values": 5}}, "shapes['pixel_values']: give a sequence of positive integer sizes, e.g. (8, 512), got 5"),
    ({"shapes": [1, 2]}, "shapes must map input or dimension names to sizes, got list"),
])
def test_api_arguments_of_the_wrong_type_are_input_errors(predictor, options, message):
    """The Python API takes what --batch and --shape take; a float, a bool or a string was a RuntimeError from the
    shaping child ('TypeError: ...')."""
    with pytest.raises(LilouInputError) as error:
        predictor.predict(RESNET18, gpu="t4", **options)
    assert str(error.value) == message


def test_api_sizes_of_integer_types_are_taken(predictor):
    import numpy as np

    fixed = predictor.predict(RESNET18, gpu="t4", shapes={"pixel_values": np.array([1, 3, 224, 224])})
    assert fixed.latency_ms == predictor.predict(RESNET18, gpu="t4").latency_ms


def test_predict_many_takes_names_as_rank_does(predictor):
    """Names and GPU/PROFILE strings, as predict and rank take them (they raised AttributeError: 'str' object has no
    attribute 'name'); a family's name says which board it took."""
    many = predictor.predict_many(RESNET18, ["a10g", "a100-80gb/1g.10gb"])
    assert [(p.gpu, p.mig) for p in many] == [("a10g", None), ("a100-sxm4-80gb", "1g.10gb")]
    assert [p.latency_ms for p in many] == [predictor.predict(RESNET18, gpu="a10g").latency_ms,
                                            predictor.predict(RESNET18, gpu="a100-80gb", mig="1g.10gb").latency_ms]
    assert many[1].warnings[0].startswith("GPU name 'a100-80gb' is ambiguous; using a100-sxm4-80gb")
    assert not any("ambiguous" in w for w in many[0].warnings)
    with pytest.raises(LilouInputError, match="^predict_many takes a list of devices, got the string 'a10g'$"):
        predictor.predict_many(RESNET18, "a10g")


@pytest.mark.parametrize(("call", "message"), [
    # each raised AttributeError, TypeError or ValueError from deep inside (the autoscaler pass, session 37)
    (lambda p: p.predict(RESNET18, gpu=None), "a GPU is named by a string such as 'a10g'"),
    (lambda p: p.predict(None, gpu="t4"), "model must be an ONNX file's path, its bytes, an onnx.ModelProto or a "
                                          "prepared model, not NoneType"),
    (lambda p: p.predict(b"model.onnx", gpu="t4"), "in-memory model 'model' is not a readable ONNX model"),
    (lambda p: p.predict(RESNET18, gpu="t4", precision=16), "precision must be one of fp32, tf32"),
    (lambda p: p.predict(RESNET18, gpu="t4", tf32=True), "--tf32 must be one of off, conv, on, not True"),
    (lambda p: p.predict_many(RESNET18, [5]), "predict_many takes devices as names"),
    (lambda p: p.predict_many(RESNET18, None), "predict_many takes a list of devices, got None"),
    (lambda p: p.rank(RESNET18, gpus=[None]), "GPUs are named by strings such as 'a10g'"),
    (lambda p: Predictor(launch_gap_ms=True), "launch gap True ms"),
])
def test_api_misuse_is_an_input_error(predictor, call, message):
    with pytest.raises(LilouInputError) as error:
        call(predictor)
    assert str(error.value).startswith(message)


def test_a_numpy_batch_gives_plain_json_and_gpus_may_be_one_string(predictor, electra):
    """batch=np.int64(2) reached Prediction.batch and json.dumps refused it; gpus="a10g,t4" was read one letter at
    a time ("unknown GPU 'a'")."""
    import json

    import numpy as np

    prediction = predictor.predict(electra, gpu="t4", batch=np.int64(2))
    assert type(prediction.batch) is int and json.loads(json.dumps(prediction.to_json()))["batch"] == 2
    assert [e.device for e in predictor.rank(RESNET18, gpus="a10g,t4")] == \
        [e.device for e in predictor.rank(RESNET18, gpus=["a10g", "t4"])]


def test_the_input_error_is_importable_from_lilou():
    import lilou

    assert lilou.LilouInputError is LilouInputError and "LilouInputError" in lilou.__all__


def test_a_predictor_pickles_for_worker_processes(predictor, resnet18):
    """A process pool sends the Predictor to its workers by pickling it (the kernel-row memo's context variable did
    not pickle); the copy gives exactly the original's predictions, and its memo is its own."""
    import pickle

    copy = pickle.loads(pickle.dumps(predictor))
    for gpu in GPUS:
        assert copy.predict(resnet18, gpu).to_json() == predictor.predict(resnet18, gpu).to_json()
    assert copy.rank(resnet18).to_json() == predictor.rank(resnet18).to_json()


def test_the_llm_predictor_is_importable_from_lilou_and_pickles():
    import pickle

    import lilou
    from lilou.llm import LLMPredictor

    assert lilou.LLMPredictor is LLMPredictor and "LLMPredictor" in lilou.__all__
    llm = lilou.LLMPredictor()
    asked = dict(gpu="l4", batch=4, input_len=512, output_len=64)
    assert pickle.loads(pickle.dumps(llm)).predict("meta-llama/Llama-3.1-8B-Instruct", **asked) == \
        llm.predict("meta-llama/Llama-3.1-8B-Instruct", **asked)


def test_a_model_in_memory_predicts_as_its_file_from_a_private_copy_removed_after(predictor, monkeypatch):
    """A service that receives uploads wrote each to a temporary file itself, and the temporary path became the
    result's ``model`` (audit ua43c, finding 7): ONNX bytes and an onnx.ModelProto are read as the file they would be."""
    import os
    import tempfile

    import onnx

    from lilou.graph import in_memory

    folders: list[str] = []
    mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda **kw: folders.append(mkdtemp(**kw)) or folders[-1])
    expected = predictor.predict(RESNET18, gpu="t4").to_json()
    data = Path(RESNET18).read_bytes()
    proto = onnx.load(RESNET18, load_external_data=False)
    for model, name in ((data, "model"), (bytearray(data), "model"), (memoryview(data), "model"),
                        (proto, "main_graph")):
        assert predictor.predict(model, gpu="t4").to_json() == {**expected, "model": name}
    assert len(folders) == 4 and not any(os.path.exists(f) for f in folders)  # one private folder each, removed
    with pytest.raises(LilouInputError) as error:
        predictor.predict(data[:200], gpu="t4")
    assert str(error.value).startswith("in-memory model 'model' is not a readable ONNX model (truncated or not ONNX")
    assert len(folders) == 5 and not os.path.exists(folders[-1])
    monkeypatch.setattr(in_memory, "MAX_MODEL_BYTES", 1000)
    with pytest.raises(LilouInputError) as error:
        predictor.predict(data, gpu="t4")
    assert str(error.value) == (f"an in-memory model of {len(data):,} bytes is past protobuf's limit of 1,000: save it "
                                "with its weights as external data and pass the file's path")
    assert len(folders) == 5  # refused before anything was written
