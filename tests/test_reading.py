"""Reading a file with its shaping in a guarded child (lilou.graph.reading): the same graph as shaping it here, errors
as they were, no child left behind, and the commands that start a reading before they import the predictor."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lilou.cli import main
from lilou.errors import LilouInputError
from lilou.graph import guarded_inference, reading
from lilou.graph.dag import ShapedModel, load_graph, shape_model
from lilou.graph.loading import load_onnx

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"


@pytest.fixture(autouse=True)
def _no_other_threads(monkeypatch):
    """Earlier tests leave threads behind (tqdm's monitor), which keeps a reading in this process: these tests are
    about the child, and the threads are idle."""
    monkeypatch.setattr(guarded_inference, "_other_threads", lambda: False)


def _in_child(path: Path, **options) -> ShapedModel:
    with reading.read_graph(path, **options) as started:
        assert started._child is not None, "expected the shaping in a child"
        return started._collected(None)


def _assert_same(here: ShapedModel, there: ShapedModel) -> None:
    assert there.model.SerializeToString(deterministic=True) == here.model.SerializeToString(deterministic=True)
    assert list(there.tensors.items()) == list(here.tensors.items())
    assert there.notes == here.notes and there.evaluated == here.evaluated


@pytest.mark.parametrize("name, options", [
    ("sdpa/sdpa-calls-dynamo.onnx", {}),           # the dynamo exporter's node metadata, which fusion reads
    ("ort/bert-mha.onnx", {"batch": 2}),           # onnxruntime's fused ops written back: new nodes and initializers
    ("quantized/resnet-qdq.onnx", {"batch": 2}),   # a quantized graph read as its runtime types
    ("genai/llama-gqa-int4-tied.onnx",             # weight-only INT4 stand-ins, named and implied dimensions
     {"batch": 1, "shapes": {"sequence_length": (16,), "past_sequence_length": (16,)}}),
])
def test_a_file_shaped_in_the_child_is_the_file_shaped_here(name, options):
    path = DATA / name
    _assert_same(shape_model(load_onnx(path), **options), _in_child(path, **options))


def test_inline_weights_stay_in_the_parent_and_come_back_in_place(tmp_path):
    """The child sends no initializer the parent holds unchanged; the parent puts each back where it was."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((256, 256)).astype(np.float32), f"w{i}") for i in range(3)]
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", f"w{i}"], [f"h{i + 1}"], name=f"mm{i}")
             for i in range(3)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 256])],
                              [helper.make_tensor_value_info("h3", TensorProto.FLOAT, None)], weights)
    path = tmp_path / "mlp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)

    with reading.read_graph(path, batch=4) as started:
        payload, status = started._child.collect()
        started._child = None
        shaped = reading._shaped_from(payload, status, started._budget, started._model)
    assert len(payload) < 20_000 < os.path.getsize(path)  # the 768 KB of weights did not go through the pipe
    _assert_same(shape_model(load_onnx(path), batch=4), shaped)
    assert shaped.tensors["h3"].shape == (4, 256)


def _large_weights_model(tmp_path: Path) -> Path:
    """Initializers in the order [a weight-stripped one, a large inline one, a small one, another large one]: two of
    300 x 300 floats (90,000 elements, above what the shaping reads values of) whose bytes the shaping never needs."""
    rng = np.random.default_rng(1)
    stripped = TensorProto(name="w0", data_type=TensorProto.FLOAT, dims=[300, 300])
    stripped.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "model.weights"), ("offset", "0"), ("length", str(300 * 300 * 4))):
        entry = stripped.external_data.add()
        entry.key, entry.value = key, value
    weights = [stripped, numpy_helper.from_array(rng.standard_normal((300, 300)).astype(np.float32), "w1"),
               numpy_helper.from_array(np.zeros(300, np.float32), "bias"),
               numpy_helper.from_array(rng.standard_normal((300, 300)).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h0"], name="mm0"),
             helper.make_node("MatMul", ["h0", "w1"], ["h1"], name="mm1"),
             helper.make_node("Add", ["h1", "bias"], ["h2"], name="add"),
             helper.make_node("MatMul", ["h2", "w2"], ["y"], name="mm2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 300])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights)
    path = tmp_path / "large.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_the_shaping_never_holds_the_bytes_of_large_weights(tmp_path, monkeypatch):
    """Shaping a file with its weights inline takes no more memory than its weight-stripped export (a 621 MB GPT-2
    was refused as needing more than the child's 4.8 GB): the child and the in-process shaping both shape a copy
    without the bytes of initializers above what shaping reads values of, and the result is still exactly the
    whole file shaped here, its initializers in their places."""
    from lilou.graph import dag

    path = _large_weights_model(tmp_path)
    expected = shape_model(load_onnx(path), batch=2)
    weight_bytes = 2 * 300 * 300 * 4
    seen = []
    real_shape_model = dag.shape_model
    monkeypatch.setattr(dag, "shape_model", lambda model, **options: seen.append(model.ByteSize())
                        or real_shape_model(model, **options))
    parent = load_onnx(path)
    child = onnx.ModelProto()
    child.CopyFrom(parent)
    payload = reading._shaped_answer(child, {"batch": 2})  # what the child does, here
    _assert_same(expected, reading._shaped_from(payload, 0, guarded_inference.MEMORY_BUDGET, parent))
    assert [t.name for t in child.graph.initializer] == ["w0", "w1", "bias", "w2"]
    assert not child.graph.initializer[1].raw_data and child.graph.initializer[2].raw_data
    monkeypatch.setattr(guarded_inference, "_other_threads", lambda: True)  # the service: shaped in this process
    with reading.read_graph(path, batch=2) as started:
        assert started._child is None
        here = started.shaped()
    _assert_same(expected, here)
    assert [t for t in here.model.graph.initializer if t.name == "w1"] == [load_onnx(path).graph.initializer[1]]  # bytes
    assert len(seen) == 2 and max(seen) < 20_000 < weight_bytes


def test_guarded_inference_infers_without_the_bytes_of_large_weights(tmp_path, monkeypatch):
    """The child of guarded inference (a process with other threads shapes in itself and infers in one) serialises
    the dims of large weights only; what it answers is ONNX's inference of the whole model."""
    from onnx import shape_inference

    model = load_onnx(_large_weights_model(tmp_path))
    sizes = []
    real = shape_inference.infer_shapes
    monkeypatch.setattr(shape_inference, "infer_shapes", lambda m, **options: sizes.append(m.ByteSize())
                        or real(m, **options))
    work = onnx.ModelProto()
    work.CopyFrom(model)
    inferred, _ = guarded_inference._result(guarded_inference._answer(work, {}, None), 0,
                                            guarded_inference.MEMORY_BUDGET, model)
    assert inferred == real(model)
    assert sizes and max(sizes) < 20_000 < model.ByteSize()


def test_an_input_error_in_the_child_is_the_error_here():
    """A --batch the file's fixed Reshape cannot take: the one line shaping here gives."""
    path = REPO / "examples" / "resnet18.onnx"
    with pytest.raises(LilouInputError) as here:
        shape_model(load_onnx(path), shapes={"input": (1, 3, 0, 8)})
    with pytest.raises(LilouInputError) as there:
        _in_child(path, shapes={"input": (1, 3, 0, 8)})
    assert str(there.value) == str(here.value)


def test_a_file_that_cannot_be_read_fails_when_its_graph_is_asked_for(tmp_path):
    started = reading.read_graph(tmp_path / "missing.onnx")  # no error yet: the caller checks its arguments first
    with pytest.raises(LilouInputError, match="missing.onnx"):
        started.graph()


def test_a_reading_given_up_on_leaves_no_child():
    started = reading.read_graph(REPO / "examples" / "resnet18.onnx")
    pid = started._child.pid
    started.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def test_control_flow_and_threads_shape_here(monkeypatch):
    """A model with subgraphs resolves its control flow by shaping candidates, each with its own guarded inference;
    a process with other threads (the service) forks nothing it could deadlock: both shape in this process."""
    with reading.read_graph(DATA / "control_flow" / "scripted-if.onnx", batch=2) as started:
        assert started._child is None and started.graph().dag.number_of_nodes() > 0
    monkeypatch.setattr(guarded_inference, "_other_threads", lambda: True)
    with reading.read_graph(REPO / "examples" / "resnet18.onnx") as started:
        assert started._child is None
        assert started.graph().dag.number_of_nodes() == load_graph(REPO / "examples" / "resnet18.onnx"
                                                                    ).dag.number_of_nodes()


def test_a_reading_is_predicted_as_its_path():
    from lilou import Predictor

    path = str(DATA / "ort" / "bert-mha.onnx")
    predictor = Predictor()
    with reading.read_graph(path, batch=2) as started:
        from_reading = predictor.predict(started, gpu="a10g")
    assert from_reading.to_json() == predictor.predict(path, gpu="a10g", batch=2).to_json()
    assert from_reading.batch == 2 and from_reading.model == path
    with reading.read_graph(path) as started, pytest.raises(LilouInputError, match="when a reading starts"):
        predictor.predict(started, gpu="a10g", batch=2)


def test_infer_checks_the_gpu_before_the_file(tmp_path, capsys):
    """`lilou infer` starts reading before it imports the predictor; a bad GPU name is still the error reported."""
    assert main(["infer", str(tmp_path / "missing.onnx"), "--gpu", "no-such-gpu"]) == 2
    assert "no-such-gpu" in capsys.readouterr().err


def test_rank_from_a_reading_is_the_api_rank_of_the_path(capsys):
    from lilou import Predictor

    path = str(DATA / "ort" / "bert-mha.onnx")
    assert main(["rank", path, "--gpus", "a10g,t4", "--batch", "2", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == Predictor().rank(path, gpus=["a10g", "t4"], batch=2).to_json()


# ------------------------------------------------- hosts that reap children themselves (audit ua43c, finding 4)

def _host_reaped(real_waitpid):
    """``os.waitpid`` as a host that reaps every child itself leaves it to Lilou: the child is gone (reaped here, as
    the host's handler would), and Lilou's own wait finds no child."""
    def waitpid(pid, options):
        real_waitpid(pid, options)
        raise ChildProcessError(10, "No child processes")
    return waitpid


def test_a_host_that_ignores_sigchld_reads_files_in_a_child_as_before():
    """With SIGCHLD ignored (common in daemons) the kernel reaps the child, and every read raised ChildProcessError."""
    import signal

    path = REPO / "examples" / "resnet18.onnx"
    here = shape_model(load_onnx(path))
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        there = _in_child(path)
        inferred = guarded_inference.infer_shapes(load_onnx(path))  # ONNX's inference alone, in a child too
    finally:
        signal.signal(signal.SIGCHLD, previous)
    _assert_same(here, there)
    assert len(inferred.graph.value_info) > 0


def test_a_host_that_reaps_children_gets_the_answer_or_a_typed_error(monkeypatch):
    monkeypatch.setattr(os, "waitpid", _host_reaped(os.waitpid))
    child = guarded_inference.GuardedChild.start(guarded_inference.MEMORY_BUDGET, lambda: b"V the answer")
    assert child.collect() == (b"V the answer", 0)  # whole, so the child ended well
    child = guarded_inference.GuardedChild.start(guarded_inference.MEMORY_BUDGET, lambda: os._exit(3))
    assert child.collect() == (b"", None)  # no answer, and no status to say why
    error = guarded_inference.child_failure(b"", None, guarded_inference.MEMORY_BUDGET)
    assert isinstance(error, LilouInputError)
    assert str(error) == ("ONNX shape inference ended without an answer on this model (it aborted on a failed check of "
                          "the file, or it needs more than 512 MiB of memory; this process's children are reaped by "
                          "the host, so its exit status is unknown); the file is malformed or its dimensions are not "
                          "realistic")
    path = REPO / "examples" / "resnet18.onnx"
    _assert_same(shape_model(load_onnx(path)), _in_child(path))


def test_an_interrupted_collect_kills_and_reaps_its_child(monkeypatch):
    """An interrupt while waiting for the answer waited up to the time limit for the child, which went on."""
    import time

    def interrupted(fd, deadline, pid):
        raise KeyboardInterrupt

    monkeypatch.setattr(guarded_inference, "_read", interrupted)
    child = guarded_inference.GuardedChild.start(guarded_inference.MEMORY_BUDGET, lambda: time.sleep(60) or b"late")
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        child.collect()
    assert time.monotonic() - start < 30
    with pytest.raises(ChildProcessError):  # reaped: no zombie left
        os.waitpid(child.pid, os.WNOHANG)


def test_a_child_answers_through_a_descriptor_above_1023(monkeypatch):
    """A long-running host with many files open hands out descriptors past select()'s limit (1023): every read
    raised ValueError("filedescriptor out of range in select()")."""
    pipe = os.pipe

    def high_pipe():
        low = pipe()
        high = (os.dup2(low[0], 1500), os.dup2(low[1], 1501))
        for fd in low:
            os.close(fd)
        return high

    monkeypatch.setattr(os, "pipe", high_pipe)
    child = guarded_inference.GuardedChild.start(guarded_inference.MEMORY_BUDGET, lambda: b"V the answer")
    assert child.fd == 1500 and child.collect() == (b"V the answer", 0)


def test_the_files_own_initializers_are_not_copied_into_the_shaped_model(tmp_path):
    """The shaped model is the file's own model object, its initializers in place (a weight-full file held them
    twice: a 235 MB FP16 GEMV peaked at 765 MB, 505 for onnx.load alone); where the shaping wrote initializers of its
    own (onnxruntime's ops written back), they follow the file's, and the answer is still the one shaped here."""
    for path, options in ((_large_weights_model(tmp_path), {"batch": 2}), (DATA / "ort/bert-mha.onnx", {"batch": 2})):
        parent = load_onnx(path)
        child = onnx.ModelProto()
        child.CopyFrom(parent)
        shaped = reading._shaped_from(reading._shaped_answer(child, options), 0, guarded_inference.MEMORY_BUDGET, parent)
        assert shaped.model is parent
        _assert_same(shape_model(load_onnx(path), **options), shaped)


def test_initializers_are_put_in_the_shapings_order():
    """The file's initializers in another order than the file's (the shaping puts those it did not read last), one
    dropped and one the shaping wrote between them: the file's model takes that order; a file's initializer the
    shaping uses twice is copied."""
    weights = [numpy_helper.from_array(np.full(4, i, np.float32), f"w{i}") for i in range(3)]
    written = numpy_helper.from_array(np.zeros(2, np.float32), "new")
    model = helper.make_model(helper.make_graph([], "g", [], [], weights))
    shaped = helper.make_model(helper.make_graph([], "shaped", [], [], []))
    result = reading._with_file_initializers(shaped, model, [2, -1, 0], [written])
    assert result is model and result.graph.name == "shaped"
    assert [t.name for t in result.graph.initializer] == ["w2", "new", "w0"]
    model = helper.make_model(helper.make_graph([], "g", [], [], weights))
    result = reading._with_file_initializers(shaped, model, [1, 1], [])
    assert result is shaped and [t.name for t in result.graph.initializer] == ["w1", "w1"]
