"""``--shape NAME=N`` binds a named dynamic dimension in every input (lilou.graph.shapes.apply_input_shapes).

A decoder exported with its KV cache (Hugging Face Optimum, ``torch.onnx`` with dynamic axes) has a dozen or more
inputs sharing ``batch_size``, ``sequence_length`` and ``past_sequence_length``, and writes the attention mask's
length as ``past_sequence_length + sequence_length``: one size per name sets them all.
"""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from lilou.errors import LilouInputError
from lilou.graph.batch_series import BatchSeries, same_graph
from lilou.graph.dag import load_graph
from lilou.graph.shapes import apply_input_shapes
from tests.onnx_builders import make_model, tensor, weight
from tests.test_graph_errors import assert_one_line_error, run_cli

BOUND = {"batch_size": (2,), "sequence_length": (1,), "past_sequence_length": (511,)}


def decoder_step(tmp_path, mask_length: str = "past_sequence_length + sequence_length"):
    """One attention step over a KV cache, with the dynamic axes Optimum names."""
    nodes = [helper.make_node("MatMul", ["hidden", "w_key"], ["key"], name="key"),
             helper.make_node("Concat", ["past_key", "key"], ["keys"], name="cache", axis=1),
             helper.make_node("Transpose", ["keys"], ["keys_t"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["hidden", "keys_t"], ["scores"], name="scores"),
             helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["mask", "axis"], ["mask_rows"]),
             helper.make_node("Add", ["scores", "mask_rows"], ["masked"], name="masked"),
             helper.make_node("Softmax", ["masked"], ["probs"], name="softmax", axis=-1)]
    inputs = [tensor("hidden", ["batch_size", "sequence_length", 32]),
              tensor("attention_mask", ["batch_size", mask_length], TensorProto.INT64),
              tensor("past_key", ["batch_size", "past_sequence_length", 32])]
    axis = onnx.numpy_helper.from_array(__import__("numpy").array([1], dtype="int64"), "axis")
    model = make_model(nodes, inputs, [tensor("probs", None)], [weight("w_key", [32, 32]), axis])
    path = tmp_path / "decoder_step.onnx"
    onnx.save(model, path)
    return path


def test_named_dimensions_set_every_input_and_the_expression_of_them(tmp_path):
    graph = load_graph(decoder_step(tmp_path), shapes=BOUND)
    assert {t.name: t.shape for t in graph.inputs} == {
        "hidden": (2, 1, 32), "attention_mask": (2, 512), "past_key": (2, 511, 32)}
    assert graph.dag.nodes["softmax"]["outputs"][0].shape == (2, 1, 512)
    assert graph.dag.nodes["scores"]["flops"] == 2 * 2 * 1 * 32 * 512


def test_an_input_shape_and_the_batch_win_over_a_named_dimension(tmp_path):
    model = onnx.load(decoder_step(tmp_path))
    apply_input_shapes(model, batch=4, shapes={**BOUND, "batch_size": (4,), "hidden": (2, 3, 32)})
    shapes = {v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim) for v in model.graph.input}
    assert shapes == {"hidden": (2, 3, 32),  # the whole input, as given
                      "attention_mask": (4, 512), "past_key": (4, 511, 32)}  # --batch sets the leading dims


def test_the_batch_and_a_named_leading_dimension_that_disagree_are_refused(tmp_path):
    """--batch 4 --shape batch_size=2 priced batch 4 without a word (the batch won)."""
    model = onnx.load(decoder_step(tmp_path))
    with pytest.raises(LilouInputError) as error:
        apply_input_shapes(model, batch=4, shapes=BOUND)
    assert str(error.value).startswith("--batch 4 and --shape batch_size=2 disagree: input ")


def test_the_cli_binds_named_dimensions(capsys, tmp_path):
    path = str(decoder_step(tmp_path))
    status, out, _ = run_cli(capsys, "graph", path, "--shape", "batch_size=2", "--shape", "sequence_length=1",
                             "--shape", "past_sequence_length=511", "--format", "json")
    assert status == 0
    import json

    nodes = {n["name"]: n for n in json.loads(out)["nodes"]}
    assert nodes["softmax"]["outputs"][0]["shape"] == [2, 1, 512]


def test_the_dynamic_dimension_error_names_the_dimensions(capsys, tmp_path):
    status, _, err = run_cli(capsys, "graph", str(decoder_step(tmp_path)), "--batch", "2")
    assert_one_line_error(status, err, "'hidden'", "--shape hidden=D1xD2...", "--shape sequence_length=N")


@pytest.mark.parametrize(("shapes", "message"), [
    ({"seq": (4,)}, "unknown input(s) seq; the model's inputs are: hidden, attention_mask, past_key; its named "
                    "dimensions: batch_size, past_sequence_length, sequence_length"),
    ({"sequence_length": (2, 4)}, "a named dimension takes one size"),
])
def test_bad_named_dimensions_are_one_line_errors(tmp_path, shapes, message):
    model = onnx.load(decoder_step(tmp_path))
    with pytest.raises(LilouInputError) as error:
        apply_input_shapes(model, shapes=shapes)
    assert message in str(error.value)


def test_an_expression_that_comes_to_no_size_is_refused(tmp_path):
    model = onnx.load(decoder_step(tmp_path, mask_length="sequence_length - past_sequence_length"))
    with pytest.raises(LilouInputError, match="comes to -510; a dimension must be a positive integer"):
        apply_input_shapes(model, shapes=BOUND)


@pytest.mark.parametrize(("expression", "message"), [
    ("past_sequence_length * past_sequence_length * past_sequence_length * past_sequence_length * past_sequence_length",
     "comes to more than 2\\^40"),
    ("past_sequence_length // (sequence_length - 1)", "comes to 0"),
])
def test_an_expression_past_the_limits_is_refused(tmp_path, expression, message):
    model = onnx.load(decoder_step(tmp_path, mask_length=expression))
    with pytest.raises(LilouInputError, match=message):
        apply_input_shapes(model, shapes=BOUND)


@pytest.mark.parametrize("expression", ["__import__('os').getpid()", "9**9**9", "1e10", "(" * 150 + "x" + ")" * 150])
def test_an_odd_dimension_name_is_not_evaluated(tmp_path, expression):
    """Only names, integers, + - * and // are read as an expression; anything else is a name like any other."""
    model = onnx.load(decoder_step(tmp_path, mask_length=expression))
    with pytest.raises(LilouInputError, match="dynamic dimensions"):
        apply_input_shapes(model, shapes=BOUND)


def test_a_batch_series_with_named_dimensions_derives_its_graphs(tmp_path):
    """``lilou plan`` over batches: the named dimensions are pinned in every read, and derived graphs equal reads."""
    path = decoder_step(tmp_path)
    shapes = {"sequence_length": (1,), "past_sequence_length": (511,)}
    series = BatchSeries(path, largest=16)
    for batch in (1, 2, 4, 8, 16):
        assert same_graph(series.graph(batch, shapes), load_graph(path, batch=batch, shapes=shapes)), batch
    assert series.reads == 3


KV_CACHE = Path(__file__).resolve().parent / "data" / "kv_cache" / "llama-past.onnx"


def test_a_decoder_exported_with_its_kv_cache_is_sized_by_three_names():
    """tests/data/kv_cache/llama-past.onnx (scripts/make_kv_cache_fixture.py): a two-layer Llama's decode step, its
    seven inputs sized by batch_size, sequence_length and past_sequence_length as Optimum names them."""
    from lilou.api import Predictor

    predictor = Predictor()
    step = {"batch_size": (8,), "sequence_length": (1,)}
    prepared = predictor.prepare(KV_CACHE, shapes={**step, "past_sequence_length": (1023,)})
    inputs = {t.name: t.shape for t in prepared.graph.inputs}
    assert inputs["attention_mask"] == (8, 1024) and inputs["input_ids"] == (8, 1)
    assert inputs["past_key_values.1.value"] == (8, 2, 1023, 64)
    assert {t.name: t.shape for t in prepared.graph.outputs}["present.0.key"] == (8, 2, 1024, 64)
    # a longer cache is more bytes to read each step: the step's predicted time grows with it
    times = [predictor.predict(KV_CACHE, gpu="a10g", shapes={**step, "past_sequence_length": (past,)}).latency_ms
             for past in (127, 1023, 4095)]
    assert times == sorted(times) and times[0] < times[-1]


def test_a_dimension_name_of_invalid_utf8_is_read(capsys, tmp_path):
    """A byte mutant's dim_param that is not UTF-8 (protobuf hands it over as bytes; fuzz seed 2904 case 1628 ended in
    an internal TypeError): the dynamic-dimension error, exit 2, and binding the other names still works."""
    model = onnx.load(decoder_step(tmp_path))
    path = tmp_path / "odd.onnx"
    path.write_bytes(model.SerializeToString().replace(b"past_sequence_length", b"past_sequence_\xe4\xff\xfegth"))
    status, _, err = run_cli(capsys, "graph", str(path), "--shape", "batch_size=2", "--shape", "sequence_length=1")
    assert_one_line_error(status, err, "'attention_mask'", "dynamic dimensions", "past_sequence_")


def test_an_empty_cache_is_refused_with_what_to_bind_instead(capsys):
    """The prompt pass of a decoder runs with an empty cache; Lilou prices no empty tensor and says what to do."""
    status, _, err = run_cli(capsys, "infer", str(KV_CACHE), "--gpu", "a10g", "--shape", "batch_size=2",
                             "--shape", "sequence_length=128", "--shape", "past_sequence_length=0")
    assert_one_line_error(status, err, "'past_sequence_length=0': every dimension must be a positive integer",
                          "for an empty KV cache, the prompt pass, bind 1")


def test_a_hyphenated_name_is_one_dimension(tmp_path):
    """``batch-size`` is a name, bound as --shape batch-size=4 writes it: read as ``batch - size`` it was unbindable by
    its name, and --shape batch=8 --shape size=4 silently gave 4 rows."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", ["batch-size", 256])],
                       [tensor("y", None)], [])
    path = tmp_path / "hyphen.onnx"
    onnx.save(model, path)
    assert load_graph(path, shapes={"batch-size": (4,)}).inputs[0].shape == (4, 256)
    with pytest.raises(LilouInputError, match=r"unknown input\(s\) batch, size; .* named dimensions: batch-size$"):
        load_graph(path, shapes={"batch": (8,), "size": (4,)})
    # an expression with spaces is still one (Optimum's "past_sequence_length + sequence_length")
    assert load_graph(decoder_step(tmp_path), shapes=BOUND).inputs[1].shape == (2, 512)
