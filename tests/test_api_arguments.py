"""The Python API's arguments: one rule for lists of GPUs and batches, clear input errors for the rest."""
from __future__ import annotations

import numpy as np
import pytest

from lilou.api import NO_GPU_NAMED, Predictor
from lilou.errors import LilouInputError
from lilou.hardware import resolve_device


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor()


@pytest.fixture(scope="module")
def resnet18(zoo_onnx) -> str:
    return str(zoo_onnx("resnet18", dynamic_batch=True))


def test_a_list_of_gpus_is_any_iterable_of_names_or_devices(predictor, resnet18):
    """rank(gpus=np.array([...])) raised numpy's ValueError from ambiguity_notes after the whole ranking;
    predict_many refused a numpy array and a dict's keys; predict and rank refused a Device predict_many took."""
    names = ["a10g", "a100-80gb"]
    expected = [e.device for e in predictor.rank(resnet18, gpus=names, batch=1)]
    assert expected == ["a100-sxm4-80gb", "a10g"]
    for gpus in (np.array(names), dict.fromkeys(names).keys(), (name for name in names),
                 [resolve_device("a10g"), "a100-80gb"]):
        assert [e.device for e in predictor.rank(resnet18, gpus=gpus, batch=1)] == expected
    ranking = predictor.rank(resnet18, gpus=np.array(names), batch=1)
    assert ranking.warnings[0].startswith("GPU name 'a100-80gb' is ambiguous; using a100-sxm4-80gb")
    for devices in (np.array(names), dict.fromkeys(names).keys()):
        assert [p.device for p in predictor.predict_many(resnet18, devices, batch=1)] == ["a10g", "a100-sxm4-80gb"]
    by_name = predictor.predict(resnet18, gpu="t4", batch=1)
    assert predictor.predict(resnet18, gpu=resolve_device("t4"), batch=1).to_json() == by_name.to_json()
    with pytest.raises(LilouInputError, match=r"^mig='1g.10gb' names a slice of a GPU named by a string; t4 is"):
        predictor.predict(resnet18, gpu=resolve_device("t4"), mig="1g.10gb")


def test_an_empty_list_of_gpus_names_no_device_everywhere(predictor, resnet18):
    """predict_many(path, []) returned [] where rank(gpus=[]) refused the same empty list."""
    assert NO_GPU_NAMED.startswith("no GPU named; list GPUs like --gpus a10g,t4")
    for call in (lambda: predictor.predict_many(resnet18, [], batch=1), lambda: predictor.rank(resnet18, gpus=[]),
                 lambda: predictor.predict_many(resnet18, np.array([], dtype=str), batch=1)):
        with pytest.raises(LilouInputError) as error:
            call()
        assert str(error.value) == NO_GPU_NAMED


def test_plan_model_takes_numpy_gpus_and_batches(predictor, resnet18):
    """plan_model(gpus=np.array(...)) crashed in ambiguity_notes; batches=np.array([1, 2]) was refused."""
    from lilou.plan import plan_model

    plan = plan_model(resnet18, 50, gpus=np.array(["a10g", "t4"]), batches=np.array([2, 1]), predictor=predictor)
    listed = plan_model(resnet18, 50, gpus=["a10g", "t4"], batches=[1, 2], predictor=predictor)
    assert plan.to_json() == listed.to_json()
    assert plan.to_json()["batches"] == [1, 2]


def test_numpy_launch_gaps_and_prices_are_taken_as_the_python_ones(predictor):
    """with_launch_gap(np.float32(0.01)) was refused as "give 0 to 1 ms", prices {"a10g": np.int64(2)} (a DataFrame's
    int column) as "not a positive number of USD per hour", and 10**400 for either was an OverflowError, not an input
    error (audit ua46)."""
    from lilou.plan.prices import checked_prices

    example = "examples/resnet18.onnx"
    expected = predictor.with_launch_gap(0.02).predict(example, gpu="a10g").to_json()
    gap = predictor.with_launch_gap(np.float32(0.02))
    assert gap.predict(example, gpu="a10g").to_json() == expected and gap.model.overhead.gap_ms == float(np.float32(0.02))
    assert predictor.with_launch_gap(np.int64(0)).model.overhead.gap_ms == 0.0
    assert dict(checked_prices({"a10g": np.int64(2), "t4": np.float32(0.25)})) == {"a10g": 2.0, "t4": 0.25}
    with pytest.raises(LilouInputError) as error:
        predictor.with_launch_gap(10**400)
    assert str(error.value) == f"launch gap {str(10**400)[:40]} ms: give 0 to 1 ms (0 to 1000 us) per kernel"
    with pytest.raises(LilouInputError) as error:
        checked_prices({"a10g": 10**400})
    assert str(error.value) == (f"prices['a10g']: {str(10**400)[:40]} is not a price from 0.000001 to 1000000 USD per "
                                "hour")
    for bad in (np.float32("nan"), np.bool_(True)):
        with pytest.raises(LilouInputError, match="^launch gap np"):
            predictor.with_launch_gap(bad)


def test_prepare_like_something_not_prepared_is_an_input_error(predictor):
    """prepare(path, like="x") was an AttributeError ('str' object has no attribute 'backend'), not an input error."""
    for like in ("examples/resnet18.onnx", 8):
        with pytest.raises(LilouInputError) as error:
            predictor.prepare("examples/resnet18.onnx", like=like)
        assert str(error.value) == ("like must be the model prepared at another batch size (a PreparedModel), not "
                                    f"{type(like).__name__}")


def test_plan_arguments_of_the_wrong_kind_are_input_errors(predictor):
    """plan_llm(llm_predictor=Predictor()) (docs/embedding.md warns the two are told apart) and plan_model(shapes="x")
    were AttributeErrors; a mistyped engine or dtype was refused on every device and said so as "no device can serve
    it (1 tried); the largest, h100-sxm: unknown engine 'x'" (audit ua46). Each is now the one line lilou llm gives."""
    from lilou.llm import LLMPredictor
    from lilou.plan import plan_llm, plan_model

    llm = {"input_len": 8, "output_len": 8, "gpus": ["h100"], "batches": [1]}
    for arguments, line in (
            ({"llm_predictor": predictor}, "llm_predictor must be a lilou.LLMPredictor, not Predictor (wrap it: "
                                           "LLMPredictor(predictor=p))"),
            ({"llm_predictor": "eager"}, "llm_predictor must be a lilou.LLMPredictor, not str"),
            ({"engine": "vlm"}, "unknown engine 'vlm'; use one of vllm, hf"),
            ({"dtype": "fp64"}, "unknown dtype 'fp64'; use one of bf16, fp16, fp8, fp4, int8, int4, fp32"),
            ({"kv_dtype": "int4"}, "unknown KV-cache dtype 'int4'; use one of bf16, fp16, fp8, fp32")):
        with pytest.raises(LilouInputError) as error:
            plan_llm("llama-3.1-8b", 40, **llm, **arguments)
        assert str(error.value) == line
    wrapped = plan_llm("llama-3.1-8b", 40, **llm, llm_predictor=LLMPredictor(predictor), kv_dtype="FP8_E4M3")
    assert wrapped.to_json() == plan_llm("llama-3.1-8b", 40, **llm, kv_dtype="fp8").to_json()
    with pytest.raises(LilouInputError) as error:
        plan_model("examples/resnet18.onnx", 40, gpus=["t4"], batches=[1], predictor=predictor, shapes="x")
    assert str(error.value) == "shapes must map input or dimension names to sizes, got str"


def test_an_slo_of_hundreds_of_digits_is_an_input_error(predictor):
    """float(10**400) in the SLO's check was an OverflowError, not an input error (audit ua46); 10**400 ms is no
    finite SLO, as inf is not."""
    from lilou.plan import plan_llm, plan_model

    line = f"must be a positive number of milliseconds, not {str(10**400)[:40]}"
    with pytest.raises(LilouInputError) as error:
        plan_model("examples/resnet18.onnx", 10**400, gpus=["t4"], batches=[1], predictor=predictor)
    assert str(error.value) == f"--slo-ms {line}"
    with pytest.raises(LilouInputError) as error:
        plan_llm("llama-3.1-8b", 40, ttft_slo_ms=10**400, input_len=8, output_len=8, gpus=["h100"])
    assert str(error.value) == f"--ttft-slo-ms {line}"


@pytest.mark.parametrize(("values", "message"), [
    ("x=1", "values must map input names to values, got str"),  # RuntimeError: shaping the model failed ...
    ([("use_cache_branch", [False])], "values must map input names to values, got list"),  # AttributeError
    ({"use_cache_branch": ["true"]}, "values['use_cache_branch']: 'true' is a str; give a bool or a number, "
                                     "e.g. False or 16000"),
    ({"use_cache_branch": [float("nan")]}, "values['use_cache_branch']: nan is not a finite number"),
])
def test_values_that_are_not_a_mapping_of_bools_or_numbers_are_one_line_errors(predictor, values, message):
    from tests.test_branches import DECODE, MERGED

    with pytest.raises(LilouInputError) as error:
        predictor.predict(MERGED, gpu="a10g", shapes=DECODE, values=values)
    assert str(error.value) == message


def test_numpy_values_are_taken_as_the_python_ones(predictor):
    """np.array([True]) was refused with "'[ True]' is not true, false or a finite number"."""
    from tests.test_branches import DECODE, MERGED

    cached = predictor.predict(MERGED, gpu="a10g", shapes=DECODE, values={"use_cache_branch": [True]}).to_json()
    for given in (np.array([True]), np.bool_(True), True, np.array([[True]])):
        assert predictor.predict(MERGED, gpu="a10g", shapes=DECODE, values={"use_cache_branch": given}).to_json() == cached


@pytest.mark.parametrize(("option", "kind"), [("kernel_checkpoint", "kernel-latency"),
                                              ("overhead_checkpoint", "end-to-end overhead")])
def test_a_file_given_as_a_checkpoint_folder_is_an_input_error(tmp_path, option, kind):
    """Predictor(kernel_checkpoint="resnet18.onnx") raised NotADirectoryError: 'resnet18.onnx/config.json'."""
    path = tmp_path / "resnet18.onnx"
    path.write_bytes(b"not a folder")
    with pytest.raises(LilouInputError) as error:
        Predictor(**{option: str(path)})
    assert str(error.value) == f"no {kind} checkpoint in {path}: it is a file, not a checkpoint's folder"


def test_plan_model_refuses_what_is_not_a_path(predictor, resnet18):
    """plan_model(None, ...) and plan_model(<PreparedModel>, ...) raised TypeError from os.fspath."""
    from lilou.plan import plan_model

    with pytest.raises(LilouInputError) as error:
        plan_model(None, 10, gpus=["a10g"], batches=[1])
    assert str(error.value) == "model must be an ONNX file's path, not NoneType"
    prepared = predictor.prepare(resnet18, batch=1)
    with pytest.raises(LilouInputError) as error:
        plan_model(prepared, 10, gpus=["a10g"], batches=[1], predictor=predictor)
    assert str(error.value) == (f"{prepared.name}: plan_model takes the ONNX file's path, not a prepared model: it "
                                "reads the model at each batch it tries")


def test_batch_and_a_named_leading_dimension_must_agree(predictor, resnet18):
    """predict(batch=4, shapes={"batch": (2,)}) priced batch 4 without a word."""
    with pytest.raises(LilouInputError) as error:
        predictor.predict(resnet18, gpu="t4", batch=4, shapes={"batch": (2,)})
    assert str(error.value) == ("--batch 4 and --shape batch=2 disagree: input pixel_values's leading dimension is "
                                "'batch'; give the batch once")
    agreed = predictor.predict(resnet18, gpu="t4", batch=2, shapes={"batch": (2,)})
    assert agreed.to_json() == predictor.predict(resnet18, gpu="t4", batch=2).to_json()


def test_the_public_type_hints_resolve_and_the_results_say_what_they_are():
    """typing.get_type_hints(Predictor.predict) raised NameError: name 'GraphReading' is not defined."""
    import inspect
    import typing

    from lilou import api, results

    for function in (api.Predictor.predict, api.Predictor.predict_many, api.Predictor.rank, api.Predictor.prepare,
                     api.rank_devices):
        assert "model" in typing.get_type_hints(function) or function is api.rank_devices
    for cls in (results.Prediction, results.RankEntry, results.KernelEstimate, results.PreparedModel):
        typing.get_type_hints(cls)
    for documented in (results.RankEntry, results.RankEntry.to_json, results.KernelEstimate.to_json,
                       results.Prediction.top):
        assert inspect.getdoc(documented), documented
    assert "int8, int4, fp4" in api.Predictor.predict.__doc__


def test_the_backend_is_taken_in_any_case():
    """Predictor(backend="EAGER") was refused ("unknown backend 'EAGER'") where precision="FP16" is taken."""
    assert Predictor(backend="EAGER").backend == "eager"
    with pytest.raises(LilouInputError) as error:
        Predictor(backend="xla")
    assert str(error.value).startswith("unknown backend 'xla'; choose one of: eager")


def test_a_ranking_as_one_json_object_carries_its_warnings(predictor, resnet18):
    """``Ranking.to_json()`` is the `rank --format json` list (a contract) and so holds no warnings; a service that
    returned it dropped them, where every other result's JSON has them (audit ua43c, finding 5)."""
    import json

    ranking = predictor.rank(resnet18, gpus=["a10g", "a100-80gb"], batch=1)
    document = ranking.to_json_object()
    assert document == {"model": ranking.model, "backend": "eager", "entries": ranking.to_json(),
                        "warnings": ranking.warnings}
    assert document["warnings"][0].startswith("GPU name 'a100-80gb' is ambiguous")
    assert document["warnings"] is not ranking.warnings
    assert isinstance(ranking.to_json(), list) and json.loads(json.dumps(document, allow_nan=False)) == document


@pytest.mark.parametrize("option", ["kernel_checkpoint", "overhead_checkpoint"])
@pytest.mark.parametrize("folder", [5, b"checkpoints/kernel_latency", "checkpoints/\0kernel_latency"])
def test_a_checkpoint_folder_that_is_no_path_is_one_line(option, folder):
    """Predictor(kernel_checkpoint=5) was a TypeError, a bytes folder another, and a NUL byte os.stat's ValueError."""
    with pytest.raises(LilouInputError) as refused:
        Predictor(**{option: folder})
    assert str(refused.value) == f"{option} must be a checkpoint folder's path (a str without NUL bytes), not {folder!r}"
