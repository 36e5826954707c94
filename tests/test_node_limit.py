"""The node-count limit of lilou.graph.loading: one line naming the count and the limit, in the CLI and the API."""
from __future__ import annotations

import onnx
import pytest
from onnx import helper

from lilou.cli import main
from lilou.errors import LilouInputError
from lilou.graph import loading
from lilou.graph.loading import MAX_NODES, load_onnx
from tests.onnx_builders import make_model, tensor


def _chain(count: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", [f"t{i - 1}" if i else "x"], [f"t{i}"], name=f"r{i}") for i in range(count)]
    return make_model(nodes, [tensor("x", [1, 8])], [tensor(f"t{count - 1}", [1, 8])])


def test_a_file_of_more_nodes_than_the_limit_is_refused_before_its_graph_is_built(tmp_path):
    path = tmp_path / "chain.onnx"
    onnx.save(_chain(MAX_NODES + 1), path)
    with pytest.raises(LilouInputError) as error:
        load_onnx(path)
    assert str(error.value) == (f"{path}: 50,001 nodes, over the 50,000 Lilou reads in one model (real models have a "
                                "few thousand); split the model, or price a shorter version of it")
    onnx.save(_chain(MAX_NODES), path)
    assert len(load_onnx(path).graph.node) == MAX_NODES


def test_the_cli_says_it_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(loading, "MAX_NODES", 10)
    path = tmp_path / "chain.onnx"
    onnx.save(_chain(11), path)
    assert main(["infer", str(path), "--gpu", "a10g"]) == 2
    err = capsys.readouterr().err
    assert err == (f"lilou: error: {path}: 11 nodes, over the 10 Lilou reads in one model (real models have a few "
                   "thousand); split the model, or price a shorter version of it\n")


def test_local_functions_count_as_inlined_and_subgraphs_count(tmp_path, monkeypatch):
    """A function of 3 nodes called 4 times is 12 nodes once inlined; an If counts itself and its branches."""
    monkeypatch.setattr(loading, "MAX_NODES", 11)
    body = [helper.make_node("Relu", ["a"], ["b"]), helper.make_node("Relu", ["b"], ["c"]),
            helper.make_node("Relu", ["c"], ["y"])]
    function = helper.make_function("local", "f3", ["a"], ["y"], body, [helper.make_opsetid("", 20)])
    calls = [helper.make_node("f3", [f"t{i - 1}" if i else "x"], [f"t{i}"], domain="local") for i in range(4)]
    model = make_model(calls, [tensor("x", [1, 8])], [tensor("t3", [1, 8])])
    model.functions.append(function)
    model.opset_import.append(helper.make_opsetid("local", 1))
    path = tmp_path / "calls.onnx"
    onnx.save(model, path)
    with pytest.raises(LilouInputError, match=r": 12 nodes, over the 11 "):
        load_onnx(path)

    branch = helper.make_graph([helper.make_node("Relu", ["x"], [f"b{i}"]) for i in range(5)] +
                               [helper.make_node("Identity", ["b0"], ["out"])], "branch", [], [tensor("out", [1, 8])])
    cond = helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, [])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)
    onnx.save(make_model([node], [cond, tensor("x", [1, 8])], [tensor("y", [1, 8])]), path)
    with pytest.raises(LilouInputError, match=r": 13 nodes, over the 11 "):
        load_onnx(path)
