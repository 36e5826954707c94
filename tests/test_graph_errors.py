"""Bad input to `lilou graph`: one clear line on stderr, exit status 2, never a traceback."""
from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from lilou.cli import main
from tests.onnx_builders import make_model, tensor, weight

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "resnet18.onnx"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def assert_one_line_error(status: int, err: str, *fragments: str) -> None:
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("lilou: error: ")
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0]


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def test_missing_file(capsys, tmp_path):
    status, _, err = run_cli(capsys, "graph", str(tmp_path / "absent.onnx"))
    assert_one_line_error(status, err, "no such file", "absent.onnx")


def test_text_file_is_not_onnx(capsys, tmp_path):
    path = tmp_path / "notes.onnx"
    path.write_text("this is a plain text file, not a protobuf\n" * 20)
    status, _, err = run_cli(capsys, "graph", str(path))
    assert_one_line_error(status, err, "notes.onnx")


@pytest.mark.parametrize("keep_fraction", [0.1, 0.5, 0.97])
def test_truncated_onnx(capsys, tmp_path, keep_fraction):
    data = EXAMPLE.read_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: int(len(data) * keep_fraction)])
    status, _, err = run_cli(capsys, "graph", str(path))
    assert_one_line_error(status, err, "cut.onnx")


def test_cycle_is_reported_with_its_nodes(capsys, tmp_path):
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
    ]
    path = save(make_model(nodes, [tensor("x", [4])], [tensor("b", [4])]), tmp_path / "cycle.onnx")
    status, _, err = run_cli(capsys, "graph", str(path))
    assert_one_line_error(status, err, "cycle", "first", "second")


def test_dangling_input_names_the_tensor(capsys, tmp_path):
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")]
    path = save(make_model(nodes, [tensor("x", [4])], [tensor("y", [4])]), tmp_path / "dangling.onnx")
    status, _, err = run_cli(capsys, "graph", str(path))
    assert_one_line_error(status, err, "ghost", "adder")


def dynamic_model(tmp_path: Path) -> Path:
    nodes = [helper.make_node("MatMul", ["tokens", "w"], ["y"])]
    model = make_model(nodes, [tensor("tokens", ["batch", "seq", 16])], [tensor("y", None)], [weight("w", [16, 8])])
    return save(model, tmp_path / "dynamic.onnx")


def test_dynamic_dims_without_shape(capsys, tmp_path):
    status, _, err = run_cli(capsys, "graph", str(dynamic_model(tmp_path)))
    assert_one_line_error(status, err, "tokens", "batch", "--shape")


def test_batch_alone_leaves_sequence_dynamic(capsys, tmp_path):
    status, _, err = run_cli(capsys, "graph", str(dynamic_model(tmp_path)), "--batch", "4")
    assert_one_line_error(status, err, "seq")


def test_a_zero_size_input_is_named_so_not_dynamic(capsys, tmp_path):
    """A fixed 0 is a size, not a dynamic dimension: the message said "dynamic dimensions (?x16)"."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = make_model(nodes, [tensor("x", [0, 16])], [tensor("y", None)], [weight("w", [16, 8])])
    status, _, err = run_cli(capsys, "graph", str(save(model, tmp_path / "empty.onnx")))
    assert_one_line_error(status, err, "input 'x' has a zero-size dimension (0x16)", "--shape x=")


def test_an_input_that_feeds_nothing_needs_no_shape(capsys, tmp_path):
    """A file may declare inputs no node reads (here one with a named dimension nothing else uses): their shapes
    do not matter, and they were refused until given one."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = make_model(nodes, [tensor("x", [4, 16]), tensor("unused", ["weird_dim", 77])], [tensor("y", None)],
                       [weight("w", [16, 8])])
    status, out, err = run_cli(capsys, "graph", str(save(model, tmp_path / "unused.onnx")), "--format", "json")
    assert status == 0, err
    assert json.loads(out)["totals"]["flops"] == 2 * 4 * 16 * 8


def test_a_shape_for_an_input_an_initializer_shadows_says_so(capsys, tmp_path):
    """An input with an initializer of its name is that constant (how old exports list weights); --shape on it
    named it unknown and listed the inputs as an empty list."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = make_model(nodes, [tensor("x", ["N", 16])], [tensor("y", None)], [weight("w", [16, 8]), weight("x", [8, 16])])
    path = str(save(model, tmp_path / "shadowed.onnx"))
    status, _, err = run_cli(capsys, "graph", path, "--shape", "x=4x16")
    assert_one_line_error(status, err, "--shape x: the input has an initializer of the same name")
    status, _, err = run_cli(capsys, "graph", path, "--shape", "N=4")
    assert_one_line_error(status, err, "--shape names unknown input(s) N; the model has no run-time inputs")


def test_shape_override_resolves_dynamic_dims(capsys, tmp_path):
    status, out, _ = run_cli(capsys, "graph", str(dynamic_model(tmp_path)), "--shape", "tokens=4x32x16",
                             "--format", "json")
    assert status == 0
    result = json.loads(out)
    assert result["nodes"][0]["outputs"][0]["shape"] == [4, 32, 8]
    assert result["totals"]["flops"] == 2 * 4 * 32 * 8 * 16


@pytest.mark.parametrize("argv,fragment", [
    (["--shape", "tokens=4by32"], "cannot parse --shape"),
    (["--shape", "nope=1x2x3"], "unknown input"),
    (["--shape", "tokens=4x32"], "rank 3"),
    (["--batch", "0"], "--batch must be a positive"),
])
def test_bad_shape_options(capsys, tmp_path, argv, fragment):
    status, _, err = run_cli(capsys, "graph", str(dynamic_model(tmp_path)), *argv)
    assert_one_line_error(status, err, fragment)


def test_a_batch_that_every_whole_shape_contradicts_is_refused(capsys, tmp_path):
    """--shape gives the only input whole at batch 4, so --batch 2 would set nothing and label the result batch 2."""
    path = str(dynamic_model(tmp_path))
    status, _, err = run_cli(capsys, "graph", path, "--shape", "tokens=4x32x16", "--batch", "2")
    assert_one_line_error(status, err, "--batch 2 sets no input: --shape gives tokens=4x32x16 whole")
    status, out, _ = run_cli(capsys, "graph", path, "--shape", "tokens=4x32x16", "--batch", "4", "--format", "json")
    assert status == 0 and json.loads(out)["totals"]["flops"] == 2 * 4 * 32 * 8 * 16  # the two agree


def test_unknown_option_is_one_line(capsys):
    status, _, err = run_cli(capsys, "graph", str(EXAMPLE), "--frobnicate")
    assert_one_line_error(status, err, "--frobnicate")


def test_int_typed_input_mismatch_is_reported(capsys, tmp_path):
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"])]
    model = make_model(nodes, [tensor("ids", [2, 3], TensorProto.INT64)], [tensor("rows", None)],
                       [weight("table", [10, 4])])
    path = save(model, tmp_path / "gather.onnx")
    status, _, err = run_cli(capsys, "graph", str(path), "--shape", "ids=2x3x5")
    assert_one_line_error(status, err, "rank 2")


def test_batch_on_a_fixed_shape_export_is_refused_not_miscounted(capsys):
    # examples/resnet18.onnx was exported at batch 1 with a constant Reshape target [1, 512].
    status, out, err = run_cli(capsys, "graph", str(EXAMPLE), "--batch", "4")
    assert_one_line_error(status, err, "node_view", "re-export")
    assert out == ""
