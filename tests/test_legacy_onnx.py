"""Old ONNX files (IR version 3, opsets 1-8) as old converters and hand edits wrote them."""
from __future__ import annotations

import onnx
from onnx import helper

from lilou.graph.dag import load_graph
from tests.onnx_builders import make_model, tensor, weight
from tests.test_graph_errors import assert_one_line_error, run_cli


def _conv(name: str, x: str, w: str, y: str) -> onnx.NodeProto:
    return helper.make_node("Conv", [x, w], [y], name=name, kernel_shape=[3, 3], pads=[1, 1, 1, 1])


def test_an_ir_3_file_whose_weights_are_not_listed_as_inputs_is_shaped(tmp_path):
    """Before IR 4 every initializer is also a graph input, and ONNX's inference reads only those listed: a file
    that breaks the rule had no shape after its first weight (2 convolutions of 0 FLOPs, 'unknown shape')."""
    nodes = [_conv("c1", "x", "w1", "h"), helper.make_node("Relu", ["h"], ["r"], name="relu"), _conv("c2", "r", "w2", "y")]
    model = make_model(nodes, [tensor("x", [2, 3, 8, 8])], [tensor("y", None)], [weight("w1", [4, 3, 3, 3]),
                                                                                 weight("w2", [5, 4, 3, 3])], opset=6)
    model.ir_version = 3
    path = tmp_path / "ir3.onnx"
    onnx.save(model, path)
    graph = load_graph(path)
    assert {t.name: t.shape for t in graph.outputs} == {"y": (2, 5, 8, 8)}
    flops = {d["op"]: d["flops"] for _, d in graph.dag.nodes(data=True) if d["op"] == "Conv" and d["outputs"][0].name == "y"}
    assert flops == {"Conv": 2 * 2 * 5 * 8 * 8 * 4 * 9}
    assert [t.name for t in graph.inputs] == ["x"]
    assert not any("unknown shape" in w for w in graph.warnings)


def _tiny(opset: int, tmp_path, reshape: list[int] | None = None) -> str:
    """Conv -> Relu -> Conv (-> Reshape-1 -> Gemm -> Sigmoid at opset 3), its weights listed as inputs (IR 3)."""
    nodes = [_conv("c1", "x", "w1", "h"), helper.make_node("Relu", ["h"], ["r"], name="relu"), _conv("c2", "r", "w2", "y")]
    weights = [weight("w1", [4, 3, 3, 3]), weight("w2", [5, 4, 3, 3])]
    out = "y"
    if reshape is not None:
        nodes += [helper.make_node("Reshape", ["y"], ["flat"], name="flat", shape=reshape),
                  helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["fc"], name="fc", transB=1, broadcast=1),
                  helper.make_node("Sigmoid", ["fc"], ["s"], name="sig"), helper.make_node("Softmax", ["s"], ["p"])]
        weights += [weight("fc_w", [7, 5 * 8 * 8]), weight("fc_b", [7])]
        out = "p"
    model = make_model(nodes, [tensor("x", [2, 3, 8, 8])] + [tensor(w.name, list(w.dims)) for w in weights],
                       [tensor(out, None)], weights, opset=opset)
    model.ir_version = 3
    path = tmp_path / f"tiny{opset}.onnx"
    onnx.save(model, path)
    return str(path)


def test_opset_1_to_5_ops_onnx_cannot_type_keep_their_input_s_shape(tmp_path):
    """Relu-1, Gemm-1, Reshape-1, Sigmoid-1 have no type inference in ONNX: strict inference stopped at the op after
    them ("Input 0 expected to have type but instead is null"), exit 2, and the old Model Zoo's files were refused."""
    for opset in (1, 3, 5):
        graph = load_graph(_tiny(opset, tmp_path))
        assert {t.name: t.shape for t in graph.outputs} == {"y": (2, 5, 8, 8)}
        assert sum(d["flops"] for _, d in graph.dag.nodes(data=True)) == \
            sum(d["flops"] for _, d in load_graph(_tiny(6, tmp_path)).dag.nodes(data=True))
    graph = load_graph(_tiny(3, tmp_path, reshape=[0, -1]))
    assert {t.name: t.shape for t in graph.outputs} == {"p": (2, 7)}
    gemm = [d for _, d in graph.dag.nodes(data=True) if d["op"] == "Gemm"]
    assert [d["outputs"][0].shape for d in gemm] == [(2, 7)] and gemm[0]["flops"] >= 2 * 2 * 7 * 320
    assert not any("unknown shape" in w for w in graph.warnings)


def test_a_shape_inference_failure_blames_batch_and_shape_only_when_given(tmp_path, capsys):
    """A Reshape-1 to [3, 640] fails at the batch of 2 and at --batch 4: the hint about --batch/--shape was given
    when neither had been."""
    path = _tiny(3, tmp_path, reshape=[3, 640])
    status, _, err = run_cli(capsys, "graph", path)
    assert_one_line_error(status, err, "shape inference failed")
    assert "--batch" not in err
    status, _, err = run_cli(capsys, "graph", path, "--batch", "4")
    assert_one_line_error(status, err, "shape inference failed", "if you changed --batch or --shape")


def test_a_zipmap_classifier_keeps_its_sequence_output_and_ml_ops_are_named(tmp_path, capsys):
    """skl2onnx's classifiers end in ZipMap, whose output is seq(map(int64, float)): a set batch made the declared
    output a tensor, and ONNX's inference refused it ("type case mismatch. existing=tensor_type
    inferred=sequence_type", exit 2, with the --batch hint). ai.onnx.ml ops run on the CPU: the warning says so."""
    ml = "ai.onnx.ml"
    nodes = [helper.make_node("Scaler", ["x"], ["s"], name="scale", domain=ml, offset=[0.0] * 4, scale=[1.0] * 4),
             helper.make_node("LinearClassifier", ["s"], ["label", "prob"], name="clf", domain=ml,
                              classlabels_ints=[0, 1], coefficients=[0.5] * 8, intercepts=[0.0, 0.0]),
             helper.make_node("ZipMap", ["prob"], ["probs"], name="zip", domain=ml, classlabels_int64s=[0, 1])]
    probs = helper.make_value_info("probs", helper.make_sequence_type_proto(
        helper.make_map_type_proto(onnx.TensorProto.INT64, helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, []))))
    graph = helper.make_graph(nodes, "skl", [tensor("x", ["N", 4])], [tensor("label", ["N"], onnx.TensorProto.INT64), probs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(ml, 1)])
    path = tmp_path / "skl.onnx"
    onnx.save(model, path)
    status, out, err = run_cli(capsys, "infer", str(path), "--gpu", "a10g", "--batch", "3")
    assert status == 0, err
    assert "op(s) LinearClassifier, Scaler, ZipMap of the ai.onnx.ml domain (scikit-learn's and other classic ML models) " \
        "have no GPU kernel in eager PyTorch or onnxruntime's CUDA execution provider (they run on the CPU): their " \
        "time is not predicted" in " ".join(err.split() + out.split())


def test_constant_fill_takes_its_shape_from_its_input(tmp_path):
    """TorchScript's opset-7 LSTM export fills its initial state with ConstantFill (input_as_shape=1), an
    experimental op ONNX no longer has: it was unsupported, with no shape (nothing written, 'unknown shape')."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"], name="shape"),
             helper.make_node("ConstantFill", ["shape"], ["fill"], name="fill", input_as_shape=1, value=1.0, dtype=1),
             helper.make_node("Add", ["x", "fill"], ["y"], name="add")]
    model = make_model(nodes, [tensor("x", [2, 3, 5])], [tensor("y", None)], opset=7)
    path = tmp_path / "fill.onnx"
    onnx.save(model, path)
    graph = load_graph(path)
    fill = graph.dag.nodes["fill"]
    assert [t.shape for t in fill["outputs"]] == [(2, 3, 5)]
    assert (fill["flops"], fill["bytes_read"], fill["bytes_written"]) == (0, 0, 2 * 3 * 5 * 4)
    assert {t.name: t.shape for t in graph.outputs} == {"y": (2, 3, 5)}
    assert not any("ConstantFill" in w for w in graph.warnings)
