"""A file that fixes its input sizes, asked at others its own shapes do not follow (lilou/graph/fixed_sizes.py)."""
from __future__ import annotations

from pathlib import Path

import onnx

from lilou.graph.fixed_sizes import ResizedInput, input_dims, resized_inputs, with_fixed_sizes
from tests.test_graph_errors import assert_one_line_error, run_cli

WHISPER = Path(__file__).parent / "data" / "genai" / "whisper-encoder-export.onnx"  # dynamo export at batch 2


def test_a_batch_the_baked_in_shapes_do_not_follow_is_refused(capsys):
    """Whisper's encoder exported at batch 2: at batch 1 its reshapes to constant sizes leave 45 nodes without a
    shape, which priced a fraction of the model (23 kernels against 40) with a generic warning."""
    status, _, err = run_cli(capsys, "infer", str(WHISPER), "--gpu", "a10g", "--batch", "1")
    assert_one_line_error(status, err, "fixes its input sizes (features 2x80x3000 -> 1x80x3000)",
                          "45 node(s) have no shape (node_MatMul_41, ", "fixed shapes baked in")
    status, out, err = run_cli(capsys, "infer", str(WHISPER), "--gpu", "a10g", "--batch", "2", "--format", "csv")
    # a header and 42 kernels: 40 groups, and the bias adds of the two biased Conv1d (cuDNN adds a bias apart)
    assert status == 0 and out.count("\n") == 43


def test_a_plan_skips_the_batches_the_file_cannot_take(capsys):
    status, out, err = run_cli(capsys, "plan", str(WHISPER), "--slo-ms", "100", "--gpus", "a10g", "--batches", "1,2,4",
                               "--format", "json")
    assert status == 0, err
    import json

    plan = json.loads(out)
    assert plan["batches"] == [2]
    assert sum("skipped: the file fixes its input sizes" in w for w in plan["warnings"]) == 2


def test_resized_inputs_name_only_the_fixed_dimensions_changed():
    model = onnx.load(WHISPER, load_external_data=False)
    before = input_dims(model.graph.input)
    assert before == {"features": (2, 80, 3000)}
    dim = model.graph.input[0].type.tensor_type.shape.dim[0]
    dim.dim_value = 4
    [resized] = resized_inputs(before, model.graph.input)
    assert resized == ResizedInput("features", (2, 80, 3000), (4, 80, 3000))
    restored = with_fixed_sizes(model, [resized])
    assert input_dims(restored.graph.input) == before and input_dims(model.graph.input)["features"][0] == 4
    dim.dim_value = 2
    assert resized_inputs(before, model.graph.input) == []
