"""A checkpoint of the wrong kind is one line naming the folder (audit ua42d, finding 5): a fusion checkpoint as the
kernel model was `KeyError: 'kernel_types'`, and the FP32 model in the tensor-core folder was accepted."""
from __future__ import annotations

import json

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
