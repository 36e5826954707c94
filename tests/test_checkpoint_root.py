"""LILOU_CHECKPOINTS holding only some folders (audit ua42d, finding 3): a folder it lacks is the shipped one, said in
every prediction (it silently priced tensor-core kernels with the FP32 model, fused by rules); the leave-T4-out note
compares with the repository's folder; a missing checkpoint names the target that makes it."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from lilou.cli import main
from lilou.errors import MissingDataError
from tests.conftest import REPO

EXAMPLE = str(REPO / "examples" / "resnet18.onnx")


def test_a_root_with_only_a_new_kernel_model_uses_the_shipped_rest_and_says_so(tmp_path, monkeypatch, capsys):
    """It priced tensor-core kernels with the FP32 model and fused by rules, unsaid; and the leave-T4-out warning
    that Predictor(kernel_checkpoint=...) gives was missing (it compared with the root's own folder)."""
    root = tmp_path / "root"
    shutil.copytree(REPO / "checkpoints" / "kernel_latency", root / "kernel_latency")
    config = json.loads((root / "kernel_latency" / "config.json").read_text())
    config["trained_on"] = [gpu for gpu in config["trained_on"] if gpu != "t4"]
    (root / "kernel_latency" / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("LILOU_CHECKPOINTS", str(root))
    assert main(["infer", EXAMPLE, "--gpu", "t4", "--format", "json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert (f"LILOU_CHECKPOINTS={root} has no kernel_latency_tensor, fusion_gnn, fusion_rules, e2e_overhead: the "
            "shipped checkpoints/kernel_latency_tensor, checkpoints/fusion_gnn, checkpoints/fusion_rules, "
            "checkpoints/e2e_overhead are used in their place") in warnings
    assert any("trained on t4, which your checkpoint left out" in w for w in warnings)

    from lilou.fusion.predict import rule_table, shipped_gnn
    from lilou.fusion.rules import RuleTable

    assert shipped_gnn() is not None  # the GNN, not the rules
    tuned = RuleTable.load(REPO / "checkpoints" / "fusion_rules" / "eager.json")
    assert tuned.rules != RuleTable("eager").rules  # not the untuned default
    assert rule_table("eager").rules == tuned.rules


def test_no_note_without_lilou_checkpoints_or_with_a_full_root(tmp_path, monkeypatch):
    from lilou.checkpoints import checkpoint_notes

    monkeypatch.delenv("LILOU_CHECKPOINTS", raising=False)
    assert checkpoint_notes() == []
    monkeypatch.setenv("LILOU_CHECKPOINTS", str(REPO / "checkpoints"))
    assert checkpoint_notes() == []


@pytest.mark.parametrize(("name", "remedy"), [
    ("e2e_overhead", "`make fit-e2e`"), ("kernel_latency", "`make train-kernels`"),
    ("kernel_latency_tensor", "`make train-kernels`"), ("fusion_gnn", "`make fusion-data && make train-fusion`")])
def test_a_missing_checkpoint_names_the_target_that_makes_it(name, remedy, tmp_path, monkeypatch):
    import lilou.checkpoints as checkpoints

    monkeypatch.setattr(checkpoints, "SHIPPED_ROOT", tmp_path / "shipped")
    monkeypatch.setenv("LILOU_CHECKPOINTS", str(tmp_path / "root"))
    with pytest.raises(MissingDataError, match=re.escape(f"checkpoint {name!r} not found at {tmp_path}/root/{name}; "
                                                         f"train it with {remedy} or set LILOU_CHECKPOINTS")):
        checkpoints.checkpoint_path(name)
