"""A checkpoint of the wrong kind is one line naming the folder (audit ua42d, finding 5): a fusion checkpoint as the
kernel model was `KeyError: 'kernel_types'`, and the FP32 model in the tensor-core folder was accepted."""
from __future__ import annotations

import json
import shutil

import pytest

from lilou.cli import main
from lilou.errors import LilouInputError
from tests.conftest import REPO, checkpoint_root_replacing

EXAMPLE = str(REPO / "examples" / "resnet18.onnx")


def test_a_fusion_checkpoint_given_as_a_kernel_checkpoint_is_named(tmp_path, monkeypatch, capsys):
    from lilou.api import Predictor

    fusion = REPO / "checkpoints" / "fusion_gnn"
    with pytest.raises(LilouInputError, match=rf"^{fusion} is not a kernel-latency checkpoint: its config.json has no "
                                              r"kernel_types, .*; it looks like a fusion GNN checkpoint"):
        Predictor(kernel_checkpoint=fusion)
    root = checkpoint_root_replacing(tmp_path, "kernel_latency", fusion)
    monkeypatch.setenv("LILOU_CHECKPOINTS", str(root))
    assert main(["infer", EXAMPLE, "--gpu", "t4", "--format", "json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lilou: error: {root}/kernel_latency is not a kernel-latency checkpoint")
    assert err.count("\n") == 1


def test_the_fp32_model_in_the_tensor_core_folder_is_refused(tmp_path, monkeypatch, capsys):
    from lilou.latency.kernel_model.checkpoint import checkpoint_kind

    assert checkpoint_kind(json.loads((REPO / "checkpoints/kernel_latency/config.json").read_text())) == "kernel_latency"
    assert checkpoint_kind(json.loads((REPO / "checkpoints/kernel_latency_tensor/config.json").read_text())) == \
        "kernel_latency_tensor"
    root = checkpoint_root_replacing(tmp_path, "kernel_latency_tensor", REPO / "checkpoints" / "kernel_latency")
    monkeypatch.setenv("LILOU_CHECKPOINTS", str(root))
    assert main(["infer", EXAMPLE, "--gpu", "t4", "--format", "json"]) == 2
    assert capsys.readouterr().err == (
        f"lilou: error: {root}/kernel_latency_tensor holds the FP32 kernel model (experiment=kernel_latency, no "
        "precision features), not the tensor-core kernel model (experiment=kernel_latency_tensor): put it in the "
        "kernel_latency folder, or train the other one with `make train-kernels`\n")


def test_a_kernel_checkpoint_given_as_the_fusion_gnn_is_named(tmp_path, monkeypatch, capsys):
    """It was `internal error: KeyError: 'node_in.0.weight'`, exit 1 (audit ua43d, finding 6)."""
    root = checkpoint_root_replacing(tmp_path, "fusion_gnn", REPO / "checkpoints" / "kernel_latency")
    monkeypatch.setenv("LILOU_CHECKPOINTS", str(root))
    assert main(["infer", EXAMPLE, "--gpu", "t4", "--format", "json"]) == 2
    assert capsys.readouterr().err == (
        f"lilou: error: {root}/fusion_gnn is not a fusion GNN checkpoint: its config.json has no architecture (with "
        "layers); it looks like a kernel-latency checkpoint (checkpoints/kernel_latency or kernel_latency_tensor); "
        "train one with `make fusion-data && make train-fusion`\n")


def test_a_fusion_gnn_without_its_input_layers_is_named(tmp_path):
    from safetensors.numpy import load_file, save_file

    from lilou.fusion.gnn_predictor import FusionPredictor

    folder = tmp_path / "fusion_gnn"
    shutil.copytree(REPO / "checkpoints" / "fusion_gnn", folder)
    weights = load_file(folder / "model.safetensors")
    del weights["edge_in.0.weight"]
    save_file(weights, folder / "model.safetensors")
    with pytest.raises(LilouInputError, match=rf"^{folder} is not a fusion GNN checkpoint: its model.safetensors has "
                                              r"no edge_in.0.weight; train one"):
        FusionPredictor.load(folder)


def test_fusion_rule_folders_of_the_wrong_kind_are_named(tmp_path):
    """A kernel checkpoint as the rule folder fused by the hand-written defaults without a word; a rule file that is
    not a table was a KeyError; another backend's table was taken as this one's."""
    from lilou.checkpoints import FusionCheckpoints
    from lilou.fusion.predict import rule_table

    kernel = REPO / "checkpoints" / "kernel_latency"
    with pytest.raises(LilouInputError, match=rf"^{kernel} is not a folder of fusion rule tables: it has no eager.json; "
                                              r"it looks like a kernel-latency checkpoint .*; tune them with"):
        rule_table("eager", FusionCheckpoints(gnn=tmp_path / "none", rules=kernel))
    rules = tmp_path / "rules"
    rules.mkdir()
    assert rule_table("eager", FusionCheckpoints(gnn=tmp_path / "none", rules=rules)).rules == {}  # no table: defaults
    (rules / "eager.json").write_text(json.dumps({"backend": "eager", "rules": [{"producer": "Add"}]}))
    with pytest.raises(LilouInputError, match=rf"^{rules}/eager.json is not a fusion rule table: it needs a backend "
                                              r"and rules, each with consumer, fuse, producer, shared; tune them"):
        rule_table("eager", FusionCheckpoints(gnn=tmp_path / "none", rules=rules))
    shutil.copy(REPO / "checkpoints" / "fusion_rules" / "tvm.json", rules / "eager.json")
    with pytest.raises(LilouInputError, match=rf"^{rules}/eager.json holds the 'tvm' rule table, not 'eager''s"):
        rule_table("eager", FusionCheckpoints(gnn=tmp_path / "none", rules=rules))
