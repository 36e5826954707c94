"""Each Predictor fuses with the fusion checkpoints its own construction resolved (audit ua43c, finding 1): the GNN was
cached once per process, so a Predictor made after LILOU_CHECKPOINTS changed priced with the new kernel models and
silently fused with the old GNN (ResNet-50 on an A10G: 174 kernels, 5.29 ms, instead of 102, 3.15)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from safetensors.numpy import load_file, save_file

from lilou.api import Predictor
from lilou.checkpoints import FusionCheckpoints
from lilou.fusion.predict import rule_table, shipped_gnn
from tests.conftest import REPO

EXAMPLE = str(REPO / "examples" / "resnet18.onnx")


def _eager_gnn(root: Path) -> Path:
    """``root/fusion_gnn``: the shipped GNN with every edge's logit raised by 50, so it fuses every edge it may."""
    folder = root / "fusion_gnn"
    shutil.copytree(REPO / "checkpoints" / "fusion_gnn", folder)
    weights = load_file(folder / "model.safetensors")
    weights["edge_head.2.bias"] = weights["edge_head.2.bias"] + 50.0
    save_file(weights, folder / "model.safetensors")
    return folder


def test_a_predictor_made_after_lilou_checkpoints_changed_fuses_with_the_new_gnn(tmp_path, monkeypatch):
    monkeypatch.delenv("LILOU_CHECKPOINTS", raising=False)
    first = Predictor()
    before = len(first.predict(EXAMPLE, gpu="a10g").kernels)
    monkeypatch.setenv("LILOU_CHECKPOINTS", str(tmp_path))
    gnn = _eager_gnn(tmp_path)
    second = Predictor()
    assert second.fusion_checkpoints.gnn == gnn
    assert second.fusion_checkpoints.rules == REPO.absolute() / "checkpoints" / "fusion_rules"  # the shipped stand-in
    fused = second.predict(EXAMPLE, gpu="a10g")
    assert len(fused.kernels) < before
    # the two coexist: the first keeps the checkpoints it resolved, whatever the environment says now
    assert first.fusion_checkpoints.gnn == REPO.absolute() / "checkpoints" / "fusion_gnn"
    assert len(first.predict(EXAMPLE, gpu="a10g").kernels) == before
    assert len(second.predict(first.prepare(EXAMPLE), gpu="a10g").kernels) == before  # a prepared model keeps its own
    assert len(second.predict(EXAMPLE, gpu="a10g").kernels) == len(fused.kernels)


def test_the_loaded_fusion_models_are_cached_per_folder_and_read_again_once_rewritten(tmp_path):
    shipped = FusionCheckpoints(REPO.absolute() / "checkpoints" / "fusion_gnn",
                                REPO.absolute() / "checkpoints" / "fusion_rules")
    copied = FusionCheckpoints(_eager_gnn(tmp_path), tmp_path / "fusion_rules")
    assert shipped_gnn(checkpoints=shipped) is shipped_gnn(checkpoints=shipped)
    loaded = shipped_gnn(checkpoints=copied)
    assert loaded is not shipped_gnn(checkpoints=shipped) and loaded is shipped_gnn(checkpoints=copied)
    weights = copied.gnn / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # rewritten in place
    assert shipped_gnn(checkpoints=copied) is not loaded

    assert rule_table("eager", copied).rules == {}  # a folder without tables: the hand-written defaults
    assert rule_table("eager", shipped).rules != {}
    (tmp_path / "fusion_rules").mkdir()
    shutil.copy(shipped.rules / "eager.json", copied.rules / "eager.json")
    assert rule_table("eager", copied).rules == rule_table("eager", shipped).rules


def test_asking_for_the_gnn_of_checkpoints_without_one_names_their_folder(tmp_path, monkeypatch):
    """The folder this Predictor resolved, whatever LILOU_CHECKPOINTS says now."""
    import pytest

    from lilou.errors import MissingDataError

    monkeypatch.delenv("LILOU_CHECKPOINTS", raising=False)
    empty = FusionCheckpoints(tmp_path / "fusion_gnn", tmp_path / "fusion_rules")
    with pytest.raises(MissingDataError) as error:
        shipped_gnn("gnn", empty)
    assert str(error.value) == (f"checkpoint 'fusion_gnn' not found at {tmp_path}/fusion_gnn; train it with `make "
                                "fusion-data && make train-fusion` or set LILOU_CHECKPOINTS to a folder that has it")
    assert shipped_gnn("auto", empty) is None and shipped_gnn("rules") is None
